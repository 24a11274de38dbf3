//! The Relay virtual machine: executables `relay.vm.compile` made (models whose shapes move: a
//! batch or sequence left `Any`, detection heads, control flow), of every bytecode generation
//! from TVM 0.8 to 0.19, and the machine that runs them. Upstream removed it after 0.19.
//!
//! - [`image`]: the bytecode file, read and written (three generations);
//! - [`code`]: the instructions, every operand checked when read;
//! - [`executable`]: code, constants (once on the host, once per device) and storage pools, shared
//!   by every VM of an executable;
//! - [`storage`]: the pools storage comes from (reused across shapes, bounded);
//! - [`machine`]: the interpreter;
//! - [`modules`]: `VMExecutable` and `VirtualMachine` with upstream's function tables;
//! - [`objects`]: tuples (`runtime.ADT`) and closures;
//! - [`profiler`], [`text`]: reports.
//!
//! The executable is loaded from a module blob (`export_library` of `exe.mod`: the blob's root is a
//! `VMExecutable` entry holding the bytecode as one string, its import the kernels) or from the
//! bytecode and a library (`runtime.Load_Executable`, the split form `exe.save()` makes).

pub mod code;
pub mod executable;
pub mod image;
pub mod machine;
pub mod modules;
pub mod objects;
pub mod profiler;
mod registers;
pub mod storage;
pub mod text;

use crate::error::Result;
use crate::module::Module;
use crate::object::ObjRef;

pub use executable::Executable;
pub use modules::{executable_of, ExecutableModule, VirtualMachine};

/// The module blob's loader of `VMExecutable` entries (upstream's
/// `runtime.module.loadbinary_VMExecutable`): the bytecode as one string.
pub const LOADERS: &[(&str, crate::module::Loader)] = &[("VMExecutable", |r| {
    let n = r.count(1)?;
    let code = r.bytes(n)?;
    Ok(ExecutableModule::module(Executable::from_bytes(code)?))
})];

/// `runtime.Load_Executable(code, lib)`: the split form.
pub fn load_executable(code: &[u8], lib: Option<ObjRef<Module>>) -> Result<ObjRef<Module>> {
    let exe = ExecutableModule::module(Executable::from_bytes(code)?);
    if let Some(lib) = lib {
        Module::import(&exe, lib)?;
    }
    Ok(exe)
}

/// `runtime.module.loadfile_VMExecutable`: a file holding what a blob entry holds (the bytecode
/// as one string).
pub fn load_file(path: &std::path::Path) -> Result<ObjRef<Module>> {
    let bytes = crate::files::read(path)?;
    let mut r = crate::stream::Reader::new(&bytes, "VMExecutable file");
    let n = r.count(1)?;
    let code = r.bytes(n)?;
    load_executable(code, None)
}
