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

/// `tvmrt.run_into`, the request in one call: every input set (by name or index), the run, the
/// outputs copied into the caller's tensors (all of them, or the first few), the answers
/// upstream's; a count that does not add up is refused before anything is set.
#[test]
fn run_into_sets_runs_and_copies_out_in_one_call() {
    use tvm_runtime::tensor::NDArray;
    let f = Fixture::load("multi_io");
    let lib = f.load_lib();
    let m = f.executor_from_factory(&lib);
    let inputs: Vec<_> = f.inputs.iter().map(|t| NDArray::from_bytes(&t.shape, t.dtype, &t.data).unwrap()).collect();
    let outputs: Vec<_> = f
        .outputs
        .iter()
        .map(|t| NDArray::empty(&t.shape, t.dtype, tvm_runtime::dlpack::DLDevice::CPU).unwrap())
        .collect();
    call(&m, "tvmrt.run_into", |a| {
        a.int(f.inputs.len() as i64);
        for (k, (t, arr)) in f.inputs.iter().zip(&inputs).enumerate() {
            // Names and indices both.
            if k % 2 == 0 {
                a.str(&t.name);
            } else {
                a.int(exec(&m).plan().input_index(&t.name).unwrap() as i64);
            }
            a.object(arr.clone().into_any());
        }
        for o in &outputs {
            a.object(o.clone().into_any());
        }
    })
    .unwrap();
    for (k, (o, want)) in outputs.iter().zip(&f.outputs).enumerate() {
        assert_eq!(o.to_vec(), want.data, "output {k}");
    }
    // The first two outputs only, into fresh tensors.
    let two: Vec<_> = outputs[..2].iter().map(|o| NDArray::empty(o.shape(), o.dtype(), o.device()).unwrap()).collect();
    call(&m, "tvmrt.run_into", |a| {
        a.int(0);
        for o in &two {
            a.object(o.clone().into_any());
        }
    })
    .unwrap();
    assert_eq!(two[1].to_vec(), f.outputs[1].data);
    // Counts that do not add up, an unknown name, too many outputs: refused, saying which.
    let err = |build: &dyn Fn(&mut tvm_runtime::packed::ArgsBuilder)| {
        call(&m, "tvmrt.run_into", |a| build(a)).unwrap_err().to_string()
    };
    assert!(err(&|a| {
        a.int(2);
        a.str("x");
    })
    .contains("n = 2 with 2 arguments"));
    assert!(err(&|a| {
        a.int(-1);
    })
    .contains("n = -1"));
    // A count whose doubling overflows: refused, not a panic.
    assert!(err(&|a| {
        a.int(i64::MAX);
    })
    .contains(&format!("n = {}", i64::MAX)));
    assert!(err(&|a| {
        a.int(1).str("no_such_input").object(inputs[0].clone().into_any());
    })
    .contains("no_such_input"));
    let many = err(&|a| {
        a.int(0);
        for _ in 0..8 {
            a.object(outputs[0].clone().into_any());
        }
    });
    assert!(many.contains("8 output tensors given: the graph has 7"), "{many}");
}

/// A data input bound to caller memory again and again (what a host does before every run): each
/// run reads the memory bound last, an array handed out for the input follows it, and the answers
/// are those of the same bytes set by copy.
#[test]
fn an_input_rebound_to_caller_memory_reads_the_latest() {
    use tvm_runtime::tensor::NDArray;
    let f = Fixture::load("multi_io");
    let lib = f.load_lib();
    let m = f.executor_from_factory(&lib);
    let reference = f.executor_from_factory(&lib);
    f.set_inputs(&m);
    f.set_inputs(&reference);
    let x = &f.inputs[0];
    let xi = exec(&m).plan().input_index(&x.name).unwrap();
    let buffers: Vec<_> = (0..3)
        .map(|k| {
            let scaled: Vec<u8> = x
                .data
                .chunks_exact(4)
                .flat_map(|c| (f32::from_le_bytes(c.try_into().unwrap()) * (k + 1) as f32).to_le_bytes())
                .collect();
            NDArray::from_bytes(&x.shape, x.dtype, &scaled).unwrap()
        })
        .collect();
    let mut view = None;
    for (k, b) in buffers.iter().enumerate() {
        call(&m, "set_input_zero_copy", |a| {
            a.str(&x.name).object(b.clone().into_any());
        })
        .unwrap();
        if k == 0 {
            view = Some(exec(&m).input(xi).unwrap());
        }
        assert_eq!(view.as_ref().unwrap().data_ptr(), b.data_ptr(), "the handed-out array follows binding {k}");
        exec(&m).run().unwrap();
        exec(&reference).set_input_bytes(xi, &b.to_vec()).unwrap();
        exec(&reference).run().unwrap();
        for o in 0..exec(&m).plan().num_outputs() {
            assert_eq!(exec(&m).output(o).unwrap().to_vec(), exec(&reference).output(o).unwrap().to_vec(), "run {k}");
        }
    }
}
