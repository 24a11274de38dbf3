//! Device memory as the device sees it: with the runtime's OpenCL library replaced by
//! c_tests/opencl_shim.c (compiled here, selected with `TVM_RT_OPENCL_LIBRARY` before OpenCL
//! starts, so this file is a test process of its own), the live bytes of every buffer and image
//! are counted from creation to release: what a GPU would hold (pocl allocates lazily, so the
//! process's memory does not show it).

mod common;

use tvm_runtime::device::DeviceMemory;
use tvm_runtime::dlpack::DLDevice;

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };

type Bytes = unsafe extern "C" fn() -> usize;

use common::shim::shim;

fn live_bytes(lib: &libloading::Library) -> usize {
    // SAFETY: the shim's exported counter, of this signature.
    unsafe { (lib.get::<Bytes>(b"tvm_rt_cl_shim_live_bytes\0").unwrap())() }
}

/// Tests here run one at a time: they read one process-wide counter.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A device allocation, its regions and its copies: bounds refused, the regions handed out once
/// each, and every byte returned to the device when the memory goes.
#[test]
fn device_memory_regions_and_bounds() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = live_bytes(lib);
    let m = DeviceMemory::zeroed(CL, 4096).unwrap();
    assert_eq!((m.len(), m.is_empty(), m.device()), (4096, false, CL));
    assert_eq!(live_bytes(lib), before + 4096, "one buffer of the size asked");
    // Region 0 is the whole handle; others are made once and handed out again.
    assert_eq!(m.region(0, 4096).unwrap(), m.handle());
    let r = m.region(1024, 512).unwrap();
    assert_ne!(r, m.handle());
    assert_eq!(m.region(1024, 512).unwrap(), r, "the same region again");
    let r2 = m.region(1024, 256).unwrap();
    assert_ne!(r2, r, "another length is another region");
    assert!(m.owns(m.handle()) && m.owns(r) && m.owns(r2));
    let other = DeviceMemory::zeroed(CL, 64).unwrap();
    assert!(!m.owns(other.handle()) && !m.owns(std::ptr::null_mut()));
    // Bounds: nothing past the end, and no overflowing offset, refused before the device is
    // asked (a driver that does not check would write past the buffer).
    for (at, n) in [(4096, 1), (4000, 97), (usize::MAX, 2)] {
        let refused = |e: tvm_runtime::Error| e.to_string().contains("exceed 4096 bytes on the device");
        assert!(m.region(at, n).is_err_and(refused), "region {at}+{n}");
        assert!(m.write(at, &vec![0; n]).is_err_and(refused), "write {at}+{n}");
        let mut out = vec![0u8; n];
        assert!(m.read(at, &mut out).is_err_and(refused), "read {at}+{n}");
        assert!(m.duplicate_range(at, n).is_err_and(refused), "duplicate {at}+{n}");
    }
    assert_eq!(format!("{m:?}"), "DeviceMemory(4096 bytes on opencl(0))");
    let empty = DeviceMemory::zeroed(CL, 0).unwrap();
    assert!(empty.is_empty() && !m.is_empty());
    drop(empty);
    // Bytes go in and come back, at offsets.
    let data: Vec<u8> = (0..=255).collect();
    m.write(1000, &data).unwrap();
    let mut back = vec![0u8; 256];
    m.read(1000, &mut back).unwrap();
    assert_eq!(back, data);
    let mut zeros = vec![1u8; 16];
    m.read(4080, &mut zeros).unwrap();
    assert_eq!(zeros, vec![0; 16], "allocations are zeroed");
    let copy = m.duplicate_range(1000, 256).unwrap();
    let mut again = vec![0u8; 256];
    copy.read(0, &mut again).unwrap();
    assert_eq!(again, data);
    drop((m, other, copy));
    assert_eq!(live_bytes(lib), before, "every buffer released");
}

/// An executor's device memory: loading and running hold buffers; dropping the executor (and the
/// library) gives every byte back.
#[test]
fn an_executor_returns_its_device_memory() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = common::Fixture::load("opencl/mlp_unbound_cl_b1");
    let before = live_bytes(lib);
    {
        let library = f.load_lib();
        let m = f.executor_without_params_on(&library, CL);
        common::exec(&m).load_params(&f.params()).unwrap();
        f.set_inputs(&m);
        common::exec(&m).run().unwrap();
        f.check_outputs(&m, "counted");
        let params: usize = tvm_runtime::params::parse(&f.params()).unwrap().iter().map(|(_, r)| r.data.len()).sum();
        assert!(live_bytes(lib) >= before + params, "the weights are on the device");
    }
    assert_eq!(live_bytes(lib), before, "all returned (the last executor gone, parked scratch too)");
}

