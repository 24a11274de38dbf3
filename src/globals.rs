//! Global functions registered at start-up: module loading, the executor constructor, and the
//! container and introspection helpers TVM's Python package binds by name.

#![forbid(unsafe_code)]

use crate::dlpack::{kDLCPU, DLDevice};
use crate::error::{Error, Result};
use crate::executor::GraphExecutor;
use crate::library;
use crate::module::Module;
use crate::object::{AnyObject, ObjRef};
use crate::packed::{Args, ArrayObj, MapObj, PackedFunc, RetValue, ShapeTupleObj, StringObj};
use crate::params;
use crate::tensor::NDArray;

type Register<'a> = dyn FnMut(&str, ObjRef<PackedFunc>) + 'a;

fn def(reg: &mut Register<'_>, name: &'static str, f: fn(&Args<'_>) -> Result<RetValue>) {
    reg(name, PackedFunc::native(move |a| f(a).map_err(|e| e.context(name))));
}

pub fn register_builtins(reg: &mut Register<'_>) {
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
    def(reg, "runtime.SystemLib", |a| {
        let prefix = if a.is_empty() { "" } else { a.str(0)? };
        Ok(library::system_lib(prefix)?.into())
    });
    def(reg, "tvm.graph_executor.create", |a| create_executor(a, false));
    def(reg, "tvm.graph_executor_debug.create", |a| create_executor(a, true));
    def(reg, "device_api.cpu", |_| Ok(RetValue::Handle(std::ptr::NonNull::<u8>::dangling().as_ptr().cast())));
    def(reg, "runtime.RuntimeEnabled", |a| Ok(matches!(a.str(0)?, "cpu" | "llvm" | "c").into()));
    def(reg, "runtime.GetDeviceAttr", |a| {
        let (dev_type, kind) = (a.int(0)?, a.int(2)?);
        Ok(match kind {
            0 => RetValue::Int((dev_type == kDLCPU as i64) as i64),
            _ => RetValue::None,
        })
    });
    def(reg, "runtime.TVMSetStream", |_| Ok(RetValue::None));

    // Arrays.
    def(reg, "runtime.TVMArrayAllocWithScope", |a| {
        let shape = a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?;
        let dtype = crate::dtype::parse(a.str(1)?)?;
        let dev = a.device(2)?;
        if a.len() > 3 && a.code(3) != crate::dlpack::kTVMNullptr {
            let scope = a.str(3)?;
            if !scope.is_empty() && scope != "global" {
                return Err(Error::value(format!("memory scope '{scope}' is not supported on the CPU")));
            }
        }
        Ok(NDArray::empty(shape.dims(), dtype, dev)?.into())
    });
    def(reg, "runtime.TVMArrayCreateView", |a| {
        let arr = a.ndarray(0)?;
        let shape = a.typed_object::<ShapeTupleObj>(1, "ShapeTuple")?;
        let dtype = if a.len() > 2 { crate::dtype::parse(a.str(2)?)? } else { arr.dtype() };
        Ok(NDArray::create_view(&arr, shape.dims(), dtype)?.into())
    });

    // Params.
    def(reg, "runtime.SaveParams", |a| Ok(RetValue::Bytes(save_params(a)?)));
    // The debug executor's Python side dumps tensors with the compiler's name for the same thing.
    def(reg, "tvm.relay._save_param_dict", |a| Ok(RetValue::Bytes(save_params(a)?)));
    def(reg, "runtime.SaveParamsToFile", |a| {
        let bytes = save_params(a)?;
        let path = a.str(1)?;
        std::fs::write(path, bytes).map_err(|e| Error::io(path, e))?;
        Ok(RetValue::None)
    });
    def(reg, "runtime.LoadParams", |a| load_params_map(a.bytes(0)?));
    def(reg, "runtime.AlignParams", |a| Ok(RetValue::Bytes(params::align(a.bytes(0)?)?)));
    def(reg, "runtime.LoadParamsFromFile", |a| {
        let path = a.str(0)?;
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        load_params_map(&bytes)
    });

    // Containers.
    def(reg, "runtime.String", |a| Ok(StringObj::new(a.str(0)?).into()));
    def(reg, "runtime.GetFFIString", |a| Ok(a.str(0)?.into()));
    def(reg, "runtime.ShapeTuple", |a| {
        let dims = (0..a.len()).map(|i| a.int(i)).collect::<Result<Vec<_>>>()?;
        Ok(ShapeTupleObj::new(&dims).into())
    });
    def(reg, "runtime.GetShapeTupleSize", |a| {
        Ok(RetValue::Int(a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?.dims().len() as i64))
    });
    def(reg, "runtime.GetShapeTupleElem", |a| {
        let t = a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?;
        let i = a.int(1)?;
        let v = usize::try_from(i).ok().and_then(|i| t.dims().get(i).copied());
        v.map(RetValue::Int).ok_or_else(|| Error::index(format!("index {i} out of range ({} dims)", t.dims().len())))
    });
    def(reg, "runtime.Array", |a| Ok(ArrayObj::new(objects(a, 0)?).into()));
    def(reg, "runtime.ArraySize", |a| Ok(RetValue::Int(a.typed_object::<ArrayObj>(0, "Array")?.items().len() as i64)));
    def(reg, "runtime.ArrayGetItem", |a| {
        let arr = a.typed_object::<ArrayObj>(0, "Array")?;
        let i = a.int(1)?;
        let item = usize::try_from(i).ok().and_then(|i| arr.items().get(i).cloned());
        item.map(RetValue::Object)
            .ok_or_else(|| Error::index(format!("index {i} out of range ({} items)", arr.items().len())))
    });
    def(reg, "runtime.Map", |a| {
        if a.len() % 2 != 0 {
            return Err(Error::type_err("runtime.Map takes key, value pairs"));
        }
        let items = objects(a, 0)?;
        let pairs = items.chunks(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect();
        Ok(MapObj::new(pairs).into())
    });
    def(reg, "runtime.MapSize", |a| Ok(RetValue::Int(a.typed_object::<MapObj>(0, "Map")?.entries().len() as i64)));
    def(reg, "runtime.MapGetItem", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        let key = object_arg(a, 1)?;
        map.get(&key).cloned().map(RetValue::Object).ok_or_else(|| Error::key("key is not in the map"))
    });
    def(reg, "runtime.MapCount", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        Ok(RetValue::Int(map.get(&object_arg(a, 1)?).is_some() as i64))
    });
    def(reg, "runtime.MapItems", |a| {
        let map = a.typed_object::<MapObj>(0, "Map")?;
        let flat = map.entries().iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect();
        Ok(ArrayObj::new(flat).into())
    });
    def(reg, "runtime.ObjectPtrHash", |a| Ok(RetValue::Int(object_arg(a, 0)?.as_ptr() as i64)));

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

    def(reg, "runtime.RPCTimeEvaluator", crate::time_evaluator::create);

    // What CPU kernels of argsort, sort, topk and NMS call.
    def(reg, "tvm.contrib.sort.argsort", crate::contrib_sort::argsort);
    def(reg, "tvm.contrib.sort.sort", crate::contrib_sort::sort);
    def(reg, "tvm.contrib.sort.topk", crate::contrib_sort::topk);
    def(reg, "tvm.contrib.sort.argsort_nms", crate::contrib_sort::argsort_nms);

    // Threads.
    def(reg, "runtime.NumThreads", |_| Ok(RetValue::Int(crate::backend::thread_pool::num_threads() as i64)));
    def(reg, "runtime.config_threadpool", |a| {
        let n = a.int(1)?;
        crate::backend::thread_pool::configure(usize::try_from(n).unwrap_or(0));
        Ok(RetValue::None)
    });
}

