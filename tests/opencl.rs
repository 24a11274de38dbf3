//! Models built for OpenCL, run on the first OpenCL device (pocl's CPU device in CI): outputs
//! against upstream's OpenCL runtime on the same artefacts, byte for byte, on both creation paths,
//! with weights shared in device memory. Skipped, saying so, where no OpenCL device exists, unless
//! `TVM_RT_REQUIRE_OPENCL=1` (CI sets it).

mod common;

use common::*;
use tvm_runtime::dlpack::DLDevice;

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };

const MODELS: &[&str] =
    &["opencl/mlp_cl", "opencl/mlp_unbound_cl_b1", "opencl/mlp_unbound_cl_b4", "opencl/convnet_unbound_cl"];

#[test]
fn outputs_match_upstream_on_both_paths() {
    if !have_opencl() {
        return;
    }
    for name in MODELS {
        let f = Fixture::load(name);
        let lib = f.load_lib();
        let m = f.executor_from_factory_on(&lib, CL);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "factory");
        let m = f.executor_without_params_on(&lib, CL);
        exec(&m).load_params(&f.params()).unwrap();
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "create");
    }
}

/// Executors sharing weights on the device point at the same device buffers, across batch
/// variants, and each gives upstream's bytes.
#[test]
fn shared_weights_live_once_in_device_memory() {
    if !have_opencl() {
        return;
    }
    let (f1, f4) = (Fixture::load("opencl/mlp_unbound_cl_b1"), Fixture::load("opencl/mlp_unbound_cl_b4"));
    let (lib1, lib4) = (f1.load_lib(), f4.load_lib());
    let a = f1.executor_without_params_on(&lib1, CL);
    exec(&a).load_params(&f1.params()).unwrap();
    let b = f1.executor_without_params_on(&lib1, CL);
    exec(&b).share_params(exec(&a), &f1.params()).unwrap();
    let c = f4.executor_without_params_on(&lib4, CL);
    exec(&c).share_params(exec(&a), &f4.params()).unwrap();
    for (f, m) in [(&f1, &a), (&f1, &b), (&f4, &c)] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "shared");
    }
    let plan = exec(&a).plan().clone();
    let weight_entries: Vec<usize> = (0..plan.num_inputs())
        .filter(|&i| exec(&a).is_param(plan.input_name(i)))
        .map(|i| plan.input_entries[i])
        .collect();
    assert!(!weight_entries.is_empty());
    for &e in &weight_entries {
        let name = plan.input_name(plan.input_entries.iter().position(|&x| x == e).unwrap());
        let j = exec(&c).plan().input_index(name).unwrap();
        let ec = exec(&c).plan().input_entries[j];
        assert_eq!(exec(&a).entry_data(e), exec(&b).entry_data(e), "{name}: one device buffer");
        assert_eq!(exec(&a).entry_data(e), exec(&c).entry_data(ec), "{name}: one device buffer across batch sizes");
    }
    let (ma, mb) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert_eq!(ma.device, CL);
    assert!(mb.weights_shared > 0 && mb.weights_owned == 0, "{mb:?}");
}

/// A factory's weights go to the device once for all its executors (one mirror per device).
#[test]
fn factory_weights_are_mirrored_once() {
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/mlp_cl");
    let lib = f.load_lib();
    let a = f.executor_from_factory_on(&lib, CL);
    let b = f.executor_from_factory_on(&lib, CL);
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "factory");
    }
    let (ua, ub) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert!(ua.weights_mirrored > 0 && ua.weights_mirrored == ub.weights_mirrored, "{ua:?} {ub:?}");
    let plan = exec(&a).plan().clone();
    for i in (0..plan.num_inputs()).filter(|&i| exec(&a).is_param(plan.input_name(i))) {
        let e = plan.input_entries[i];
        assert_eq!(exec(&a).entry_data(e), exec(&b).entry_data(e));
    }
}

