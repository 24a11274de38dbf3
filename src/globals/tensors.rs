//! Devices, arrays, params blobs, and the sort kernels' helpers.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::device::{self, Attr};
use crate::error::{Error, Result};
use crate::packed::{Args, MapObj, RetValue, ShapeTupleObj, StringObj};
use crate::params;
use crate::tensor::NDArray;

pub(super) fn register(reg: &mut Register<'_>) {
    // Upstream hands out its C++ DeviceAPI object; only its presence is observable from C.
    let present = |_: &Args<'_>| Ok(RetValue::Handle(std::ptr::NonNull::<u8>::dangling().as_ptr().cast()));
    def(reg, "device_api.cpu", present);
    def(reg, "device_api.opencl", present);
    // The OpenCL program cache (off by default; device/opencl/program_cache.rs says why): a
    // directory, or "" for none, over TVM_RT_OPENCL_PROGRAM_CACHE.
    def(reg, "tvmrt.opencl.SetProgramCache", |a| {
        a.expect_count("tvmrt.opencl.SetProgramCache", 1, 1)?;
        let dir = a.str(0)?;
        device::opencl::set_program_cache((!dir.is_empty()).then(|| dir.into()));
        Ok(RetValue::None)
    });
    def(reg, "runtime.RuntimeEnabled", |a| Ok(matches!(a.str(0)?, "cpu" | "llvm" | "c" | "opencl" | "cl").into()));
    def(reg, "runtime.GetDeviceAttr", |a| {
        let (dev_type, dev_id, kind) = (a.int32(0)?, a.int32(1)?, a.int32(2)?);
        let api = match device::api(dev_type) {
            Ok(api) => api,
            // Existence is the one question a missing device answers.
            Err(_) if kind == device::attr::EXIST => return Ok(RetValue::Int(0)),
            Err(e) => return Err(e),
        };
        Ok(match api.attr(dev_id, kind)? {
            Some(Attr::Int(v)) => RetValue::Int(v),
            Some(Attr::Str(s)) => RetValue::Str(s),
            None => RetValue::None,
        })
    });
    // What generated host code calls before launching kernels on a device.
    def(reg, "__tvm_set_device", |a| {
        device::api(a.int32(0)?)?.set_device(a.int32(1)?)?;
        Ok(RetValue::None)
    });
    def(reg, "runtime.TVMSetStream", |_| Ok(RetValue::None));

    // Arrays.
    def(reg, "runtime.TVMArrayAllocWithScope", |a| {
        let shape = a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?;
        let dtype = crate::dtype::parse(a.str(1)?)?;
        let dev = a.device(2)?;
        if a.len() > 3 && a.code(3) != crate::dlpack::kTVMNullptr {
            device::check_memory_scope(a.str(3)?)?;
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
    // Derived records of a prepared file that cannot be verified against its weights are dropped.
    def(reg, "runtime.AlignParams", |a| Ok(RetValue::Bytes(crate::prepared_params::align(a.bytes(0)?)?.0)));
    def(reg, "runtime.LoadParamsFromFile", |a| {
        let path = a.str(0)?;
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        load_params_map(&bytes)
    });

    // What CPU kernels of argsort, sort, topk and NMS call.
    def(reg, "tvm.contrib.sort.argsort", crate::contrib_sort::argsort);
    def(reg, "tvm.contrib.sort.sort", crate::contrib_sort::sort);
    def(reg, "tvm.contrib.sort.topk", crate::contrib_sort::topk);
    def(reg, "tvm.contrib.sort.argsort_nms", crate::contrib_sort::argsort_nms);
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
