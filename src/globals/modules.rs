//! Loading modules, inspecting them, and creating graph executors.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::executor::pool::{self, ArenaPool, PoolModule};
use crate::executor::GraphExecutor;
use crate::library;
use crate::module::Module;
use crate::module::ModuleArg;
use crate::object::ObjRef;
use crate::packed::{Args, ArrayObj, RetValue, StringObj};

pub(super) fn register(reg: &mut Register<'_>) {
    def(reg, "runtime.ModuleLoadFromFile", |a| {
        let fmt = if a.len() > 1 { a.str(1)? } else { "" };
        Ok(library::load_file(a.str(0)?, fmt)?.into())
    });
    for name in [
        "runtime.module.loadfile_so",
        "runtime.module.loadfile_dll",
        "runtime.module.loadfile_dylib",
        "runtime.module.loadfile_dso",
    ] {
        def(reg, name, |a| Ok(library::load_shared_library(a.str(0)?)?.into()));
    }
    def(reg, "tvmrt.LoadPlugin", |a| {
        a.expect_count("tvmrt.LoadPlugin", 1, 1)?;
        library::load_plugin(a.str(0)?).map(|()| RetValue::None)
    });
    def(reg, "runtime.SystemLib", |a| {
        let prefix = if a.is_empty() { "" } else { a.str(0)? };
        Ok(library::system_lib(prefix)?.into())
    });
    def(reg, "tvm.graph_executor.create", |a| create_executor(a, false));
    def(reg, "tvm.aot_executor_factory.create", crate::aot::factory::create_factory);
    def(reg, "tvm.graph_executor_debug.create", |a| create_executor(a, true));
    // Pools of activation arenas (executor/pool.rs): an explicit one executors join
    // (`join_arena_pool`, or the pool's `join`), and the default capacity executors made from now
    // on draw from their device's pool with (0: none; over TVM_RT_ARENA_POOL).
    def(reg, "tvmrt.executor.ArenaPool", |a| {
        a.expect_count("tvmrt.executor.ArenaPool", 3, 3)?;
        let device = DLDevice { device_type: a.int32(0)?, device_id: a.int32(1)? };
        let capacity = usize::try_from(a.int(2)?).map_err(|_| Error::value("a negative capacity"))?;
        Ok(PoolModule::wrap(ArenaPool::new(device, capacity)?).into())
    });
    def(reg, "tvmrt.executor.SetArenaPool", |a| {
        a.expect_count("tvmrt.executor.SetArenaPool", 1, 1)?;
        let capacity = usize::try_from(a.int(0)?).map_err(|_| Error::value("a negative capacity"))?;
        pool::default::set_capacity(capacity).map(Into::into)
    });
    def(reg, "tvmrt.executor.GetArenaPool", |a| {
        a.expect_count("tvmrt.executor.GetArenaPool", 2, 2)?;
        let device = DLDevice { device_type: a.int32(0)?, device_id: a.int32(1)? };
        Ok(pool::default::pool(device)?.map_or(RetValue::None, |p| PoolModule::wrap(p).into()))
    });
    // Modules.
    def(reg, "runtime.ModuleGetTypeKey", |a| Ok(a.module(0)?.type_key().into()));
    def(reg, "runtime.ModuleImportsSize", |a| Ok(RetValue::Int(a.module(0)?.imports().len() as i64)));
    def(reg, "runtime.ModuleGetImport", |a| {
        let m = a.module(0)?;
        let i = a.int(1)?;
        let imp = usize::try_from(i).ok().and_then(|i| m.imports().get(i).cloned());
        imp.map(Into::into).ok_or_else(|| Error::index(format!("import {i} out of range")))
    });
    def(reg, "runtime.ModuleClearImports", |a| {
        a.module(0)?.clear_imports();
        Ok(RetValue::None)
    });
    // What upstream's ModuleNode virtuals answer (GetSource, GetFormat, SaveToFile), for every
    // module: this runtime's own, and a plug-in's, whose own virtuals are called.
    def(reg, "runtime.ModuleGetSource", |a| {
        let fmt = if a.len() > 1 { a.str(1)? } else { "" };
        Ok(a.module(0)?.source(fmt)?.into())
    });
    def(reg, "runtime.ModuleGetFormat", |a| Ok(a.module(0)?.format()?.into()));
    def(reg, "runtime.ModuleSaveToFile", |a| {
        a.expect_count("runtime.ModuleSaveToFile", 2, 3)?;
        let fmt = if a.len() > 2 { a.str(2)? } else { "" };
        a.module(0)?.save_to_file(a.str(1)?, fmt)?;
        Ok(RetValue::None)
    });
    def(reg, "runtime.ModuleLoadStaticLibrary", |a| {
        a.expect_count("runtime.ModuleLoadStaticLibrary", 1, 2)?;
        let names =
            if a.len() > 1 { string_items(&a.typed_object::<ArrayObj>(1, "Array<String>")?)? } else { Vec::new() };
        Ok(library::static_library::StaticLibrary::load(a.str(0)?, names)?.into())
    });
    def(reg, "runtime.ModuleGetPropertyMask", |a| Ok(RetValue::Int(a.module(0)?.property_mask() as i64)));
    def(reg, "runtime.ModuleIsDSOExportable", |a| {
        Ok((a.module(0)?.property_mask() & crate::module::property::DSO_EXPORTABLE != 0).into())
    });
    def(reg, "runtime.ModuleImplementsFunction", |a| {
        let q = a.len() > 2 && a.int(2)? != 0;
        Ok(Module::get_function(&a.module(0)?, a.str(1)?, q)?.is_some().into())
    });
    def(reg, "runtime.ModuleGetFunction", |a| {
        let q = a.len() > 2 && a.int(2)? != 0;
        let name = a.str(1)?;
        Module::get_function(&a.module(0)?, name, q)?
            .map(Into::into)
            .ok_or_else(|| Error::attribute(format!("module has no function '{name}'")))
    });
}

/// The strings of an `Array<String>`.
fn string_items(array: &ObjRef<ArrayObj>) -> Result<Vec<String>> {
    array
        .items()
        .iter()
        .map(|o| {
            o.downcast_ref::<StringObj>()
                .map(|s| s.as_str().to_string())
                .ok_or_else(|| Error::type_err("expected an Array of strings"))
        })
        .collect()
}

/// `tvm.graph_executor.create(graph_json, module, [lookup_linked_param,] dev_type, dev_id, ...)`.
fn create_executor(a: &Args<'_>, debug: bool) -> Result<RetValue> {
    if a.len() < 4 {
        return Err(Error::type_err(format!(
            "expects at least 4 arguments (graph_json, module, dev_type, dev_id), {} given",
            a.len()
        )));
    }
    let json = crate::graph::first_json_value(a.bytes(0)?)?;
    let lib = a.module(1)?;
    let first_dev = if a.code(2) == crate::dlpack::kTVMPackedFuncHandle { 3 } else { 2 };
    if (a.len() - first_dev) % 2 != 0 {
        return Err(Error::type_err("devices must be given as (device_type, device_id) pairs"));
    }
    let devices = (first_dev..a.len())
        .step_by(2)
        .map(|i| Ok(DLDevice { device_type: a.int32(i)?, device_id: a.int32(i + 1)? }))
        .collect::<Result<Vec<_>>>()?;
    let plan = crate::executor::plan::Plan::with_devices(json, lib, &devices)?;
    let ex = if debug { GraphExecutor::new_debug(plan)? } else { GraphExecutor::new(plan)? };
    Ok(Module::new(ex).into())
}
