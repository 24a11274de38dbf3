//! Texture memory (models built for TVM's Adreno target, `opencl -device=adreno`): activations and
//! weights in `global.texture*` scopes held as 2-D images, the kernels' texture scratch
//! (`device_api.opencl.alloc_nd` / `free_nd`), arrays allocated with a texture scope, and weights in
//! textures shared and folded once. Outputs are checked against upstream's OpenCL runtime on the
//! same artefacts (pocl, which has images) within 1e-4, as FIXTURES.md advises for texture builds.
//! Skipped, saying so, without an OpenCL device, unless `TVM_RT_REQUIRE_OPENCL=1`.

mod common;

use common::*;
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{registry, ArgsBuilder, RetValue};
use tvm_runtime::tensor::NDArray;

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };
const F32: DLDataType = DLDataType { code: 2, bits: 32, lanes: 1 };

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Every output within 1e-4 of upstream's (absolute, on outputs of order 1).
fn check_close(f: &Fixture, m: &ObjRef<tvm_runtime::module::Module>, how: &str) -> f32 {
    let ex = exec(m);
    let mut worst = 0f32;
    for (k, want) in f.outputs.iter().enumerate() {
        let got = ex.output(k).unwrap();
        assert_eq!(got.shape(), &want.shape[..], "{} ({how}): output {k} shape", f.name);
        let (g, w) = (floats(&got.to_vec()), floats(&want.data));
        let diff = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-4, "{} ({how}): output {k} is {diff} from upstream's", f.name);
        worst = worst.max(diff);
    }
    worst
}

/// Entries of the graph in a texture scope, by scope.
fn texture_entries(m: &ObjRef<tvm_runtime::module::Module>, scope: &str) -> Vec<usize> {
    let plan = exec(m).plan().clone();
    (0..plan.graph.num_entries()).filter(|&e| plan.graph.entries[e].scope == scope).collect()
}

#[test]
fn texture_models_match_upstream_on_both_paths() {
    if !have_opencl() {
        return;
    }
    for name in ["opencl/convnet_tex_cl", "opencl/convnet_tex_bound_cl"] {
        let f = Fixture::load(name);
        let lib = f.load_lib();
        let m = if f.factory_weights {
            f.executor_from_factory_on(&lib, CL)
        } else {
            let m = f.executor_without_params_on(&lib, CL);
            exec(&m).load_params(&f.params()).unwrap();
            m
        };
        assert!(!texture_entries(&m, "global.texture").is_empty(), "{name} is a texture build");
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        check_close(&f, &m, "first run");
        // Runs again with new inputs and the first ones: activations in images are rewritten.
        let i = exec(&m).plan().input_index(&f.inputs[0].name).unwrap();
        exec(&m).set_input_bytes(i, &vec![0u8; f.inputs[0].data.len()]).unwrap();
        exec(&m).run().unwrap();
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        check_close(&f, &m, "again");
        // Folding the weight-only operators (layout transforms into texture-weight images) gives the
        // same outputs.
        exec(&m).set_fold_weights(true).unwrap();
        exec(&m).run().unwrap();
        check_close(&f, &m, "folded");
        // An output read into a device array and a host array.
        let want = &f.outputs[0];
        let dev = NDArray::empty(&want.shape, want.dtype, CL).unwrap();
        exec(&m).copy_output_to(0, dev.raw()).unwrap();
        assert_eq!(dev.to_vec(), exec(&m).output(0).unwrap().to_vec());
    }
}

