//! The Relay VM's globals: making VMs, loading executables, and reading the tuples they return.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::error::{Error, Result};
use crate::module::ModuleArg;
use crate::object::AnyObject;
use crate::packed::{Args, RetValue};
use crate::vm::objects::AdtObj;
use crate::vm::{self, VirtualMachine};

fn adt(a: &Args<'_>) -> Result<crate::object::ObjRef<AdtObj>> {
    a.typed_object::<AdtObj>(0, "ADT")
}

fn index_arg(a: &Args<'_>, i: usize, len: usize) -> Result<usize> {
    let v = a.int(i)?;
    usize::try_from(v).ok().filter(|&v| v < len).ok_or_else(|| Error::index(format!("index {v} of {len}")))
}

pub(super) fn register(reg: &mut Register<'_>) {
    def(reg, "runtime._VirtualMachine", |a| Ok(VirtualMachine::create(&a.module(0)?, false)?.into()));
    def(reg, "runtime._VirtualMachineDebug", |a| Ok(VirtualMachine::create(&a.module(0)?, true)?.into()));
    def(reg, "runtime.Load_Executable", |a| {
        a.expect_count("runtime.Load_Executable", 1, 2)?;
        let lib = if a.len() > 1 { a.object(1)?.map(|_| a.module(1)).transpose()? } else { None };
        Ok(vm::load_executable(a.bytes(0)?, lib)?.into())
    });
    def(reg, "runtime.module.loadbinary_VMExecutable", |a| {
        // The bytes of a blob entry (the bytecode as one string).
        let bytes = a.bytes(0)?;
        let mut r = crate::stream::Reader::new(bytes, "VMExecutable");
        let n = r.count(1)?;
        let code = r.bytes(n)?;
        Ok(vm::load_executable(code, None)?.into())
    });
    def(reg, "runtime.module.loadfile_VMExecutable", |a| Ok(vm::load_file(std::path::Path::new(a.str(0)?))?.into()));
    def(reg, "runtime.GetNumOfGlobals", |a| {
        Ok(RetValue::Int(vm::executable_of(&a.module(0)?)?.program.globals.len() as i64))
    });
    def(reg, "runtime.GetGlobalFields", |a| {
        let exe = vm::executable_of(&a.module(0)?)?;
        let g = &exe.program.globals;
        Ok(g[index_arg(a, 1, g.len())?].as_str().into())
    });
    def(reg, "runtime.GetNumOfPrimitives", |a| {
        Ok(RetValue::Int(vm::executable_of(&a.module(0)?)?.program.primitives.len() as i64))
    });
    def(reg, "runtime.GetPrimitiveFields", |a| {
        let exe = vm::executable_of(&a.module(0)?)?;
        let p = &exe.program.primitives;
        Ok(p[index_arg(a, 1, p.len())?].as_str().into())
    });
    // Tuples and other algebraic data, as TVM's Python reads and makes them.
    def(reg, "runtime.GetADTTag", |a| Ok(RetValue::Int(adt(a)?.tag())));
    def(reg, "runtime.GetADTSize", |a| Ok(RetValue::Int(adt(a)?.fields().len() as i64)));
    def(reg, "runtime.GetADTFields", |a| {
        let t = adt(a)?;
        Ok(t.fields()[index_arg(a, 1, t.fields().len())?].clone().into())
    });
    def(reg, "runtime.Tuple", |a| Ok(AdtObj::new(0, fields(a, 0)?).into_any().into()));
    def(reg, "runtime.ADT", |a| {
        if a.is_empty() {
            return Err(Error::value("runtime.ADT(tag, fields...)"));
        }
        Ok(AdtObj::new(a.int(0)?, fields(a, 1)?).into_any().into())
    });
}

fn fields(a: &Args<'_>, from: usize) -> Result<Vec<AnyObject>> {
    (from..a.len()).map(|i| a.object(i)?.ok_or_else(|| Error::value(format!("field {} is null", i - from)))).collect()
}
