//! Operators that read only weights run once, when the weights are bound: outputs stay upstream's
//! byte for byte, writing a weight derives again, equal results are held once across executors,
//! the debug executor still shows every node; activations are laid out by liveness.

mod common;
use common::*;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::layout::Home;
use tvm_runtime::executor::plan::Plan;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;

/// An executor of `f` with its params loaded, folding (`set_fold_weights(1)`: alone, it would
/// run its weight-only operators every run, until a second executor shares its weights).
fn folding(f: &Fixture, lib: &ObjRef<Module>) -> ObjRef<Module> {
    let m = f.executor_from_create(lib);
    exec(&m).set_fold_weights(true).unwrap();
    m
}

/// Two executors of `f` with its params loaded: one folding, one not.
fn folding_and_not(f: &Fixture, lib: &ObjRef<Module>) -> (ObjRef<Module>, ObjRef<Module>) {
    let (on, off) = (folding(f, lib), f.executor_from_create(lib));
    exec(&off).set_fold_weights(false).unwrap();
    (on, off)
}

fn folded(m: &ObjRef<Module>) -> usize {
    exec(m).memory_usage().ops_folded
}

fn run_outputs(m: &ObjRef<Module>) -> Vec<Vec<u8>> {
    exec(m).run().unwrap();
    (0..exec(m).plan().num_outputs()).map(|k| exec(m).output(k).unwrap().to_vec()).collect()
}

/// Addresses of the derived weights an executor reads.
fn derived_addresses(m: &ObjRef<Module>) -> Vec<usize> {
    let ex = exec(m);
    let layout = ex.layout();
    let mut out: Vec<usize> = (0..ex.plan().graph.num_entries())
        .filter(|&e| layout.homes[e] == Home::Derived)
        .map(|e| ex.entry_data(e) as usize)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The first input of a folded operator: a weight whose value something is derived from.
fn weight_feeding_a_fold(m: &ObjRef<Module>) -> usize {
    let ex = exec(m);
    let layout = ex.layout();
    let plan = ex.plan();
    let op = plan.ops.iter().enumerate().find(|&(i, _)| layout.folded[i]).expect("a folded operator").1;
    plan.input_entries.iter().position(|&e| op.inputs().contains(&e)).expect("reads a graph input")
}

#[test]
fn every_fixture_gives_upstreams_bytes_with_folding_on_and_off() {
    let mut folding_seen = Vec::new();
    for f in Fixture::all() {
        let lib = f.load_lib();
        for fold in [true, false] {
            for (how, m) in [("factory", f.executor_from_factory(&lib)), ("create", f.executor_from_create(&lib))] {
                exec(&m).set_fold_weights(fold).unwrap();
                f.set_inputs(&m);
                exec(&m).run().unwrap();
                f.check_outputs(&m, &format!("{how}, fold {fold}"));
                exec(&m).run().unwrap();
                f.check_outputs(&m, &format!("{how}, fold {fold}, second run"));
                let ex = exec(&m);
                ex.layout().verify(ex.plan()).unwrap_or_else(|e| panic!("{}: {e}", f.name));
                let usage = ex.memory_usage();
                if fold && usage.ops_folded > 0 {
                    assert!(usage.weights_derived > 0, "{}: {usage:?}", f.name);
                    folding_seen.push(f.name.clone());
                } else {
                    assert_eq!((usage.ops_folded, usage.weights_derived), (0, 0), "{}: {usage:?}", f.name);
                }
            }
        }
    }
    for name in ["mlp_unbound_b1", "mlp_unbound_b8", "lstm_seq8", "lstm_seq16"] {
        assert!(folding_seen.iter().any(|n| n == name), "{name} folds nothing: {folding_seen:?}");
    }
}

#[test]
fn writing_a_weight_derives_again_and_loading_it_back_restores() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let (on, off) = folding_and_not(&f, &lib);
    let before = folded(&on);
    assert!(before > 0);
    let w = weight_feeding_a_fold(&on);
    let eid = exec(&on).plan().input_entries[w];
    let n = exec(&on).plan().entry_bytes[eid];
    // A new value: the float32 weights scaled by 2 (an exponent step, exact).
    let scaled: Vec<u8> = exec(&on)
        .input(w)
        .unwrap()
        .to_vec()
        .chunks_exact(4)
        .flat_map(|c| (f32::from_ne_bytes(c.try_into().unwrap()) * 2.0).to_ne_bytes())
        .collect();
    assert_eq!(scaled.len(), n);
    for m in [&on, &off] {
        exec(m).set_input_bytes(w, &scaled).unwrap();
        f.set_inputs(m);
    }
    let (a, b) = (run_outputs(&on), run_outputs(&off));
    assert_eq!(a, b, "a written weight must reach what is derived from it");
    assert_ne!(a[0], f.outputs[0].data, "the new weight changes the output");
    assert!(folded(&on) < before, "what reads a writable weight runs every time");
    // Loading params makes the weights read-only again: folded, from the values loaded.
    let name = exec(&on).plan().input_name(w).to_string();
    let shape = exec(&on).plan().graph.entries[eid].shape.clone();
    let dtype = exec(&on).plan().graph.entries[eid].dtype;
    let array = tvm_runtime::tensor::NDArray::from_bytes(&shape, dtype, &scaled).unwrap();
    let blob = tvm_runtime::params::save([(name.as_str(), &*array)]);
    for m in [&on, &off] {
        exec(m).load_params(&f.params()).unwrap();
        exec(m).run().unwrap();
        f.check_outputs(m, "params loaded back");
        exec(m).load_params(&blob).unwrap();
    }
    assert_eq!(folded(&on), before);
    assert_eq!(run_outputs(&on), a, "a loaded weight must reach what is derived from it");
    assert_eq!(run_outputs(&off), a);
}