/// Weight-only operators fold on the device; the folded and unfolded runs agree byte for byte.
#[test]
fn folding_on_the_device() {
    if !have_opencl() {
        return;
    }
    for name in MODELS {
        let f = Fixture::load(name);
        let lib = f.load_lib();
        for fold in [true, false] {
            let m = f.executor_without_params_on(&lib, CL);
            exec(&m).set_fold_weights(fold).unwrap();
            exec(&m).load_params(&f.params()).unwrap();
            f.set_inputs(&m);
            exec(&m).run().unwrap();
            f.check_outputs(&m, if fold { "folded" } else { "not folded" });
            let u = exec(&m).memory_usage();
            if !fold {
                assert_eq!(u.ops_folded, 0);
            } else if *name == "opencl/fold_cl" {
                // The transpose-and-scale of the weight ran once, into a derived weight on the device.
                assert_eq!((u.ops_folded, u.weights_derived), (1, 16 * 8 * 4), "{u:?}");
                exec(&m).run().unwrap();
                f.check_outputs(&m, "folded, run again");
            }
        }
    }
}

/// Arrays on the device: inputs from device arrays, outputs into host and device arrays, views
/// of the executor's device memory, zero-copy binding of device buffers.
#[test]
fn device_arrays_in_and_out() {
    use tvm_runtime::tensor::NDArray;
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/mlp_cl");
    let lib = f.load_lib();
    let m = f.executor_from_factory_on(&lib, CL);
    let ex = exec(&m);
    let input = &f.inputs[0];
    let dev_in = NDArray::empty(&input.shape, input.dtype, CL).unwrap();
    // SAFETY: a new array nobody else uses.
    unsafe { dev_in.copy_from_bytes(&input.data) }.unwrap();
    assert_eq!(dev_in.to_vec(), input.data, "host -> device -> host");
    ex.set_input(ex.plan().input_index(&input.name).unwrap(), dev_in.raw()).unwrap();
    ex.run().unwrap();
    let want = &f.outputs[0];
    let out = ex.output(0).unwrap();
    assert_eq!(out.device(), CL);
    assert_eq!(out.to_vec(), want.data);
    let host = NDArray::empty(&want.shape, want.dtype, DLDevice::CPU).unwrap();
    ex.copy_output_to(0, host.raw()).unwrap();
    assert_eq!(host.to_vec(), want.data);
    let dev_out = NDArray::empty(&want.shape, want.dtype, CL).unwrap();
    ex.copy_output_to(0, dev_out.raw()).unwrap();
    assert_eq!(dev_out.to_vec(), want.data);
    assert_eq!(dev_out.deep_copy().unwrap().to_vec(), want.data);

    // Zero-copy: the caller's device buffers become the input and the output.
    let zin = NDArray::empty(&input.shape, input.dtype, CL).unwrap();
    // SAFETY: a new array nobody else uses.
    unsafe { zin.copy_from_bytes(&input.data) }.unwrap();
    let zout = NDArray::empty(&want.shape, want.dtype, CL).unwrap();
    let i = ex.plan().input_index(&input.name).unwrap();
    // SAFETY: both arrays outlive the executor's use of them (they live to the end of the test,
    // and the executor is not run after they go).
    unsafe {
        ex.set_input_zero_copy(i, tvm_runtime::executor::ZeroCopy::new(zin.raw())).unwrap();
        ex.set_output_zero_copy(0, tvm_runtime::executor::ZeroCopy::new(zout.raw())).unwrap();
    }
    ex.run().unwrap();
    assert_eq!(zout.to_vec(), want.data, "output written into the caller's device buffer");
    // A host array cannot be bound on the device.
    let host_in = NDArray::from_bytes(&input.shape, input.dtype, &input.data).unwrap();
    // SAFETY: refused before anything is bound.
    let e = unsafe { ex.set_input_zero_copy(i, tvm_runtime::executor::ZeroCopy::new(host_in.raw())) }.unwrap_err();
    assert!(e.to_string().contains("device"), "{e}");
}

