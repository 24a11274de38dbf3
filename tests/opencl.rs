//! Models built for OpenCL, run on the first OpenCL device (pocl's CPU device in CI): outputs
//! against upstream's OpenCL runtime on the same artefacts, byte for byte, on both creation paths,
//! with weights shared in device memory. Skipped, saying so, where no OpenCL device exists, unless
//! `TVM_RT_REQUIRE_OPENCL=1` (CI sets it).

mod common;

use common::*;
use tvm_runtime::dlpack::DLDevice;

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };

/// Whether an OpenCL device exists; fails when one is required and missing.
fn have_opencl() -> bool {
    tvm_runtime::init();
    let n = tvm_runtime::device::api(4).and_then(|a| a.count()).unwrap_or(0);
    if n == 0 {
        assert!(
            std::env::var("TVM_RT_REQUIRE_OPENCL").map_or(true, |v| v != "1"),
            "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device: {:?}",
            tvm_runtime::device::api(4).and_then(|a| a.count()).err()
        );
        eprintln!("no OpenCL device: skipping (install pocl-opencl-icd)");
    }
    n > 0
}

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
