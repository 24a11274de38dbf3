//! Two OpenCL devices of one platform (pocl's CPU device twice: `POCL_DEVICES="pthread pthread"`,
//! set before OpenCL starts, so this file is a test process of its own): they share one context,
//! so weights loaded on `opencl(0)` bind on `opencl(1)` as they are, one copy for both.

mod common;

use common::*;
use tvm_runtime::dlpack::DLDevice;

/// Whether two OpenCL devices exist, asking pocl for them before anything opens OpenCL here.
fn two_devices() -> bool {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let n = *N.get_or_init(|| {
        std::env::set_var("POCL_DEVICES", "pthread pthread");
        tvm_runtime::init();
        tvm_runtime::device::api(4).and_then(|a| a.count()).unwrap_or(0)
    });
    if n < 2 {
        assert!(
            std::env::var("TVM_RT_REQUIRE_OPENCL").map_or(true, |v| v != "1"),
            "TVM_RT_REQUIRE_OPENCL=1 but pocl gave {n} device(s) for POCL_DEVICES=\"pthread pthread\""
        );
        eprintln!("fewer than two OpenCL devices: skipping");
    }
    n >= 2
}

#[test]
fn devices_of_one_context_share_weights() {
    if !two_devices() {
        return;
    }
    let (cl0, cl1) = (DLDevice { device_type: 4, device_id: 0 }, DLDevice { device_type: 4, device_id: 1 });
    let f = Fixture::load("opencl/mlp_unbound_cl_b1");
    let lib = f.load_lib();
    let a = f.executor_without_params_on(&lib, cl0);
    exec(&a).load_params(&f.params()).unwrap();
    let b = f.executor_without_params_on(&lib, cl1);
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "sharing across devices of one context");
    }
    let plan = exec(&a).plan().clone();
    let weights: Vec<usize> = (0..plan.num_inputs())
        .filter(|&i| exec(&a).is_param(plan.input_name(i)))
        .map(|i| plan.input_entries[i])
        .collect();
    assert!(!weights.is_empty());
    for e in weights {
        assert_eq!(exec(&a).entry_data(e), exec(&b).entry_data(e), "entry {e}: one buffer for both devices");
    }
    assert_eq!(exec(&b).memory_usage().device, cl1);
    assert_eq!(exec(&b).memory_usage().weights_owned, 0);
}

/// Programs compiled once on the second device of a context: a program made from source covers
/// both devices of the context and is built for one, so its binary is the one of the device asked
/// for (the other has none); a blob from device 1 installs on device 1 and runs the model there.
#[test]
fn precompiled_programs_per_device_of_a_context() {
    if !two_devices() {
        return;
    }
    use tvm_runtime::module::Module;
    use tvm_runtime::packed::{ArgsBuilder, RetValue};
    let api = tvm_runtime::device::api(4).unwrap();
    let f = Fixture::load("opencl/mlp_cl");
    // This thread's current device: what the two functions work on, as upstream's.
    api.set_device(1).unwrap();
    let first = f.load_lib_copy();
    let get = Module::get_function(&first, "opencl.GetPreCompiledPrograms", true).unwrap().unwrap();
    let RetValue::Bytes(blob) = get.call(&ArgsBuilder::new().args()).unwrap() else { panic!("bytes") };
    assert!(u64::from_le_bytes(blob[..8].try_into().unwrap()) >= 2);
    let lib = f.load_lib_copy();
    let set = Module::get_function(&lib, "opencl.SetPreCompiledPrograms", true).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.bytes(&blob);
    set.call(&a.args()).unwrap();
    let cl1 = DLDevice { device_type: 4, device_id: 1 };
    let m = f.executor_from_factory_on(&lib, cl1);
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "programs from device 1's blob, on device 1");
    api.set_device(0).unwrap();
}