/// Bad input on devices: errors, never a crash.
#[test]
fn bad_input_on_devices() {
    use tvm_runtime::tensor::NDArray;
    if !have_opencl() {
        return;
    }
    let f32 = tvm_runtime::dlpack::DLDataType::F32;
    let e = NDArray::empty(&[4], f32, DLDevice { device_type: 4, device_id: 9 }).unwrap_err();
    assert!(e.to_string().contains("Invalid device id 9"), "{e}");
    let e = NDArray::empty(&[4], f32, DLDevice { device_type: 2, device_id: 0 }).unwrap_err();
    assert!(e.to_string().contains("cuda is not enabled"), "{e}");
    let a = NDArray::empty(&[4], f32, CL).unwrap();
    let b = NDArray::empty(&[5], f32, CL).unwrap();
    // SAFETY: our own arrays.
    let e = unsafe { tvm_runtime::tensor::raw::copy_tensor(a.raw(), b.raw()) }.unwrap_err();
    assert!(e.to_string().contains("cannot copy 16 bytes"), "{e}");
    // SAFETY: our own array.
    assert!(unsafe { a.copy_from_bytes(&[0u8; 12]) }.is_err());

    // A CPU model on the device, and an OpenCL model on the CPU.
    let cpu = Fixture::load("mlp_b1");
    let lib = cpu.load_lib();
    let create = tvm_runtime::packed::registry::get("tvm.graph_executor.create").unwrap();
    let mut args = tvm_runtime::packed::ArgsBuilder::new();
    args.str(&cpu.graph_json()).object(lib.into_any()).int(4).int(0);
    let e = create.call(&args.args()).unwrap_err();
    assert!(e.to_string().contains("built for the CPU"), "{e}");
    let f = Fixture::load("opencl/mlp_cl");
    let lib = f.load_lib();
    let mut args = tvm_runtime::packed::ArgsBuilder::new();
    args.str(&f.graph_json()).object(lib.into_any()).int(1).int(0);
    let e = create.call(&args.args()).unwrap_err();
    assert!(e.to_string().contains("built for opencl"), "{e}");
}

/// An `opencl` module as `export_library` writes it: str fmt, the function infos, str source.
fn opencl_module_bytes(source: &str, tags: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, v: &str| {
        b.extend((v.len() as u64).to_le_bytes());
        b.extend(v.as_bytes());
    };
    s(&mut b, "cl");
    b.extend(1u64.to_le_bytes());
    s(&mut b, "k");
    s(&mut b, "");
    b.extend(1u64.to_le_bytes());
    b.extend([3u8, 64, 1, 0]);
    b.extend((tags.len() as u64).to_le_bytes());
    for t in tags {
        s(&mut b, t);
    }
    s(&mut b, source);
    b
}

/// Runs `f` with the process's stderr sent to /dev/null: pocl's compiler prints its diagnostics
/// there itself ("1 error generated.") besides the build log the error carries, and a passing run
/// prints nothing stray.
fn quiet_stderr<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: fd 2 given back the descriptor saved below, which is then closed.
            unsafe {
                libc::dup2(self.0, 2);
                libc::close(self.0);
            }
        }
    }
    // SAFETY: plain descriptor calls on fd 2 and a file opened here; Restore undoes them, also on
    // a panic.
    let _restore = unsafe {
        let saved = Restore(libc::dup(2));
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        libc::dup2(null, 2);
        libc::close(null);
        saved
    };
    f()
}

