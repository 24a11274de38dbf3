//! Devices, arrays, params blobs, and the sort kernels' helpers.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::device::{self, Attr};
use crate::error::{Error, Result};
use crate::packed::{Args, MapObj, RetValue, ShapeTupleObj, StringObj};
use crate::params;
use crate::tensor::NDArray;

/// Refuses texture scratch anywhere but OpenCL, or in a scope that is not a texture's.
fn texture_scratch_device(device_type: i32, scope: &str) -> Result<()> {
    if device_type != crate::dlpack::kDLOpenCL {
        return Err(Error::value(format!("texture scratch is served on OpenCL (4), not device type {device_type}")));
    }
    match device::texture::Texture::of_scope(scope)? {
        Some(_) => Ok(()),
        None => Err(Error::value(format!("'{scope}' is not a texture scope"))),
    }
}

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
        // A folder a caller names: confined as every such path is (crate::files).
        let dir = if dir.is_empty() { None } else { Some(crate::files::directory(std::path::Path::new(dir), true)?) };
        device::opencl::set_program_cache(dir);
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
    // Texture scratch of kernels built for TVM's Adreno target: (device type, id, dtype code, bits,
    // scope, ndim = 2, shape = {width, height}) -> an image; (type, id, scope, image) gives it back.
    def(reg, "device_api.opencl.alloc_nd", |a| {
        a.expect_count("device_api.opencl.alloc_nd", 7, 7)?;
        texture_scratch_device(a.int32(0)?, a.str(4)?)?;
        let dtype = crate::dlpack::DLDataType { code: a.int32(2)? as u8, bits: a.int32(3)? as u8, lanes: 1 };
        if a.int(5)? != 2 {
            return Err(Error::value(format!("a texture's shape has 2 axes (width, height), not {}", a.int(5)?)));
        }
        let wh = a.i64_array(6, 2)?;
        let size = |v: i64| usize::try_from(v).map_err(|_| Error::value(format!("texture size {v}")));
        Ok(RetValue::Handle(device::opencl::alloc_scratch(a.int32(1)?, size(wh[0])?, size(wh[1])?, dtype)?))
    });
    def(reg, "device_api.opencl.free_nd", |a| {
        a.expect_count("device_api.opencl.free_nd", 4, 4)?;
        texture_scratch_device(a.int32(0)?, a.str(2)?)?;
        device::opencl::free_scratch(a.int32(1)?, a.handle(3)?)?;
        Ok(RetValue::Int(0))
    });

    // Arrays.
    def(reg, "runtime.TVMArrayAllocWithScope", |a| {
        let shape = a.typed_object::<ShapeTupleObj>(0, "ShapeTuple")?;
        let dtype = crate::dtype::parse(a.str(1)?)?;
        let dev = a.device(2)?;
        let scope = if a.len() > 3 && a.code(3) != crate::dlpack::kTVMNullptr { a.str(3)? } else { "" };
        Ok(NDArray::empty_in(shape.dims(), dtype, dev, scope)?.into())
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
        crate::files::write_whole(std::path::Path::new(a.str(1)?), &bytes)?;
        Ok(RetValue::None)
    });
    def(reg, "runtime.LoadParams", |a| load_params_map(a.bytes(0)?));
    // Derived records of a prepared file that cannot be verified against its weights are dropped.
    def(reg, "runtime.AlignParams", |a| Ok(RetValue::Bytes(crate::prepared_params::align(a.bytes(0)?)?.0)));
    def(reg, "runtime.LoadParamsFromFile", |a| load_params_map(&crate::files::read(std::path::Path::new(a.str(0)?))?));
    // What a params file (bytes, or a path) holds, as JSON: the digest of its weights, and for a
    // prepared file whether its derived records are the ones made from those weights. A host that
    // made the file (Serve's replicas) refuses one that is not: damaged, or edited since.
    def(reg, "tvmrt.params.Check", |a| {
        a.expect_count("tvmrt.params.Check", 1, 1)?;
        let read;
        let bytes = if a.is_name(0) {
            read = crate::files::read(std::path::Path::new(a.str(0)?))?;
            &read[..]
        } else {
            a.bytes(0)?
        };
        Ok(RetValue::Str(check_params(bytes)?.to_string()))
    });

    // What CPU kernels of argsort, sort, topk and NMS call.
    def(reg, "tvm.contrib.sort.argsort", crate::contrib_sort::argsort);
    def(reg, "tvm.contrib.sort.sort", crate::contrib_sort::sort);
    def(reg, "tvm.contrib.sort.topk", crate::contrib_sort::topk);
    def(reg, "tvm.contrib.sort.argsort_nms", crate::contrib_sort::argsort_nms);
}

fn check_params(bytes: &[u8]) -> Result<serde_json::Value> {
    use crate::prepared_params as prepared;
    let records = params::parse(bytes)?;
    let weights = records.iter().filter(|(n, _)| prepared::is_weight_record(n)).count();
    let prepared = match prepared::verified_stamp(&records) {
        Ok(None) => serde_json::Value::Null,
        Ok(Some(stamp)) => serde_json::json!({"verified": true, "builds": stamp.builds.len()}),
        Err(why) => serde_json::json!({"verified": false, "why": why}),
    };
    Ok(serde_json::json!({
        "weights": weights,
        "weights_digest": format!("{:016x}", prepared::weights_digest(&records)),
        "prepared": prepared,
    }))
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
