//! The activation layout checked by an oracle that shares no code with the planner: alias roots
//! found by walking `__nop` nodes of the graph, live ranges by scanning every operator, and a
//! brute-force byte-overlap check of every pair of values live at one operator. Run on every
//! fixture, and on hand-built graphs of `__copy` and `__nop` nodes whose layouts are known, which
//! also run (a wrong layout gives wrong bytes). `Layout::verify` must reject a bad layout too.

mod common;
use common::*;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::layout::{Home, Layout};
use tvm_runtime::executor::plan::Plan;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::graph::NodeKind;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;

/// Where a value lives: (region, start, end) with region 0 the arena, 1 the output region.
type Place = (u8, usize, usize);

/// Every executed operator's values, and the pairs of them live at one operator that share a
/// byte: must be none. Also: every place inside its region.
fn overlaps(plan: &Plan, layout: &Layout) -> Vec<String> {
    let g = &plan.graph;
    let n = g.num_entries();
    // Alias roots from the graph alone.
    let mut root: Vec<usize> = (0..n).collect();
    for (nid, node) in g.nodes.iter().enumerate() {
        if let NodeKind::Op(a) = &node.kind {
            if a.func_name == "__nop" {
                let (src, idx) = node.inputs[0];
                root[g.entry_id(nid, 0)] = root[g.entry_id(src, idx)];
            }
        }
    }
    // Executed operators in order, with the entries they read and write.
    let ops: Vec<(Vec<usize>, Vec<usize>)> = plan
        .ops
        .iter()
        .zip(&layout.folded)
        .filter(|(_, &folded)| !folded)
        .map(|(op, _)| (op.inputs().to_vec(), op.outputs().to_vec()))
        .collect();
    let place = |e: usize| -> Option<Place> {
        match layout.homes[e] {
            Home::Arena(at) => Some((0, at, at + plan.entry_bytes[e])),
            Home::Output(at) => Some((1, at, at + plan.entry_bytes[e])),
            _ => None,
        }
    };
    let outputs: Vec<usize> = plan.output_entries.iter().map(|&e| root[e]).collect();
    // Per root written by a run: [first writer, last reader]; outputs are read after the run too.
    let mut live: Vec<Option<(usize, usize)>> = vec![None; n];
    for (i, (_, outs)) in ops.iter().enumerate() {
        for &e in outs {
            if place(e).is_some() && live[root[e]].is_none() {
                live[root[e]] = Some((i, i));
            }
        }
    }
    for (i, (ins, _)) in ops.iter().enumerate() {
        for &e in ins {
            if let Some((_, last)) = &mut live[root[e]] {
                *last = (*last).max(i);
            }
        }
    }
    for &r in &outputs {
        if let Some(span) = &mut live[r] {
            *span = (0, ops.len());
        }
    }
    let mut problems = Vec::new();
    let values: Vec<(usize, (usize, usize), Vec<Place>)> = (0..n)
        .filter_map(|r| live[r].map(|s| (r, s, (0..n).filter(|&e| root[e] == r).filter_map(place).collect())))
        .collect();
    for (r, _, places) in &values {
        for &(region, start, end) in places {
            let size = if region == 0 { layout.arena_bytes } else { plan.output_region_bytes };
            if end > size || start % 64 != 0 {
                problems.push(format!("value {r} at {start}..{end} of region {region} ({size} bytes)"));
            }
        }
    }
    for (k, (a, sa, pa)) in values.iter().enumerate() {
        for (b, sb, pb) in &values[k + 1..] {
            if sa.0 > sb.1 || sb.0 > sa.1 {
                continue;
            }
            for x in pa {
                for y in pb {
                    if x.0 == y.0 && x.1 < y.2 && y.1 < x.2 {
                        problems.push(format!("values {a} {x:?} and {b} {y:?} are live together and overlap"));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn every_fixture_lays_out_its_values_apart() {
    for f in Fixture::all() {
        let lib = f.load_lib();
        for fold in [true, false] {
            let m = f.executor_from_create(&lib);
            exec(&m).set_fold_weights(fold).unwrap();
            f.set_inputs(&m);
            exec(&m).run().unwrap();
            let ex = exec(&m);
            let layout = ex.layout();
            let problems = overlaps(ex.plan(), &layout);
            assert!(problems.is_empty(), "{} (fold {fold}): {problems:?}", f.name);
            layout.verify(ex.plan()).unwrap();
        }
    }
}

/// A graph of float32 [16] entries: `nodes` are (name, op, input node), op "" for an input; every
/// entry gets its own storage id, except that a `__nop` shares its input's.
fn graph(nodes: &[(&str, &str, usize)], heads: &[usize]) -> String {
    graph_sized(nodes, heads, &vec![16; nodes.len()])
}

/// The same with each node's element count.
fn graph_sized(nodes: &[(&str, &str, usize)], heads: &[usize], sizes: &[usize]) -> String {
    let mut sids = Vec::new();
    let mut json_nodes = Vec::new();
    for (i, &(name, op, input)) in nodes.iter().enumerate() {
        if op.is_empty() {
            json_nodes.push(format!(r#"{{"op":"null","name":"{name}","inputs":[]}}"#));
            sids.push(i);
        } else {
            json_nodes.push(format!(
                r#"{{"op":"tvm_op","name":"{name}","attrs":{{"func_name":"{op}","num_inputs":"1","num_outputs":"1","flatten_data":"0"}},"inputs":[[{input},0,0]]}}"#
            ));
            sids.push(if op == "__nop" { sids[input] } else { i });
        }
    }
    let inputs: Vec<String> = (0..nodes.len()).filter(|&i| nodes[i].1.is_empty()).map(|i| i.to_string()).collect();
    let n = nodes.len();
    format!(
        r#"{{"nodes":[{}],"arg_nodes":[{}],"heads":[{}],"node_row_ptr":[{}],"attrs":{{"dltype":["list_str",[{}]],"shape":["list_shape",[{}]],"storage_id":["list_int",[{}]]}}}}"#,
        json_nodes.join(","),
        inputs.join(","),
        heads.iter().map(|h| format!("[{h},0,0]")).collect::<Vec<_>>().join(","),
        (0..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(","),
        vec!["\"float32\""; n].join(","),
        sizes.iter().map(|k| format!("[{k}]")).collect::<Vec<_>>().join(","),
        sids.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")
    )
}

/// An executor of `json` (kernels never looked up: `__copy` and `__nop` only), its input 0 set
/// to 1..16, run.
fn run(json: &str) -> ObjRef<Module> {
    let lib = Fixture::load("mlp_b1").load_lib();
    let m = Module::new(GraphExecutor::new(Plan::new(json, lib, DLDevice::CPU).unwrap()).unwrap());
    let x: Vec<u8> = (1..=16).flat_map(|v| (v as f32).to_le_bytes()).collect();
    exec(&m).set_input_bytes(0, &x).unwrap();
    exec(&m).run().unwrap();
    m
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// `a`, then a `__nop` of it that is read last: `a` lives until then, although the `__nop`
/// node comes right after it. The copies written meanwhile must not take its bytes.
#[test]
fn a_value_read_through_a_late_nop_keeps_its_bytes() {
    let json = graph(
        &[
            ("x", "", 0),
            ("a", "__copy", 0),
            ("a_view", "__nop", 1),
            ("b", "__copy", 0),
            ("c", "__copy", 3),
            ("d", "__copy", 4),
            ("e", "__copy", 2),
        ],
        &[6, 5],
    );
    let m = run(&json);
    let ex = exec(&m);
    let want: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    for k in 0..2 {
        assert_eq!(floats(&ex.output(k).unwrap().to_vec()), want, "output {k}");
    }
    let layout = ex.layout();
    let layout = &layout;
    assert_eq!(overlaps(ex.plan(), layout), Vec::<String>::new());
    // Live at once at most: a, and two of b, c (d and e are outputs, in their own region).
    assert_eq!(layout.arena_bytes, 3 * 64, "{layout:?}");
    assert_eq!(ex.plan().output_region_bytes, 2 * 64);
    // The bound: the input (64) + the outputs (2 x 64) + the peak of the arena values (3 x 64).
    assert_eq!(layout.bound, 6 * 64);
}

/// A value is live from the operator writing it, not from a later `__nop` of it: here `a` must
/// not take the bytes of `y`, which the operator writing `a` reads.
#[test]
fn a_value_is_live_from_its_writer_not_its_nop() {
    let json = graph(
        &[("x", "", 0), ("y", "__copy", 0), ("a", "__copy", 1), ("a_view", "__nop", 2), ("out", "__copy", 3)],
        &[4],
    );
    let m = run(&json);
    let ex = exec(&m);
    assert_eq!(floats(&ex.output(0).unwrap().to_vec()), (1..=16).map(|v| v as f32).collect::<Vec<_>>());
    let layout = ex.layout();
    assert_eq!(overlaps(ex.plan(), &layout), Vec::<String>::new());
    assert_eq!(layout.arena_bytes, 2 * 64);
}

/// The bound counts the inputs that are not weights, the outputs and the peak of the arena;
/// weights are memory of their own (shared, mapped), not the run's.
#[test]
fn the_bound_leaves_weights_out() {
    let json = graph(&[("x", "", 0), ("w", "", 0), ("a", "__copy", 0), ("b", "__copy", 2)], &[3]);
    let m = run(&json);
    let ex = exec(&m);
    assert_eq!(ex.memory_usage().activation_bound, 4 * 64, "w is an input like x until loaded as a weight");
    let w = tvm_runtime::tensor::NDArray::from_bytes(&[16], "float32".parse().unwrap(), &[0u8; 64]).unwrap();
    ex.load_params(&tvm_runtime::params::save([("w", &*w)])).unwrap();
    assert_eq!(ex.memory_usage().activation_bound, 3 * 64, "a loaded weight is not counted");
    assert_eq!(ex.memory_usage().weights_owned, 64);
}

/// A graph whose storage ids put an operator's output in an input's slot is laid out by storage
/// ids, as upstream's: nothing is folded (a folded result would have no place of its own), and
/// the weight-only operator runs every time.
#[test]
fn a_plan_laid_out_by_storage_ids_folds_nothing() {
    let json =
        graph(&[("x", "", 0), ("w", "", 0), ("a", "__copy", 1), ("c", "__copy", 2), ("b", "__copy", 0)], &[3, 4]);
    let by_ids = json.replace(r#""storage_id":["list_int",[0,1,2,3,4]]"#, r#""storage_id":["list_int",[0,1,2,3,0]]"#);
    assert_ne!(by_ids, json);
    let w = tvm_runtime::tensor::NDArray::from_bytes(&[16], "float32".parse().unwrap(), &[3u8; 64]).unwrap();
    let params = tvm_runtime::params::save([("w", &*w)]);
    let m = run(&by_ids);
    let ex = exec(&m);
    assert!(!ex.plan().liveness_layout);
    ex.load_params(&params).unwrap();
    ex.run().unwrap();
    assert_eq!(ex.memory_usage().ops_folded, 0);
    assert_eq!(ex.output(0).unwrap().to_vec(), vec![3u8; 64]);
    assert_eq!(floats(&ex.output(1).unwrap().to_vec()), (1..=16).map(|v| v as f32).collect::<Vec<_>>());
    // The same graph laid out by liveness folds the copy of w (not the one writing an output).
    let m = run(&json);
    exec(&m).set_fold_weights(true).unwrap();
    exec(&m).load_params(&params).unwrap();
    exec(&m).run().unwrap();
    assert_eq!(exec(&m).memory_usage().ops_folded, 1);
    assert_eq!(exec(&m).output(0).unwrap().to_vec(), vec![3u8; 64]);
}

/// Largest values are placed first: a, b, c of 128, 64 and 192 bytes, live [0,1], [1,2],
/// [2,3]: c and a share bytes and b sits above them (256 bytes); placing in order of first use
/// would need 384.
#[test]
fn larger_values_are_placed_first() {
    let json = graph_sized(
        &[("x", "", 0), ("a", "__copy", 0), ("b", "__copy", 1), ("c", "__copy", 2), ("out", "__copy", 3)],
        &[4],
        &[32, 32, 16, 48, 48],
    );
    let plan = Plan::new(&json, Fixture::load("mlp_b1").load_lib(), DLDevice::CPU).unwrap();
    let slots = plan.storage.slots.len();
    let facts = tvm_runtime::executor::layout::Facts {
        constant_slot: &vec![false; slots],
        weight_slot: &vec![false; slots],
        redirected: &vec![false; plan.graph.num_entries()],
        fold: true,
        keep_all: false,
    };
    let layout = Layout::new(&plan, &facts).unwrap();
    assert_eq!(layout.arena_bytes, 256, "{layout:?}");
    assert_eq!(overlaps(&plan, &layout), Vec::<String>::new());
    layout.verify(&plan).unwrap();
    // The bound: x (128) + out (192) + the peak of the arena values (b and c: 256).
    assert_eq!(layout.bound, 128 + 192 + 256);
}

/// Values whose lives do not meet share bytes: a chain of copies needs two places at a time.
#[test]
fn a_chain_reuses_two_places() {
    let json = graph(
        &[
            ("x", "", 0),
            ("a", "__copy", 0),
            ("b", "__copy", 1),
            ("c", "__copy", 2),
            ("d", "__copy", 3),
            ("e", "__copy", 4),
        ],
        &[5],
    );
    let m = run(&json);
    let ex = exec(&m);
    assert_eq!(floats(&ex.output(0).unwrap().to_vec()), (1..=16).map(|v| v as f32).collect::<Vec<_>>());
    let layout = ex.layout();
    assert_eq!(layout.arena_bytes, 2 * 64);
    assert_eq!(overlaps(ex.plan(), &layout), Vec::<String>::new());
}

/// `verify` is the layout's own check; it must see a layout that breaks its promises.
#[test]
fn verify_rejects_overlapping_or_misplaced_values() {
    let json = graph(&[("x", "", 0), ("a", "__copy", 0), ("b", "__copy", 1), ("c", "__copy", 2)], &[3]);
    let m = run(&json);
    let ex = exec(&m);
    let layout = ex.layout();
    let good = layout.clone();
    good.verify(ex.plan()).unwrap();
    let (a, b) = (ex.plan().graph.entry_id(1, 0), ex.plan().graph.entry_id(2, 0));
    let (Home::Arena(at_a), Home::Arena(at_b)) = (good.homes[a], good.homes[b]) else {
        panic!("a and b live in the arena: {good:?}")
    };
    assert_ne!(at_a, at_b, "a and b are live together");
    let mut bad = good.clone();
    bad.homes[b] = Home::Arena(at_a);
    assert!(bad.verify(ex.plan()).unwrap_err().contains("overlap"));
    assert!(!overlaps(ex.plan(), &bad).is_empty(), "the oracle sees it too");
    let mut bad = good.clone();
    bad.homes[b] = Home::Arena(good.arena_bytes);
    assert!(bad.verify(ex.plan()).is_err(), "outside the arena");
    let mut bad = good.clone();
    bad.homes[b] = Home::Arena(at_b + 4);
    assert!(bad.verify(ex.plan()).is_err(), "misaligned");
    let mut bad = good.clone();
    bad.arena_bytes = 64;
    assert!(bad.verify(ex.plan()).is_err(), "an arena below the peak");
    // The output, in its own region: past the region's end, or misaligned.
    let c = ex.plan().graph.entry_id(3, 0);
    assert_eq!(good.homes[c], Home::Output(0));
    for at in [ex.plan().output_region_bytes, 4] {
        let mut bad = good.clone();
        bad.homes[c] = Home::Output(at);
        assert!(bad.verify(ex.plan()).is_err(), "output at {at}");
    }
}
