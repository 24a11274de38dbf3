//! Every committed fixture, through both creation paths, against upstream's outputs.

mod common;
use common::*;

#[test]
fn every_fixture_matches_upstream_through_the_factory() {
    let all = Fixture::all();
    assert!(all.len() >= 10, "fixtures missing: {}", all.len());
    for f in all {
        let lib = f.load_lib();
        let m = f.executor_from_factory(&lib);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "factory");
    }
}

#[test]
fn every_fixture_matches_upstream_through_create_and_load_params() {
    for f in Fixture::all() {
        let lib = f.load_lib();
        let m = f.executor_from_create(&lib);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "create");
        // A second run gives the same answer.
        exec(&m).run().unwrap();
        f.check_outputs(&m, "create, second run");
    }
}

/// Libraries of TVM 0.8 and older link weights in and hand them out through
/// `_lookup_linked_param(storage_id)`. Here a module answers it with the MLP's weights, which must
/// then be used in place, read-only.
#[test]
fn linked_params_from_lookup_linked_param_are_used_in_place() {
    let f = Fixture::load("mlp_unbound_b1");
    let (lib, pointers) = linked_library(&f);
    let m =
        tvm_runtime::executor::GraphExecutor::create(&f.graph_json(), lib, tvm_runtime::dlpack::DLDevice::CPU).unwrap();
    let ex = exec(&m);
    let i = ex.plan().input_index("fc1_weight").unwrap();
    let p = ex.entry_data(ex.plan().input_entries[i]) as usize;
    assert!(pointers.contains(&p), "fc1_weight is not used in place");
    f.set_inputs(&m);
    ex.run().unwrap();
    f.check_outputs(&m, "linked params");
    // Linked constants are never written: a write takes a private copy.
    ex.set_input_bytes(i, &vec![0u8; 128 * 784 * 4]).unwrap();
    assert_ne!(ex.entry_data(ex.plan().input_entries[i]) as usize, p);
    let usage = ex.memory_usage();
    assert!(usage.weights_shared > 0 && usage.weights_owned == 128 * 784 * 4, "{usage:?}");
}