#[test]
fn writing_through_get_input_reaches_derived_results() {
    // TVM's Python `set_input(**params)` writes weights through the array `get_input` returns.
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let (on, off) = folding_and_not(&f, &lib);
    let w = weight_feeding_a_fold(&on);
    for m in [&on, &off] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        let view = exec(m).input(w).unwrap();
        let zeros = vec![0u8; view.nbytes()];
        // SAFETY: nothing runs on this executor meanwhile.
        unsafe { view.copy_from_bytes(&zeros) }.unwrap();
    }
    let (a, b) = (run_outputs(&on), run_outputs(&off));
    assert_eq!(a, b);
    assert_ne!(a[0], f.outputs[0].data, "zeroed weights change the output");
}

#[test]
fn equal_derived_weights_are_held_once_across_sequence_lengths() {
    let (f8, f16) = (Fixture::load("lstm_seq8"), Fixture::load("lstm_seq16"));
    let a = f8.executor_from_create(&f8.load_lib());
    let b = f16.executor_without_params(&f16.load_lib());
    exec(&b).share_params(exec(&a), &f8.params()).unwrap();
    assert!(!derived_addresses(&a).is_empty());
    assert_eq!(derived_addresses(&a), derived_addresses(&b));
    for (f, m) in [(&f8, &a), (&f16, &b)] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "derived weights shared across sequence lengths");
    }
}

#[test]
fn equal_derived_weights_are_held_once_across_executors_and_batch_sizes() {
    let f1 = Fixture::load("mlp_unbound_b1");
    let f8 = Fixture::load("mlp_unbound_b8");
    let (lib1, lib8) = (f1.load_lib(), f8.load_lib());
    let a = f1.executor_from_create(&lib1);
    let b = f8.executor_without_params(&lib8);
    exec(&b).share_params(exec(&a), &f1.params()).unwrap();
    // Loaded on its own (folding on request): equal bytes, found by content.
    let c = folding(&f1, &lib1);
    let (da, db, dc) = (derived_addresses(&a), derived_addresses(&b), derived_addresses(&c));
    assert!(!da.is_empty());
    assert_eq!(da, db, "the batch-8 build derives the same bytes from the same weights");
    assert_eq!(da, dc);
    for (f, m) in [(&f1, &a), (&f8, &b), (&f1, &c)] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "derived weights held once");
    }
    // A different weight derives different bytes: not shared.
    let w = weight_feeding_a_fold(&c);
    let ones = vec![1u8; exec(&c).plan().entry_bytes[exec(&c).plan().input_entries[w]]];
    exec(&c).set_input_bytes(w, &ones).unwrap();
    exec(&c).run().unwrap();
    assert_ne!(derived_addresses(&c), da);
    assert_eq!(derived_addresses(&a), da);
}

fn debug_executor(f: &Fixture, lib: &ObjRef<Module>, fold: bool) -> GraphExecutor {
    let plan = Plan::new(&f.graph_json(), lib.clone(), DLDevice::CPU).unwrap();
    let ex = GraphExecutor::new_debug(plan).unwrap();
    ex.load_params(&f.params()).unwrap();
    ex.set_fold_weights(fold).unwrap();
    for t in &f.inputs {
        ex.set_input_bytes(ex.plan().input_index(&t.name).unwrap(), &t.data).unwrap();
    }
    ex
}