/// Calls of `function` the shim counted since the last reset.
fn calls(lib: &libloading::Library, function: &str) -> i64 {
    type Count = unsafe extern "C" fn(i32, *mut std::ffi::c_long) -> *const std::ffi::c_char;
    // SAFETY: the shim's exported counters, of these signatures; names are NUL-terminated and live
    // as long as the shim.
    unsafe {
        let count = lib.get::<Count>(b"tvm_rt_cl_shim_count\0").unwrap();
        let mut n: std::ffi::c_long = 0;
        for i in 0.. {
            let name = count(i, &mut n);
            if name.is_null() {
                return 0;
            }
            if std::ffi::CStr::from_ptr(name).to_str() == Ok(function) {
                return n as i64;
            }
        }
        unreachable!()
    }
}

fn reset_counts(lib: &libloading::Library) {
    // SAFETY: the shim's exported control function, of this signature.
    unsafe { (lib.get::<unsafe extern "C" fn()>(b"tvm_rt_cl_shim_reset_counts\0").unwrap())() }
}

/// A pool's arenas on the device: one buffer per arena, of the largest member's layout, in place
/// of each executor's own; a run gives its arena back only once the device has finished with it
/// (one `clFinish` more than a run on an arena of its own); and every byte returns when the
/// executors go.
#[test]
fn a_pooled_run_holds_its_device_arena_until_the_device_is_done() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (f1, f4) =
        (common::Fixture::load("opencl/mlp_unbound_cl_b1"), common::Fixture::load("opencl/mlp_unbound_cl_b4"));
    let before = live_bytes(lib);
    {
        let (l1, l4) = (f1.load_lib(), f4.load_lib());
        let a = f1.executor_without_params_on(&l1, CL);
        common::exec(&a).load_params(&f1.params()).unwrap();
        let b = f4.executor_without_params_on(&l4, CL);
        common::exec(&b).share_params(common::exec(&a), &f4.params()).unwrap();
        for (f, m) in [(&f1, &a), (&f4, &b)] {
            f.set_inputs(m);
            common::exec(m).run().unwrap();
        }
        let own = live_bytes(lib);
        let (arena_a, arena_b) = (common::exec(&a).layout().arena_bytes, common::exec(&b).layout().arena_bytes);
        assert!(arena_a > 0 && arena_b > arena_a, "{arena_a} {arena_b}");
        reset_counts(lib);
        common::exec(&a).run().unwrap();
        let finishes_own = calls(lib, "clFinish");

        common::exec(&a).share_activations(common::exec(&b)).unwrap();
        assert_eq!(live_bytes(lib), own - arena_a - arena_b, "their own arenas went");
        for (f, m) in [(&f1, &a), (&f4, &b)] {
            f.set_inputs(m);
            common::exec(m).run().unwrap();
            f.check_outputs(m, "pooled on the device");
        }
        assert_eq!(live_bytes(lib), own - arena_a - arena_b + arena_b, "one arena, of the larger layout");
        reset_counts(lib);
        common::exec(&a).run().unwrap();
        assert_eq!(calls(lib, "clFinish"), finishes_own + 1, "the device finished before the arena went back");
    }
    assert_eq!(live_bytes(lib), before, "all returned");
}

/// Texture memory as the device holds it: an image counts its RGBA pixels; executors sharing an
/// unbound texture build's weights hold the weights and the images folded from them once, each
/// further executor adding only its activations (its arena and texture images); all of it is
/// returned when they go.
#[test]
fn texture_executors_share_their_images() {
    use tvm_runtime::device::texture::Texture;
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f32 = tvm_runtime::dlpack::DLDataType { code: 2, bits: 32, lanes: 1 };
    let before = live_bytes(lib);
    let image = DeviceMemory::texture(CL, Texture::Weight, &[4, 8, 3, 3, 4], f32).unwrap();
    assert_eq!(image.len(), 4 * 72 * 16, "4 rows of 72 float4 pixels");
    assert_eq!(live_bytes(lib), before + image.len(), "the image counted whole");
    drop(image);
    assert_eq!(live_bytes(lib), before);

    let f = common::Fixture::load("opencl/convnet_tex_cl");
    {
        let library = f.load_lib();
        let a = f.executor_without_params_on(&library, CL);
        common::exec(&a).load_params(&f.params()).unwrap();
        f.set_inputs(&a);
        common::exec(&a).run().unwrap();
        let mut executors = vec![a];
        let mut after = vec![live_bytes(lib)];
        for _ in 0..3 {
            let m = f.executor_without_params_on(&library, CL);
            common::exec(&m).share_params(common::exec(&executors[0]), &f.params()).unwrap();
            f.set_inputs(&m);
            common::exec(&m).run().unwrap();
            executors.push(m);
            after.push(live_bytes(lib));
        }
        let usage = common::exec(&executors[3]).memory_usage();
        assert!(usage.weights_derived > 0 && usage.weights_owned == 0, "{usage:?}");
        // The third and fourth executors add their own activations (arena, images, outputs) and
        // nothing else: the weights and their texture forms are the first two's.
        for k in 2..4 {
            let added = after[k] - after[k - 1];
            assert!(
                added <= usage.activations + 64 * 1024,
                "executor {k} added {added} device bytes; its activations are {} ({usage:?})",
                usage.activations
            );
        }
    }
    assert_eq!(live_bytes(lib), before, "every image and buffer returned");
}