/// A kernel that does not compile fails its call with the build log; a good one runs.
#[test]
fn kernel_build_errors_are_errors() {
    use tvm_runtime::library::opencl::OpenClModule;
    use tvm_runtime::module::Module;
    use tvm_runtime::packed::ArgsBuilder;
    use tvm_runtime::tensor::NDArray;
    if !have_opencl() {
        return;
    }
    let a = NDArray::empty(&[8], tvm_runtime::dlpack::DLDataType::F32, CL).unwrap();
    let call = |source: &str| {
        let m = Module::new(OpenClModule::from_bytes(&opencl_module_bytes(source, &["threadIdx.x"])).unwrap());
        let k = Module::get_function(&m, "k", false).unwrap().unwrap();
        let mut args = ArgsBuilder::new();
        // A buffer argument is the tensor's data handle (type code 3), then the extent.
        // SAFETY: the data of our live device array, as the kernel takes it.
        unsafe { args.handle(a.data_ptr().cast()) }.int(8);
        k.call(&args.args())
    };
    let e =
        quiet_stderr(|| call("// Function: k\n__kernel void k(__global float* a) { this is not C; }\n")).unwrap_err();
    assert!(e.to_string().contains("OpenCL build error for kernel k"), "{e}");
    call("// Function: k\n__kernel void k(__global float* a) { a[get_local_id(0)] = 2.0f; }\n").unwrap();
    let got: Vec<f32> = a.to_vec().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, vec![2.0; 8]);
    // Malformed modules are refused at load.
    assert!(OpenClModule::from_bytes(&opencl_module_bytes("no delimiter", &["warp.q"])).is_err());
    // A section that names another function than the table's: refused at load, naming both.
    let e = OpenClModule::from_bytes(&opencl_module_bytes("// Function: other\n__kernel void other() {}\n", &[]))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("kernel 'k' has no '// Function: k' section") && e.contains("sections: other"), "{e}");
    let mut truncated = opencl_module_bytes("// Function: k\n", &[]);
    truncated.truncate(truncated.len() - 3);
    assert!(OpenClModule::from_bytes(&truncated).is_err());
}

/// Executors on several threads launch the same kernels at once (each kernel's arguments are set
/// and enqueued under its own lock): every run gives upstream's bytes.
#[test]
fn concurrent_executors_share_kernels() {
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/mlp_unbound_cl_b1");
    let lib = f.load_lib();
    let first = f.executor_without_params_on(&lib, CL);
    exec(&first).load_params(&f.params()).unwrap();
    let executors: Vec<_> = (0..4)
        .map(|_| {
            let m = f.executor_without_params_on(&lib, CL);
            exec(&m).share_params(exec(&first), &f.params()).unwrap();
            m
        })
        .collect();
    std::thread::scope(|s| {
        for m in &executors {
            let f = &f;
            s.spawn(move || {
                for _ in 0..20 {
                    f.set_inputs(m);
                    exec(m).run().unwrap();
                    f.check_outputs(m, "concurrent");
                }
            });
        }
    });
}

/// A graph on two devices (`device_index`: a dense and a softmax on OpenCL, a CPU fallback
/// operator between them, `__copy` nodes across): upstream's bytes through the factory and
/// `create` given both devices, and given OpenCL alone (CPU entries go to the CPU).
/// Executors of two batch sizes drawing from one pool of device arenas, run from two threads:
/// every run gives upstream's bytes, and the pool holds its one arena on the device.
#[test]
fn pooled_executors_on_the_device() {
    if !have_opencl() {
        return;
    }
    let (f1, f4) = (Fixture::load("opencl/mlp_unbound_cl_b1"), Fixture::load("opencl/mlp_unbound_cl_b4"));
    let (lib1, lib4) = (f1.load_lib(), f4.load_lib());
    let owner = f1.executor_without_params_on(&lib1, CL);
    exec(&owner).load_params(&f1.params()).unwrap();
    let pool = tvm_runtime::executor::pool::ArenaPool::new(CL, 1).unwrap();
    let mut all = vec![(&f1, owner.clone())];
    for (f, lib) in [(&f4, &lib4), (&f1, &lib1), (&f4, &lib4)] {
        let m = f.executor_without_params_on(lib, CL);
        exec(&m).share_params(exec(&owner), &f.params()).unwrap();
        all.push((f, m));
    }
    for (_, m) in &all {
        exec(m).join_pool(&pool).unwrap();
    }
    std::thread::scope(|s| {
        for half in all.chunks(2) {
            s.spawn(move || {
                for i in 0..6 {
                    for (f, m) in half {
                        f.set_inputs(m);
                        exec(m).run().unwrap();
                        f.check_outputs(m, &format!("pooled on the device, round {i}"));
                    }
                }
            });
        }
    });
    let u = pool.usage();
    assert_eq!((u.arenas, u.stats.leases), (1, 24), "{u:?}");
    assert_eq!(u.arena_bytes, all.iter().map(|(_, m)| exec(m).layout().arena_bytes).max().unwrap());
}