#[test]
fn the_debug_executor_shows_every_node_as_without_folding() {
    for name in ["mlp_unbound_b1", "lstm_seq8"] {
        let f = Fixture::load(name);
        let lib = f.load_lib();
        let plan = Plan::new(&f.graph_json(), lib.clone(), DLDevice::CPU).unwrap();
        let default = GraphExecutor::new_debug(plan).unwrap();
        default.load_params(&f.params()).unwrap();
        assert_eq!(default.memory_usage().ops_folded, 0, "a debug executor runs every node unless told");
        let (on, off) = (debug_executor(&f, &lib, true), debug_executor(&f, &lib, false));
        assert!(on.memory_usage().ops_folded > 0);
        let g = &on.plan().graph;
        for node in 0..g.nodes.len() {
            on.execute_node(node).unwrap();
            off.execute_node(node).unwrap();
            for k in 0..g.num_node_outputs(node) {
                let (a, b) = (on.node_output(node, k).unwrap(), off.node_output(node, k).unwrap());
                assert!(a.to_vec() == b.to_vec(), "{name}: node {node} ('{}') output {k}", g.nodes[node].name);
            }
        }
    }
}

#[test]
fn a_graph_output_derived_from_weights_only_reads_as_computed() {
    // The MLP's graph with one more output: the result of its first folded operator.
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let probe = folding(&f, &lib);
    let node = {
        let ex = exec(&probe);
        let layout = ex.layout();
        ex.plan().ops.iter().enumerate().find(|&(i, _)| layout.folded[i]).unwrap().1.node
    };
    let mut json: serde_json::Value = serde_json::from_str(&f.graph_json()).unwrap();
    json["heads"].as_array_mut().unwrap().push(serde_json::json!([node, 0, 0]));
    let graph = json.to_string();
    let make = |fold: bool| {
        let plan = Plan::new(&graph, lib.clone(), DLDevice::CPU).unwrap();
        let m = Module::new(GraphExecutor::new(plan).unwrap());
        exec(&m).set_fold_weights(fold).unwrap();
        exec(&m).load_params(&f.params()).unwrap();
        f.set_inputs(&m);
        m
    };
    let (on, off) = (make(true), make(false));
    assert!(folded(&on) > 0);
    let (a, b) = (run_outputs(&on), run_outputs(&off));
    assert_eq!(a, b);
    assert_eq!(a[0], f.outputs[0].data);
    // The operator writing an output runs at every run (the output keeps its home, as upstream's),
    // so the output is a view: what a write through it leaves is overwritten by the next run.
    let out = exec(&on).output(1).unwrap();
    // SAFETY: a view of the executor's output, which no run is using.
    unsafe { out.copy_from_bytes(&vec![0u8; out.nbytes()]) }.unwrap();
    assert_eq!(out.to_vec(), vec![0u8; out.nbytes()]);
    assert_eq!(run_outputs(&on), a);
    assert_eq!(out.to_vec(), a[1]);
    // Redirected to caller memory, it is written there by the run.
    let dst = tvm_runtime::tensor::NDArray::empty(out.shape(), out.dtype(), DLDevice::CPU).unwrap();
    // SAFETY: `dst` outlives the executor's use of it (this test's end).
    exec(&on).set_output_zero_copy(1, unsafe { tvm_runtime::executor::ZeroCopy::new(dst.raw()) }).unwrap();
    let before = folded(&on);
    exec(&on).run().unwrap();
    assert_eq!(dst.to_vec(), a[1]);
    assert_eq!(folded(&on), before, "what feeds the output stays folded");
}

#[test]
fn activations_are_laid_out_to_the_liveness_bound_and_stay_apart() {
    for f in Fixture::all() {
        let lib = f.load_lib();
        let m = f.executor_from_create(&lib);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        let ex = exec(&m);
        let layout = ex.layout();
        let layout = &layout;
        layout.verify(ex.plan()).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert!(
            layout.arena_bytes
                <= ex.plan().storage.bytes_of(tvm_runtime::memory_plan::SlotRole::Activation)
                    + 64 * ex.plan().ops.len(),
            "{}",
            f.name
        );
    }
}

