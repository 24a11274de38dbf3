//! Global functions registered at start-up, by what they serve: loading and inspecting modules
//! and creating executors, tensors and params, containers, threads and timing. [`register_all`]
//! hands them to whoever builds the registry (the C boundary's `init`); nothing here reads the
//! registry back.

#![forbid(unsafe_code)]

mod containers;
mod modules;
mod profiling;
mod rpc;
mod runtime;
mod tensors;
mod vm;

use crate::error::Result;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};

pub type Register<'a> = dyn FnMut(&str, ObjRef<PackedFunc>) + 'a;

fn def(reg: &mut Register<'_>, name: &'static str, f: fn(&Args<'_>) -> Result<RetValue>) {
    reg(name, PackedFunc::native(move |a| f(a).map_err(|e| e.context(name))));
}

/// Every built-in global function, in one pass.
pub fn register_all(reg: &mut Register<'_>) {
    modules::register(reg);
    tensors::register(reg);
    containers::register(reg);
    runtime::register(reg);
    profiling::register(reg);
    rpc::register(reg);
    vm::register(reg);
}