/// The kernels' texture scratch of a thread is returned to the device when the thread ends.
#[test]
fn a_threads_texture_scratch_goes_with_it() {
    use tvm_runtime::packed::{registry, ArgsBuilder, RetValue};
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = live_bytes(lib);
    let held = std::thread::spawn(move || {
        let (alloc, free) =
            (registry::get("device_api.opencl.alloc_nd").unwrap(), registry::get("device_api.opencl.free_nd").unwrap());
        let shape = [64i64, 32];
        let mut a = ArgsBuilder::new();
        a.int(4).int(0).int(2).int(32).str("global.texture").int(2);
        // SAFETY: the shape array lives through the call.
        unsafe { a.handle(shape.as_ptr().cast_mut().cast()) };
        let RetValue::Handle(p) = alloc.call(&a.args()).unwrap() else { panic!("an image") };
        let mut a = ArgsBuilder::new();
        a.int(4).int(0).str("global.texture");
        // SAFETY: the scratch image just handed out.
        unsafe { a.handle(p) };
        free.call(&a.args()).unwrap();
        live_bytes(shim().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(held, before + 64 * 32 * 16, "the idle scratch image is kept while the thread lives");
    assert_eq!(live_bytes(lib), before, "and released when it ends");
}

/// On a device, executors of one model sharing their weights fold the weight-only operators (the
/// derived weights held once, each arena without their results); an executor of another model
/// sharing them (a build for another batch size) does not fold, nor makes the first fold: it would
/// hold the derived weights for a saving it does not have. A sharer of the same model arriving
/// makes both fold at their next run.
#[test]
fn on_a_device_only_sharers_of_one_model_fold() {
    use tvm_runtime::packed::{registry, ArgsBuilder};
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = common::Fixture::load("opencl/fold_cl");
    let library = f.load_lib();
    let folded = |m: &tvm_runtime::object::ObjRef<tvm_runtime::module::Module>| {
        let u = common::exec(m).memory_usage();
        (u.ops_folded, u.weights_derived)
    };
    let a = f.executor_without_params_on(&library, CL);
    common::exec(&a).load_params(&f.params()).unwrap();
    f.set_inputs(&a);
    common::exec(&a).run().unwrap();
    assert_eq!(folded(&a), (0, 0), "alone: not folded");
    // Another model over the same weights: the same kernels under another node name.
    let json = f
        .graph_json()
        .replace("\"name\": \"tvmgen_default_fused_nn_dense_nn_relu\"", "\"name\": \"dense_of_another_build\"");
    assert_ne!(json, f.graph_json());
    let mut args = ArgsBuilder::new();
    args.str(&json).object(library.clone().into_any()).int(CL.device_type as i64).int(0);
    let create = registry::get("tvm.graph_executor.create").unwrap();
    let v = create.call(&args.args()).unwrap().into_object::<tvm_runtime::module::Module>().unwrap();
    let before = live_bytes(lib);
    common::exec(&v).share_params(common::exec(&a), &f.params()).unwrap();
    for m in [&a, &v] {
        f.set_inputs(m);
        common::exec(m).run().unwrap();
        f.check_outputs(m, "shared with another model");
        assert_eq!(folded(m), (0, 0), "another model's sharer folds nothing");
    }
    let activations = common::exec(&v).memory_usage().activations;
    assert_eq!(live_bytes(lib) - before, activations, "the other model added its activations alone");
    // A second executor of the first model: the two of them fold, once; the other model does not.
    let b = f.executor_without_params_on(&library, CL);
    common::exec(&b).share_params(common::exec(&a), &f.params()).unwrap();
    for m in [&a, &b, &v] {
        f.set_inputs(m);
        common::exec(m).run().unwrap();
        f.check_outputs(m, "two of one model sharing");
    }
    assert_eq!(folded(&a), (1, 16 * 8 * 4));
    assert_eq!(folded(&b), (1, 16 * 8 * 4));
    assert_eq!(folded(&v), (0, 0));
}