/// Streams: each thread runs its executors on a stream of its own (a command queue made for it),
/// outputs upstream's; handles that are not streams, or freed ones, are refused.
#[test]
fn executors_run_on_the_stream_their_thread_set() {
    if !have_opencl() {
        return;
    }
    let api = tvm_runtime::device::api(4).unwrap();
    let f = Fixture::load("opencl/convnet_unbound_cl");
    let lib = f.load_lib();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let stream = api.create_stream(0).unwrap();
                assert!(!stream.is_null(), "a queue of its own");
                api.set_stream(0, stream).unwrap();
                let m = f.executor_from_factory_on(&lib, CL);
                for i in 0..3 {
                    f.set_inputs(&m);
                    exec(&m).run().unwrap();
                    api.sync_stream(0, stream).unwrap();
                    f.check_outputs(&m, &format!("on a stream, run {i}"));
                }
                api.set_stream(0, std::ptr::null_mut()).unwrap();
                api.free_stream(0, stream).unwrap();
                let e = api.sync_stream(0, stream).unwrap_err().to_string();
                assert!(e.contains("is not a stream"), "{e}");
            });
        }
    });
    let bogus = 64usize as *mut std::ffi::c_void;
    for e in [api.set_stream(0, bogus).unwrap_err(), api.free_stream(0, bogus).unwrap_err()] {
        assert!(e.to_string().contains("is not a stream of OpenCL device 0"), "{e}");
    }
    // A stream of device 0 is no stream of another device.
    let stream = api.create_stream(0).unwrap();
    if api.count().unwrap() > 1 {
        assert!(api.set_stream(1, stream).is_err());
    }
    api.sync_stream_from_to(0, stream, std::ptr::null_mut()).unwrap();
    api.free_stream(0, stream).unwrap();
}

/// A stream freed on one thread while another queues work on it (having looked it up just
/// before): the queue lives until that work is queued, the other thread's later work goes on the
/// device's own queue, every copy lands, and two threads freeing one stream free it once.
#[test]
fn a_stream_freed_while_another_thread_uses_it() {
    if !have_opencl() {
        return;
    }
    let api = tvm_runtime::device::api(4).unwrap();
    let data: Vec<u8> = (0..4096u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    for round in 0..20 {
        let stream = api.create_stream(0).unwrap() as usize;
        std::thread::scope(|s| {
            let user = s.spawn(|| {
                // Refused when the stream is already gone (then the copies go on the device's queue).
                let _ = api.set_stream(0, stream as *mut std::ffi::c_void);
                let arr =
                    tvm_runtime::tensor::NDArray::empty(&[4096], tvm_runtime::dlpack::DLDataType::F32, CL).unwrap();
                for _ in 0..30 {
                    // SAFETY: an array of this thread's alone.
                    unsafe { arr.copy_from_bytes(&data) }.unwrap();
                    assert_eq!(arr.to_vec(), data, "round {round}");
                }
            });
            std::thread::sleep(std::time::Duration::from_micros(200 * round));
            let freers: Vec<_> =
                (0..2).map(|_| s.spawn(|| api.free_stream(0, stream as *mut std::ffi::c_void))).collect();
            let freed: Vec<bool> = freers.into_iter().map(|f| f.join().unwrap().is_ok()).collect();
            assert_eq!(freed.iter().filter(|ok| **ok).count(), 1, "freed once: {freed:?}");
            user.join().unwrap();
        });
    }
}

#[test]
fn heterogeneous_graphs_run_on_both_devices() {
    use tvm_runtime::module::Module;
    use tvm_runtime::packed::{registry, ArgsBuilder};
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/hetero_cl");
    let lib = f.load_lib();
    let both = [CL, DLDevice::CPU];
    let default = Module::get_function(&lib, "default", false).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.device(CL).device(DLDevice::CPU);
    let from_factory = default.call(&a.args()).unwrap().into_object::<Module>().unwrap();
    let create = registry::get("tvm.graph_executor.create").unwrap();
    let mut a = ArgsBuilder::new();
    a.str(&f.graph_json()).object(lib.clone().into_any());
    for d in both {
        a.int(d.device_type as i64).int(d.device_id as i64);
    }
    let from_create = create.call(&a.args()).unwrap().into_object::<Module>().unwrap();
    let cl_only = f.executor_without_params_on(&lib, CL);
    for (m, how) in [(&from_factory, "factory"), (&from_create, "create"), (&cl_only, "OpenCL given alone")] {
        exec(m).load_params(&f.params()).unwrap();
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, how);
        exec(m).run().unwrap();
        f.check_outputs(m, how);
        let plan = exec(m).plan();
        assert_eq!(plan.devices, both, "{how}");
        assert!(plan.entry_device.contains(&DLDevice::CPU) && plan.entry_device.contains(&CL));
    }
    // Executors sharing weights and activations: the arena spans two devices, so it stays each
    // executor's own.
    let e = exec(&from_create).share_activations(exec(&cl_only)).unwrap_err();
    assert!(e.to_string().contains("on several devices"), "{e}");
    // A graph on OpenCL and the CPU, given a CUDA device: refused.
    let mut a = ArgsBuilder::new();
    a.str(&f.graph_json()).object(lib.into_any()).int(2).int(0);
    assert!(create.call(&a.args()).is_err());
}