#[test]
fn a_weight_only_operator_that_fails_fails_run_with_its_message() {
    // Declare the first folded operator's output float64: its own argument check rejects it.
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let probe = folding(&f, &lib);
    let (node, out) = {
        let ex = exec(&probe);
        let layout = ex.layout();
        let op = ex.plan().ops.iter().enumerate().find(|&(i, _)| layout.folded[i]).unwrap().1;
        (op.node, op.outputs()[0])
    };
    let mut json: serde_json::Value = serde_json::from_str(&f.graph_json()).unwrap();
    json["attrs"]["dltype"][1][out] = "float64".into();
    let m = GraphExecutor::create(&json.to_string(), lib, DLDevice::CPU).unwrap();
    let ex = exec(&m);
    // Loading succeeds and nothing is folded: the operator runs at `run`, which reports the
    // failure at every try, as upstream's does.
    ex.load_params(&f.params()).unwrap();
    assert_eq!(folded(&m), 0);
    f.set_inputs(&m);
    let names_it = |e: tvm_runtime::Error| {
        let e = e.to_c_message();
        assert!(e.contains(&format!("(node {node} ")) && e.contains("failed"), "{e}");
    };
    names_it(ex.run().unwrap_err());
    names_it(ex.run().unwrap_err());
    ex.set_fold_weights(true).unwrap();
    names_it(ex.run().unwrap_err());
    // Still usable: inputs and outputs read and write.
    f.set_inputs(&m);
    assert_eq!(ex.output(0).unwrap().shape(), &f.outputs[0].shape[..]);
}

#[test]
fn weights_mapped_from_a_file_are_folded_only_when_asked() {
    // Mapped weights are shared across processes through the page cache and load in no time:
    // derived results would be private memory of each process, computed at load.
    let f = Fixture::load("lstm_seq8");
    let path = f.aligned_params_file("fold.params");
    let lib = f.load_lib();
    let m = f.executor_without_params(&lib);
    let ex = exec(&m);
    // SAFETY: the file is this test's own and stays unchanged until it is removed at the end.
    let (mapped, copied) = load_mapped(ex, path.to_str().unwrap()).unwrap();
    assert_eq!((mapped, copied), (4, 0));
    assert_eq!((folded(&m), ex.memory_usage().weights_derived), (0, 0));
    f.set_inputs(&m);
    ex.run().unwrap();
    f.check_outputs(&m, "mapped, not folded");
    ex.set_fold_weights(true).unwrap();
    assert!(folded(&m) > 0 && ex.memory_usage().weights_derived > 0);
    ex.run().unwrap();
    f.check_outputs(&m, "mapped, folded on request");
    drop(m);
    std::fs::remove_file(&path).unwrap();
}

/// `TVM_RT_FOLD_WEIGHTS` sets the process default, read once: checked in child processes of this
/// test binary, one per setting.
#[test]
fn the_environment_sets_the_default_folding() {
    for (value, want) in [("0", "Off"), ("1", "All"), ("", "Shared"), ("yes", "Shared")] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "default_folding_in_a_child", "--include-ignored", "--nocapture"])
            .env("TVM_RT_FOLD_WEIGHTS", value)
            .env("TVMRT_EXPECT_FOLDING", want)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("1 passed"), "TVM_RT_FOLD_WEIGHTS={value}: {text}");
    }
}

#[test]
#[ignore = "run by the_environment_sets_the_default_folding, in a process of its own"]
fn default_folding_in_a_child() {
    let want = std::env::var("TVMRT_EXPECT_FOLDING").unwrap();
    assert_eq!(format!("{:?}", tvm_runtime::executor::Folding::by_default()), want);
}

/// By default a lone executor runs its weight-only operators at every run, as upstream, and holds
/// nothing derived (no more memory than upstream's); an executor sharing its weights makes both
/// fold (the results computed once); the last one left alone keeps them for a while (sharers made
/// per request find them), then runs the operators again and lets the derived weights go.
/// Outputs are upstream's bytes throughout.
#[test]
fn weight_only_operators_fold_once_a_second_executor_shares() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let a = f.executor_from_create(&lib);
    f.set_inputs(&a);
    exec(&a).run().unwrap();
    f.check_outputs(&a, "alone");
    let alone = exec(&a).memory_usage();
    assert_eq!((alone.ops_folded, alone.weights_derived), (0, 0), "{alone:?}");
    let b = f.executor_without_params(&lib);
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "sharing");
    }
    let (ua, ub) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert!(ua.ops_folded > 0 && ua.ops_folded == ub.ops_folded, "{ua:?} {ub:?}");
    assert!(ua.weights_derived > 0);
    assert_eq!(derived_addresses(&a), derived_addresses(&b), "derived once, for both");
    let derived = derived_addresses(&a);
    drop(b);
    exec(&a).run().unwrap();
    f.check_outputs(&a, "alone again, at once");
    assert_eq!(derived_addresses(&a), derived, "kept a while");
    std::thread::sleep(tvm_runtime::executor::layout::keep_folded_default() + std::time::Duration::from_millis(100));
    exec(&a).run().unwrap();
    f.check_outputs(&a, "alone again");
    let again = exec(&a).memory_usage();
    assert_eq!((again.ops_folded, again.weights_derived), (0, 0), "{again:?}");
}