/// Executors sharing an unbound texture model's weights hold the weights once, and what folding
/// derives from them (the texture-weight images) once too; a lone executor computes them every run
/// in images of its own, as upstream's.
#[test]
fn texture_weights_are_shared_and_folded_once() {
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/convnet_tex_cl");
    let lib = f.load_lib();
    let a = f.executor_without_params_on(&lib, CL);
    exec(&a).load_params(&f.params()).unwrap();
    f.set_inputs(&a);
    exec(&a).run().unwrap();
    let alone = exec(&a).memory_usage();
    assert_eq!(alone.ops_folded, 0, "{alone:?}");
    let b = f.executor_without_params_on(&lib, CL);
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        check_close(&f, m, "shared");
    }
    let (ua, ub) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert!(ub.ops_folded > 0 && ub.weights_derived > 0 && ub.weights_owned == 0, "{ub:?}");
    assert_eq!(ua.weights_derived, ub.weights_derived);
    // The texture weights are one image for both executors, and a's own images for them are gone.
    let weights = texture_entries(&a, "global.texture-weight");
    assert!(!weights.is_empty());
    for &e in &weights {
        assert!(!exec(&a).entry_data(e).is_null());
        assert_eq!(exec(&a).entry_data(e), exec(&b).entry_data(e), "entry {e}: one image");
    }
    assert!(ua.activations < alone.activations, "a's texture-weight images released: {alone:?} then {ua:?}");
    drop(b);
    // Alone again: a keeps working whatever it holds.
    f.set_inputs(&a);
    exec(&a).run().unwrap();
    check_close(&f, &a, "after b went");
}

/// A factory's weights in texture scopes go to the device once for all its executors (one image
/// mirror of each).
#[test]
fn factory_texture_weights_are_mirrored_once() {
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/convnet_tex_bound_cl");
    let lib = f.load_lib();
    let (a, b) = (f.executor_from_factory_on(&lib, CL), f.executor_from_factory_on(&lib, CL));
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        check_close(&f, m, "factory");
    }
    let weights = texture_entries(&a, "global.texture-weight");
    assert!(!weights.is_empty(), "the bound build keeps a weight in a texture");
    for e in weights {
        assert_eq!(exec(&a).entry_data(e), exec(&b).entry_data(e), "entry {e}: one image mirror");
    }
    let (ua, ub) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert!(ua.weights_shared > 0 && ub.weights_owned == 0, "{ua:?} {ub:?}");

    // Loaded on the device (create + load_params), a weight in a texture slot is made an image
    // directly: no buffer of it beside an image mirror.
    let c = f.executor_without_params_on(&lib, CL);
    exec(&c).load_params(&f.params()).unwrap();
    f.set_inputs(&c);
    exec(&c).run().unwrap();
    check_close(&f, &c, "loaded");
    let uc = exec(&c).memory_usage();
    assert!(uc.weights_owned > 0 && uc.weights_mirrored == 0, "{uc:?}");
}