/// Sharing weights that live on the device into an executor on the CPU is refused, naming both
/// devices, and leaves the CPU executor exactly as it was: the same memory behind every entry,
/// the same report, and a run that gives upstream's bytes (it once ran its kernels on null tensors).
#[test]
fn a_refused_cross_device_share_changes_nothing() {
    if !have_opencl() {
        return;
    }
    let (fc, fo) = (Fixture::load("mlp_unbound_b1"), Fixture::load("opencl/mlp_unbound_cl_b1"));
    let (libc, libo) = (fc.load_lib(), fo.load_lib());
    let on_cl = fo.executor_without_params_on(&libo, CL);
    exec(&on_cl).load_params(&fo.params()).unwrap();
    for loaded in [true, false] {
        let cpu = if loaded { fc.executor_from_create(&libc) } else { fc.executor_without_params(&libc) };
        let ex = exec(&cpu);
        fc.set_inputs(&cpu);
        ex.run().unwrap();
        let entries = |ex: &tvm_runtime::executor::GraphExecutor| {
            (0..ex.plan().graph.num_entries()).map(|e| ex.entry_data(e) as usize).collect::<Vec<_>>()
        };
        let (before, usage) = (entries(ex), ex.memory_usage());
        let e = ex.share_params(exec(&on_cl), &fo.params()).unwrap_err().to_string();
        assert!(e.contains("opencl(0)") && e.contains("cpu(0)"), "{e}");
        assert_eq!(entries(ex), before, "every entry keeps its memory");
        assert_eq!(ex.memory_usage(), usage);
        ex.run().unwrap();
        if loaded {
            fc.check_outputs(&cpu, "after a refused share");
        }
        // The device executor is as it was too.
        fo.set_inputs(&on_cl);
        exec(&on_cl).run().unwrap();
        fo.check_outputs(&on_cl, "shared from, refused");
    }
}

/// The entries of a pre-compiled programs blob (upstream's format), read here independently of the
/// library's own reader.
fn blob_entries(blob: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut at = 0;
    let u64_at = |at: &mut usize| {
        let v = u64::from_le_bytes(blob[*at..*at + 8].try_into().unwrap()) as usize;
        *at += 8;
        v
    };
    let n = u64_at(&mut at);
    let mut out = Vec::new();
    for _ in 0..n {
        let len = u64_at(&mut at);
        let name = String::from_utf8(blob[at..at + len].to_vec()).unwrap();
        at += len;
        let len = u64_at(&mut at);
        out.push((name, blob[at..at + len].to_vec()));
        at += len;
    }
    assert_eq!(at, blob.len(), "nothing after the programs");
    out
}