fn object_arg(a: &Args<'_>, i: usize) -> Result<AnyObject> {
    if a.code(i) == crate::dlpack::kTVMStr {
        return Ok(StringObj::new(a.str(i)?).into_any());
    }
    a.object(i)?.ok_or_else(|| Error::value(format!("argument {i} is null")))
}

fn objects(a: &Args<'_>, from: usize) -> Result<Vec<AnyObject>> {
    (from..a.len()).map(|i| object_arg(a, i)).collect()
}

fn save_params(a: &Args<'_>) -> Result<Vec<u8>> {
    let map = a.typed_object::<MapObj>(0, "Map")?;
    let mut items = Vec::new();
    for (k, v) in map.entries() {
        let name = k.downcast_ref::<StringObj>().ok_or_else(|| Error::type_err("params keys must be strings"))?;
        let arr = v.downcast_ref::<NDArray>().ok_or_else(|| Error::type_err("params values must be NDArrays"))?;
        items.push((name, arr));
    }
    Ok(params::save(items.iter().map(|(k, v)| (k.as_str(), &**v))))
}

fn load_params_map(bytes: &[u8]) -> Result<RetValue> {
    let pairs = params::parse(bytes)?
        .into_iter()
        .map(|(name, rec)| Ok((name, rec.to_ndarray()?.into_any())))
        .collect::<Result<Vec<_>>>()?;
    Ok(MapObj::from_str_pairs(pairs).into())
}

/// `tvm.graph_executor.create(graph_json, module, [lookup_linked_param,] dev_type, dev_id, ...)`.
fn create_executor(a: &Args<'_>, debug: bool) -> Result<RetValue> {
    if a.len() < 4 {
        return Err(Error::type_err(format!(
            "expects at least 4 arguments (graph_json, module, dev_type, dev_id), {} given",
            a.len()
        )));
    }
    let json = a.str(0)?;
    let lib = a.module(1)?;
    let first_dev = if a.code(2) == crate::dlpack::kTVMPackedFuncHandle { 3 } else { 2 };
    if (a.len() - first_dev) % 2 != 0 {
        return Err(Error::type_err("devices must be given as (device_type, device_id) pairs"));
    }
    let device = DLDevice { device_type: a.int32(first_dev)?, device_id: a.int32(first_dev + 1)? };
    let plan = crate::executor::plan::Plan::new(json, lib, device)?;
    let ex = if debug { GraphExecutor::new_debug(plan)? } else { GraphExecutor::new(plan)? };
    Ok(Module::new(ex).into())
}