/// Arrays in texture scopes: round trips through the host, copies between images and buffers, and
/// the refusals (no images on the CPU, a rank below 3, a dtype without an image format).
#[test]
fn texture_arrays() {
    if !have_opencl() {
        return;
    }
    let shape = [1i64, 2, 3, 5, 4];
    let n: usize = shape.iter().product::<i64>() as usize;
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect();
    for scope in ["global.texture", "global.texture-weight", "global.texture-nhwc"] {
        let img = NDArray::empty_in(&shape, F32, CL, scope).unwrap();
        assert_eq!(img.to_vec(), vec![0u8; data.len()], "{scope}: zeroed");
        // SAFETY: a new array nobody else uses.
        unsafe { img.copy_from_bytes(&data) }.unwrap();
        assert_eq!(img.to_vec(), data, "{scope}: host -> image -> host");
        // Image -> buffer and back -> image.
        let buf = img.deep_copy().unwrap();
        assert_eq!(buf.to_vec(), data, "{scope}: image -> buffer");
        let img2 = NDArray::empty_in(&shape, F32, CL, scope).unwrap();
        // SAFETY: distinct new arrays.
        unsafe { tvm_runtime::tensor::raw::copy_tensor(buf.raw(), img2.raw()) }.unwrap();
        assert_eq!(img2.to_vec(), data, "{scope}: buffer -> image");
        let img3 = NDArray::empty_in(&shape, F32, CL, scope).unwrap();
        // SAFETY: distinct new arrays.
        unsafe { tvm_runtime::tensor::raw::copy_tensor(img2.raw(), img3.raw()) }.unwrap();
        assert_eq!(img3.to_vec(), data, "{scope}: image -> image");
    }
    // A smaller view of an image reads its own region from the corner.
    let img = NDArray::empty_in(&[2, 3, 4], F32, CL, "global.texture").unwrap();
    let pixels: Vec<u8> = (0..24).flat_map(|i| (i as f32).to_le_bytes()).collect();
    // SAFETY: a new array nobody else uses.
    unsafe { img.copy_from_bytes(&pixels) }.unwrap();
    let view = NDArray::create_view(&img, &[1, 3, 4], F32).unwrap();
    assert_eq!(view.to_vec(), pixels[..48].to_vec());
    // A view whose shape folds wider than the image is refused, not read past the image.
    let wide = NDArray::create_view(&img, &[1, 6, 4], F32).unwrap();
    let mut out = vec![0u8; 96];
    let e = wide.copy_to_bytes(&mut out).unwrap_err().to_string();
    assert!(e.contains("does not fit its 3 x 2 image"), "{e}");
    // Every dtype with an image format round-trips (one lane: RGBA of 8, 16 or 32 bits).
    for (code, bits) in [(0u8, 8u8), (0, 16), (0, 32), (1, 8), (1, 16), (1, 32), (2, 32)] {
        let dtype = DLDataType { code, bits, lanes: 1 };
        let bytes: Vec<u8> = (0..24 * usize::from(bits) / 8).map(|i| (i * 7 % 251) as u8).collect();
        let img = NDArray::empty_in(&[2, 3, 4], dtype, CL, "global.texture").unwrap();
        // SAFETY: a new array nobody else uses.
        unsafe { img.copy_from_bytes(&bytes) }.unwrap();
        assert_eq!(img.to_vec(), bytes, "{dtype}");
    }
    // An image beyond any device's 2-D limits is refused before the driver is asked.
    for shape in [[1i64, 1 << 24, 4], [1 << 24, 1, 4]] {
        let e = NDArray::empty_in(&shape, F32, CL, "global.texture").unwrap_err().to_string();
        assert!(e.contains("exceeds opencl(0)'s largest 2-D image"), "{e}");
    }
    let e = NDArray::empty_in(&shape, F32, DLDevice::CPU, "global.texture").unwrap_err().to_string();
    assert!(e.contains("needs images"), "{e}");
    let e = NDArray::empty_in(&[4, 4], F32, CL, "global.texture").unwrap_err().to_string();
    assert!(e.contains("rank 3 or more"), "{e}");
    let f64t = DLDataType { code: 2, bits: 64, lanes: 1 };
    let e = NDArray::empty_in(&shape, f64t, CL, "global.texture").unwrap_err().to_string();
    assert!(e.contains("no OpenCL image format"), "{e}");
    let e = NDArray::empty_in(&shape, F32, CL, "local").unwrap_err().to_string();
    assert!(e.contains("memory scope 'local' is not supported"), "{e}");
    // The global route Python's `tvm.nd.empty(..., mem_scope=)` takes.
    let alloc = registry::get("runtime.TVMArrayAllocWithScope").unwrap();
    let shape_obj = registry::get("runtime.ShapeTuple").unwrap();
    let mut a = ArgsBuilder::new();
    shape.iter().for_each(|&d| {
        a.int(d);
    });
    let RetValue::Object(s) = shape_obj.call(&a.args()).unwrap() else { panic!("a shape") };
    let mut a = ArgsBuilder::new();
    a.object(s).str("float32").device(CL).str("global.texture-weight");
    let arr = alloc.call(&a.args()).unwrap().into_object::<NDArray>().unwrap();
    // SAFETY: a new array nobody else uses.
    unsafe { arr.copy_from_bytes(&data) }.unwrap();
    assert_eq!(arr.to_vec(), data);
}

