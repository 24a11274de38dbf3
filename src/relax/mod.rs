//! The Relax virtual machine: executables `relax.build` / `tvm.compile` made (TVM 0.19 to 0.27,
//! all three ABI generations; see [`image::Generation`]), and the machine that runs them.
//!
//! - [`image`]: the executable's bytes (header, functions, memory scopes, constants, code);
//! - [`code`]: the four instructions, every operand checked when read;
//! - [`constants`]: tensor constants held once per process, whichever load brought them;
//! - [`value`]: what registers hold, and their crossings to hosts and kernels;
//! - [`builtins`]: the `vm.builtin.*` set ordinary models call, run inside the machine;
//! - [`run_ops`]: the `relax.run.*` operators upstream runs from its Python package;
//! - [`machine`]: the executable as shared, and the interpreter (no per-call state: any number
//!   of threads call one VM);
//! - [`modules`]: the executable and VM modules, with upstream's function tables;
//! - [`signature`]: a function's parameters as its own checks describe them;
//! - [`text`]: `stats`, `as_text`, `as_python`, and the tool's description.
//!
//! An executable arrives in its library's blob: the classic `__tvm_dev_mblob` (0.19-0.20) or the
//! ffi blobs (0.21, 0.22+), which the library layer tells apart and hands to [`LOADERS`].

pub mod builtins;
pub mod code;
pub mod constants;
pub mod image;
pub mod machine;
pub mod modules;
pub mod run_ops;
pub mod signature;
pub mod text;
pub mod value;

use crate::error::Result;
use crate::library::blob::Container;
use crate::module::{Loader, Module};
use crate::object::ObjRef;
use crate::stream::Reader;
use image::Generation;

pub use machine::{Executable, Machine};
pub use modules::{executable_of, ExecutableModule, VirtualMachine};

/// The classic blobs hold the executable as one length-prefixed string.
fn prefixed(r: &mut Reader<'_>, generation: Generation, key: &'static str) -> Result<ObjRef<Module>> {
    let n = r.count(1)?;
    Ok(ExecutableModule::module(Executable::from_bytes(r.bytes(n)?, generation)?, key))
}

/// tvm-ffi's blob hands a loader the module's bytes whole.
fn whole(r: &mut Reader<'_>, generation: Generation, key: &'static str) -> Result<ObjRef<Module>> {
    let n = r.remaining();
    Ok(ExecutableModule::module(Executable::from_bytes(r.bytes(n)?, generation)?, key))
}

/// The blob loaders: 0.19's `relax.Executable`, 0.20's `relax.VMExecutable` (classic), 0.21's
/// (in-tree ffi) and 0.22+'s (tvm-ffi).
pub const LOADERS: &[(Container, &str, Loader)] = &[
    (Container::Classic, "relax.Executable", |r| prefixed(r, Generation::Classic, "relax.Executable")),
    (Container::Classic, "relax.VMExecutable", |r| prefixed(r, Generation::Classic, "relax.VMExecutable")),
    (Container::InTreeFfi, "relax.VMExecutable", |r| prefixed(r, Generation::InTreeFfi, "relax.VMExecutable")),
    (Container::Ffi, "relax.VMExecutable", |r| whole(r, Generation::Ffi, "relax.VMExecutable")),
];