fn blob_of(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = (entries.len() as u64).to_le_bytes().to_vec();
    for (name, bin) in entries {
        b.extend((name.len() as u64).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend((bin.len() as u64).to_le_bytes());
        b.extend(bin);
    }
    b
}

/// Programs compiled once: the blob `opencl.GetPreCompiledPrograms` gives (one program per kernel,
/// by name) set into another load of the library runs the model exactly; a blob that is damaged,
/// names a kernel the module lacks, or holds another kernel's program is refused with the reason
/// and installs nothing, so the module still builds and runs.
#[test]
fn precompiled_programs_round_trip_and_bad_blobs_change_nothing() {
    if !have_opencl() {
        return;
    }
    use tvm_runtime::module::Module;
    use tvm_runtime::packed::{ArgsBuilder, RetValue};
    let f = Fixture::load("opencl/mlp_cl");
    let function = |lib, name| Module::get_function(lib, name, true).unwrap().unwrap();
    let first = f.load_lib_copy();
    let RetValue::Bytes(blob) =
        function(&first, "opencl.GetPreCompiledPrograms").call(&ArgsBuilder::new().args()).unwrap()
    else {
        panic!("bytes")
    };
    let entries = blob_entries(&blob);
    assert!(entries.len() >= 2, "every kernel of the MLP: {}", entries.len());
    assert!(entries.iter().all(|(name, bin)| name.starts_with("tvmgen_default_") && !bin.is_empty()));

    let lib = f.load_lib_copy();
    let set = function(&lib, "opencl.SetPreCompiledPrograms");
    let set_bytes = |b: &[u8]| {
        let mut a = ArgsBuilder::new();
        a.bytes(b);
        set.call(&a.args()).map(|_| ()).map_err(|e| e.to_string())
    };
    let mut unknown = entries.clone();
    unknown[0].0 = "no_such_kernel".into();
    let mut swapped = entries.clone();
    swapped[0].1 = entries[1].1.clone();
    let mut garbage = entries.clone();
    garbage[1].1 = b"not a program binary".to_vec();
    let cases: [(&[u8], &str); 5] = [
        (&blob[..blob.len() - 1], "exceeds"),
        (&blob[..4], "pre-compiled OpenCL programs"),
        (&blob_of(&unknown), "kernel 'no_such_kernel' is not a function of this module"),
        (&blob_of(&swapped), &format!("kernel {}: OpenCL error in clCreateKernel", entries[0].0)),
        (&blob_of(&garbage), &format!("pre-compiled OpenCL programs: kernel {}", entries[1].0)),
    ];
    for (bad, why) in cases {
        let e = set_bytes(bad).unwrap_err();
        assert!(e.contains(why), "{why}: {e}");
    }
    set_bytes(&blob).unwrap();
    let m = f.executor_from_factory_on(&lib, CL);
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "programs from the blob");
    // Programs already built are kept (as upstream): setting them again changes nothing.
    set_bytes(&blob).unwrap();
    exec(&m).run().unwrap();
    f.check_outputs(&m, "the blob set twice");
}

/// A library's kernels keep the device functions they looked up in the library's own memory for
/// as long as it stays loaded, past the runtime's last module of it when something else holds
/// the file open: here the test itself, as a host that dlopen'ed the library does, or another
/// thread's load of the same file in flight. Each load's executor must still call live functions:
/// upstream's bytes every round, while freed objects are being reused.
#[test]
fn kernels_keep_their_functions_while_the_library_stays_loaded() {
    if !have_opencl() {
        return;
    }
    let f = Fixture::load("opencl/mlp_unbound_cl_b4");
    let path = std::ffi::CString::new(f.lib_path()).unwrap();
    // SAFETY: loads the fixture (no constructors of note) and only holds it.
    let pin = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!pin.is_null());
    for round in 0..6 {
        let lib = f.load_lib();
        let m = f.executor_from_factory_on(&lib, CL);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, &format!("load {round} while the file stays loaded"));
        drop((m, lib));
        // Memory the freed objects held is handed out again.
        let churn: Vec<Vec<u8>> = (0..256).map(|i| vec![0xA5; 16 + i % 512]).collect();
        drop(churn);
    }
    // SAFETY: the handle taken above, given back once.
    unsafe { libc::dlclose(pin) };
}