/// The kernels' texture scratch: reused by size and type, given back, refusals.
#[test]
fn texture_scratch() {
    if !have_opencl() {
        return;
    }
    let (alloc, free) =
        (registry::get("device_api.opencl.alloc_nd").unwrap(), registry::get("device_api.opencl.free_nd").unwrap());
    let nd = |w: i64, h: i64, bits: i64, device_type: i64| {
        let shape = [w, h];
        let mut a = ArgsBuilder::new();
        a.int(device_type).int(0).int(2).int(bits).str("global.texture").int(2);
        // SAFETY: the shape array lives through the call, as generated code's stack array does.
        unsafe { a.handle(shape.as_ptr().cast_mut().cast()) };
        match alloc.call(&a.args()) {
            Ok(RetValue::Handle(p)) => Ok(p),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        }
    };
    let give_back = |p: *mut std::ffi::c_void| {
        let mut a = ArgsBuilder::new();
        a.int(4).int(0).str("global.texture");
        // SAFETY: a scratch image of ours (or, for the refusal, a value the function only compares).
        unsafe { a.handle(p) };
        free.call(&a.args()).map(|_| ()).map_err(|e| e.to_string())
    };
    let p = nd(16, 8, 32, 4).unwrap();
    let q = nd(16, 8, 32, 4).unwrap();
    assert_ne!(p, q, "two live scratch images");
    give_back(p).unwrap();
    assert_eq!(nd(12, 6, 32, 4).unwrap(), p, "a free image that holds the request is reused");
    assert_ne!(nd(16, 8, 16, 4).unwrap(), p, "not across types");
    let big = nd(200, 100, 32, 4).unwrap();
    give_back(big).unwrap();
    assert_ne!(nd(8, 4, 32, 4).unwrap(), big, "not a request 25 times smaller");
    assert!(give_back(p).is_ok() && give_back(p).unwrap_err().contains("has not been allocated"));
    assert!(nd(16, 8, 32, 1).unwrap_err().contains("OpenCL (4)"));
    assert!(nd(0, 8, 32, 4).unwrap_err().contains("empty texture"));
}

/// Which scratch image a request gets (a thread of its own, so a pool of its own): a free image
/// that holds it without growing before one that must grow, the one wasting least among those,
/// and none more than 5 times off in either direction.
#[test]
fn texture_scratch_best_fit() {
    if !have_opencl() {
        return;
    }
    let (alloc, free) =
        (registry::get("device_api.opencl.alloc_nd").unwrap(), registry::get("device_api.opencl.free_nd").unwrap());
    let nd = |w: i64, h: i64| {
        let shape = [w, h];
        let mut a = ArgsBuilder::new();
        a.int(4).int(0).int(2).int(32).str("global.texture").int(2);
        // SAFETY: the shape array lives through the call.
        unsafe { a.handle(shape.as_ptr().cast_mut().cast()) };
        match alloc.call(&a.args()).unwrap() {
            RetValue::Handle(p) => p,
            other => panic!("{other:?}"),
        }
    };
    let give_back = |p: *mut std::ffi::c_void| {
        let mut a = ArgsBuilder::new();
        a.int(4).int(0).str("global.texture");
        // SAFETY: a scratch image of this thread's pool.
        unsafe { a.handle(p) };
        free.call(&a.args()).unwrap();
    };
    let (big, small) = (nd(40, 40), nd(20, 20));
    give_back(big);
    give_back(small);
    let p = nd(18, 18);
    assert_eq!(p, small, "both hold 18 x 18: the one wasting least");
    give_back(p);
    let p = nd(22, 22);
    assert_eq!(p, big, "only the larger holds 22 x 22 without growing");
    give_back(p);
    // 40 x 4: the 40 x 40 image holds it but is 10 times too tall; the 20 x 20 one grows instead.
    let p = nd(40, 4);
    assert!(p != big && p != small, "a grown image, not one 10 times off");
}
