//! The backend's core on the fixtures, without a server: a model's builds loaded and reconciled
//! with configs, and execute calls whose answers are compared with what TVM computed.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use triton_tvm::instance::Instance;
use triton_tvm::model::TvmModel;
use triton_tvm::request::{check, Given, Incoming};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn f32s(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A version folder in a fresh temporary folder: each (subfolder, fixture) copied in ("" for the
/// version folder itself).
fn version_dir(name: &str, parts: &[(&str, &str, &[&str])]) -> PathBuf {
    // One folder per call: tests run in parallel, and one must not rewrite files another reads.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("triton-core-{}-{name}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (sub, fixture, files) in parts {
        let dst = root.join(sub);
        std::fs::create_dir_all(&dst).unwrap();
        for f in *files {
            std::fs::copy(fixtures().join(fixture).join(f), dst.join(f)).unwrap();
        }
    }
    root
}

const GRAPH: &[&str] = &["lib.so", "graph.json", "params.bin"];

fn load(dir: &Path, config: &mut Value, auto: bool) -> tvm_runtime::Result<(TvmModel, bool)> {
    tvm_runtime::init();
    TvmModel::load("m", dir, config, auto)
}

fn batched_mlp() -> PathBuf {
    version_dir("mlpb", &[("b1", "mlp_b1", GRAPH), ("b8", "mlp_b8", GRAPH)])
}

#[test]
fn builds_of_two_batch_sizes_complete_the_config() {
    // As Triton sends a config that leaves it out: max_batch_size 0.
    let mut config = json!({"name": "m", "backend": "tvm", "max_batch_size": 0,
                            "instance_group": [{"count": 2, "kind": "KIND_CPU"}]});
    let (model, changed) = load(&batched_mlp(), &mut config, true).unwrap();
    assert!(changed);
    assert_eq!(config["max_batch_size"], 8);
    assert_eq!(config["input"], json!([{"name": "data", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}]));
    assert_eq!(config["output"], json!([{"name": "output_0", "data_type": "TYPE_FP32", "dims": [10]}]));
    assert_eq!(model.batches, vec![1, 8]);
    assert_eq!(model.spec.max_batch_size, 8);
    assert!(model.describe().contains("b1 (batch 1), b8 (batch 8)"), "{}", model.describe());
    // The same config again changes nothing.
    let (_, again) = load(&batched_mlp(), &mut config, true).unwrap();
    assert!(!again);
}

#[test]
fn configs_that_disagree_are_refused_naming_the_difference() {
    let one = version_dir("mlp1", &[("", "mlp_b1", GRAPH)]);
    let cases = [
        (
            json!({"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1, 1, 28, 28]}]}),
            "the config's input 'x' is not an input of the model (its inputs: data)",
        ),
        (
            json!({"input": [{"name": "data", "data_type": "TYPE_INT8", "dims": [1, 1, 28, 28]}]}),
            "input 'data': the config says TYPE_INT8 but the model takes float32",
        ),
        (
            json!({"input": [{"name": "data", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}]}),
            "the config's dims [1, 28, 28] but the model takes [1, 1, 28, 28]",
        ),
        (
            json!({"output": [{"name": "a", "data_type": "TYPE_FP32", "dims": [1, 10]}, {"name": "b", "data_type": "TYPE_FP32", "dims": [1]}]}),
            "the config lists 2 output(s), the model gives 1",
        ),
        (
            json!({"output": [{"name": "a", "data_type": "TYPE_FP32", "dims": [1, 11]}]}),
            "output 0 ('a'): the config says TYPE_FP32 [1, 11], the model gives float32 [1, 10]",
        ),
        (json!({"parameters": {"num_threads": {"string_value": "zero"}}}), "parameter num_threads 'zero'"),
        (
            json!({"parameters": {"prepare_weights": {"string_value": "maybe"}}}),
            "prepare_weights 'maybe': true or false",
        ),
    ];
    for (mut config, says) in cases {
        let e = load(&one, &mut config, true).err().unwrap().to_string();
        assert!(e.contains(says), "{e}\nshould say: {says}");
    }
    // With auto-complete off, a config without inputs is refused, saying how to fix it.
    let e = load(&one, &mut json!({}), false).err().unwrap().to_string();
    assert!(e.contains("the config lists no inputs and auto-complete is off"), "{e}");
    // A batch axis the build does not have.
    let e = load(
        &one,
        &mut json!({"max_batch_size": 4, "input": [{"name": "data", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}]}),
        true,
    );
    assert!(e.is_ok(), "a build of batch 1 under max_batch_size 4 runs rows one by one");
}

fn given<'a>(shape: &'a [i64], bytes: &'a [u8]) -> Given<'a> {
    // Split in two pieces, as Triton may hand a tensor over.
    let half = bytes.len() / 2;
    Given { name: "data", wire_type: 11, shape, pieces: vec![&bytes[..half], &bytes[half..]] }
}

#[test]
fn requests_are_gathered_onto_builds_and_answered_by_rows() {
    gathered_and_answered(json!({}));
}

#[test]
fn a_batchs_runs_side_by_side_give_the_same_answers() {
    gathered_and_answered(json!({"parameters": {"parallel_batch_runs": {"string_value": "always"}}}));
}

fn gathered_and_answered(mut config: Value) {
    let (model, _) = load(&batched_mlp(), &mut config, true).unwrap();
    let instance = Instance::new(Arc::new(model)).unwrap();
    let x = f32s(&fixtures().join("mlp_b8/in_0.bin"));
    let want = f32s(&fixtures().join("mlp_b8/out_0.bin"));
    let row_in = x.len() / 8;
    let row_out = want.len() / 8;
    // Requests of 1 to 8 rows, 28 in all (more runs than a lane takes), and a wrong one among them.
    let spans = [(0usize, 1usize), (1, 3), (4, 2), (0, 8), (0, 8), (2, 6)];
    let shapes: Vec<[i64; 4]> = spans.iter().map(|(_, n)| [*n as i64, 1, 28, 28]).collect();
    let bad_shape = [1i64, 1, 28, 28];
    let short = &x[..row_in - 4];
    let mut requests: Vec<_> = spans
        .iter()
        .zip(&shapes)
        .map(|((first, n), shape)| {
            check(
                &instance.model.spec,
                Incoming { inputs: vec![given(shape, &x[first * row_in..(first + n) * row_in])], requested: vec![] },
            )
        })
        .collect();
    requests
        .insert(2, check(&instance.model.spec, Incoming { inputs: vec![given(&bad_shape, short)], requested: vec![] }));
    let mut compute = (0, 0);
    let answers = instance.execute(&requests, &mut compute);
    assert!(compute.0 > 0 && compute.1 >= compute.0);
    assert!(answers[2].as_ref().err().unwrap().to_string().contains("bytes given"));
    for (k, (first, n)) in [0, 1, 3, 4, 5, 6].iter().zip(spans) {
        let out = &answers[*k].as_ref().unwrap()[0];
        assert_eq!(out.shape, vec![n as i64, 10]);
        assert_eq!(out.bytes, want[first * row_out..(first + n) * row_out], "request {k}");
    }
}

#[test]
fn a_vm_model_runs_the_gathered_rows_at_their_own_size() {
    let dir = version_dir("vm", &[("", "vm/0.16/mlp_dyn", &["vm.so", "model.meta"])]);
    let mut config = json!({"max_batch_size": 16});
    let (model, changed) = load(&dir, &mut config, true).unwrap();
    assert!(changed);
    assert_eq!(
        config["output"][1],
        json!({"name": "output_1", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}})
    );
    let instance = Instance::new(Arc::new(model)).unwrap();
    let d = fixtures().join("vm/0.16/mlp_dyn");
    let (x1, x3) = (f32s(&d.join("in_0_0.bin")), f32s(&d.join("in_1_0.bin")));
    let (s1, s3) = ([1i64, 16], [3i64, 16]);
    let requests = vec![
        check(&instance.model.spec, Incoming { inputs: vec![given(&s3, &x3)], requested: vec!["output_1"] }),
        check(&instance.model.spec, Incoming { inputs: vec![given(&s1, &x1)], requested: vec![] }),
    ];
    let answers = instance.execute(&requests, &mut (0, 0));
    let a3 = answers[0].as_ref().unwrap();
    assert_eq!((a3.len(), a3[0].index, a3[0].shape.clone()), (1, 1, vec![3]));
    assert_eq!(a3[0].bytes, f32s(&d.join("out_1_1.bin")));
    let a1 = answers[1].as_ref().unwrap();
    assert_eq!(a1[0].bytes, f32s(&d.join("out_0_0.bin")));
    assert_eq!(a1[1].bytes, f32s(&d.join("out_0_1.bin")));
}

#[test]
fn a_vm_without_recorded_tensors_needs_them_declared() {
    let dir = version_dir("vm-bare", &[("", "vm/0.16/mlp_dyn", &["vm.so"])]);
    let e = load(&dir, &mut json!({"max_batch_size": 4}), true).err().unwrap().to_string();
    assert!(e.contains("declare its inputs (data) and outputs in config.pbtxt"), "{e}");
    let mut declared = json!({"max_batch_size": 4,
        "input": [{"name": "data", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "a", "data_type": "TYPE_FP32", "dims": [8]}, {"name": "b", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}}]});
    let (model, _) = load(&dir, &mut declared, true).unwrap();
    assert_eq!(model.spec.outputs[1].shape, Vec::<i64>::new());
}

#[test]
fn an_aot_artefact_and_a_broken_folder() {
    let dir = version_dir("aot", &[("", "aot/0.16/mlp", &["lib.so"])]);
    let (model, _) = load(&dir, &mut json!({}), true).unwrap();
    let instance = Instance::new(Arc::new(model)).unwrap();
    let d = fixtures().join("aot/0.16/mlp");
    let x = f32s(&d.join("in_0.bin"));
    let shape = [1i64, 32];
    let answers = instance.execute(
        &[check(&instance.model.spec, Incoming { inputs: vec![given(&shape, &x)], requested: vec![] })],
        &mut (0, 0),
    );
    assert_eq!(answers[0].as_ref().unwrap()[0].bytes, f32s(&d.join("out_0.bin")));
    let empty = version_dir("empty", &[]);
    std::fs::create_dir_all(&empty).unwrap();
    let e = load(&empty, &mut json!({}), true).err().unwrap().to_string();
    assert!(e.contains("no artefact"), "{e}");
}

#[test]
fn builds_of_one_batch_size_leave_the_batch_axis_alone() {
    let dir = version_dir("twice", &[("a", "mlp_b1", GRAPH), ("b", "mlp_b1", GRAPH)]);
    let mut config = json!({"max_batch_size": 0});
    load(&dir, &mut config, true).unwrap();
    assert_eq!(config["max_batch_size"], 0);
    assert_eq!(config["input"][0]["dims"], json!([1, 1, 28, 28]));
}

#[test]
fn sequence_lengths_each_run_on_their_build() {
    let files: &[&str] = &["lib.so", "graph.json", "params.bin"];
    let dir = version_dir("seq", &[("s8", "lstm_seq8", files), ("s16", "lstm_seq16", files)]);
    let mut config = json!({"max_batch_size": 0});
    let (model, _) = load(&dir, &mut config, true).unwrap();
    // The builds differ along the sequence axis: -1 there, and no batch axis (out_1 has none).
    assert_eq!(config["max_batch_size"], 0);
    assert_eq!(config["input"][0]["dims"], json!([-1, 1, 8]));
    assert_eq!(config["output"][0]["dims"], json!([-1, 1, 16]));
    assert_eq!(config["output"][1]["dims"], json!([1, 16]));
    let instance = Instance::new(Arc::new(model)).unwrap();
    let (x8, x16) = (f32s(&fixtures().join("lstm_seq8/in_0.bin")), f32s(&fixtures().join("lstm_seq16/in_0.bin")));
    let (s8, s16, s12) = ([8i64, 1, 8], [16i64, 1, 8], [12i64, 1, 8]);
    let x12 = vec![0u8; 12 * 8 * 4];
    let requests = vec![
        check(&instance.model.spec, Incoming { inputs: vec![given(&s16, &x16)], requested: vec![] }),
        check(&instance.model.spec, Incoming { inputs: vec![given(&s8, &x8)], requested: vec![] }),
        check(&instance.model.spec, Incoming { inputs: vec![given(&s12, &x12)], requested: vec![] }),
    ];
    let answers = instance.execute(&requests, &mut (0, 0));
    for (k, name) in [(0, "lstm_seq16"), (1, "lstm_seq8")] {
        let outs = answers[k].as_ref().unwrap();
        assert_eq!(outs[0].bytes, f32s(&fixtures().join(name).join("out_0.bin")), "{name}");
        assert_eq!(outs[1].bytes, f32s(&fixtures().join(name).join("out_1.bin")), "{name}");
    }
    let e = answers[2].as_ref().err().unwrap().to_string();
    assert!(e.contains("fit no build of the model"), "{e}");
}

#[test]
fn a_0d_tensor_of_a_model_without_a_batch_axis_is_1_to_triton() {
    // Triton refuses empty dims, and a reshape to [] outside batching models: such a tensor is
    // [1] in the config, in requests and in answers, and [] to the model.
    let graph = version_dir("multi_io", &[("", "multi_io", GRAPH)]);
    let mut config = json!({});
    load(&graph, &mut config, true).unwrap();
    assert_eq!(config["output"][1], json!({"name": "output_1", "data_type": "TYPE_FP32", "dims": [1]}));

    // The VM's control flow: x [4], a 0-d loop count n in, and a 0-d output.
    let dir = version_dir("control", &[("", "vm/0.16/control", &["vm.so", "model.meta"])]);
    let mut config = json!({});
    let (model, _) = load(&dir, &mut config, true).unwrap();
    assert_eq!(config["input"][1], json!({"name": "n", "data_type": "TYPE_INT32", "dims": [1]}));
    assert_eq!(config["output"][2], json!({"name": "output_2", "data_type": "TYPE_FP32", "dims": [1]}));
    // The config read back (as Triton hands it over on load) is the model's own shapes again.
    let (again, changed) = load(&dir, &mut config, true).unwrap();
    assert!(!changed);
    assert_eq!(again.spec.inputs[1].shape, Vec::<i64>::new());
    let instance = Instance::new(Arc::new(model)).unwrap();
    let d = fixtures().join("vm/0.16/control");
    for case in 0..3 {
        let x = f32s(&d.join(format!("in_{case}_0.bin")));
        let n = f32s(&d.join(format!("in_{case}_1.bin")));
        let inputs = vec![
            Given { name: "x", wire_type: 11, shape: &[4], pieces: vec![&x] },
            Given { name: "n", wire_type: 8, shape: &[1], pieces: vec![&n] },
        ];
        let request = check(&instance.model.spec, Incoming { inputs, requested: vec![] });
        let answers = instance.execute(&[request], &mut (0, 0));
        let outs = answers[0].as_ref().unwrap();
        assert_eq!(outs[2].shape, vec![1], "case {case}");
        for (k, out) in outs.iter().enumerate() {
            assert_eq!(out.bytes, f32s(&d.join(format!("out_{case}_{k}.bin"))), "case {case} output {k}");
        }
    }
}

/// One tensor of a fixture's manifest: its name (inputs), dtype, shape and bytes.
struct Tensor {
    name: String,
    dtype: String,
    shape: Vec<i64>,
    bytes: Vec<u8>,
}

/// A Relax fixture's cases (`manifest.txt`): each one's inputs and outputs.
fn relax_cases(d: &Path) -> Vec<(Vec<Tensor>, Vec<Tensor>)> {
    let mut cases: Vec<(Vec<Tensor>, Vec<Tensor>)> = Vec::new();
    for line in std::fs::read_to_string(d.join("manifest.txt")).unwrap().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let tensor = |name: &str, at: usize| {
            let nd: usize = w[at + 1].parse().unwrap();
            Tensor {
                name: name.to_string(),
                dtype: w[at].to_string(),
                shape: w[at + 2..at + 2 + nd].iter().map(|v| v.parse().unwrap()).collect(),
                bytes: std::fs::read(d.join(w[at + 2 + nd])).unwrap(),
            }
        };
        match w.first() {
            Some(&"case") => cases.push((Vec::new(), Vec::new())),
            Some(&"input") => cases.last_mut().unwrap().0.push(tensor(w[1], 2)),
            Some(&"output") => cases.last_mut().unwrap().1.push(tensor("", 1)),
            _ => {}
        }
    }
    cases
}

/// Every Relax fixture of every version (TVM 0.19 to 0.27, all three ABI generations) with the
/// config completed from the executable alone (no batching): each case's outputs, a tuple
/// flattened in order and a 0-d tensor as `[1]`, as that version's own runtime gave them.
#[test]
fn every_relax_fixture_answers_as_its_compiler() {
    let shape = |s: &[i64]| if s.is_empty() { vec![1] } else { s.to_vec() };
    let mut compared = 0;
    for version in ["0.19", "0.21", "0.25", "0.26", "0.27"] {
        let mut names: Vec<String> = std::fs::read_dir(fixtures().join("relax").join(version))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 7, "{version}");
        for name in names {
            let fixture = format!("relax/{version}/{name}");
            let dir = version_dir("relax-every", &[("", &fixture, &["model.so"])]);
            let (model, _) = load(&dir, &mut json!({}), true).unwrap_or_else(|e| panic!("{fixture}: {e}"));
            let instance = Instance::new(Arc::new(model)).unwrap();
            for (c, (inputs, outputs)) in relax_cases(&fixtures().join(&fixture)).into_iter().enumerate() {
                let shapes: Vec<Vec<i64>> = inputs.iter().map(|t| shape(&t.shape)).collect();
                let given = inputs
                    .iter()
                    .zip(&shapes)
                    .map(|(t, s)| Given {
                        name: &t.name,
                        wire_type: triton_tvm::signature::wire_type(t.dtype.parse().unwrap()).unwrap(),
                        shape: s,
                        pieces: vec![&t.bytes],
                    })
                    .collect();
                let request = check(&instance.model.spec, Incoming { inputs: given, requested: vec![] });
                let answers = instance.execute(&[request], &mut (0, 0));
                let got = answers[0].as_ref().unwrap_or_else(|e| panic!("{fixture} case {c}: {e}"));
                assert_eq!(got.len(), outputs.len(), "{fixture} case {c}");
                for (k, (g, w)) in got.iter().zip(&outputs).enumerate() {
                    assert_eq!((&g.shape, &g.bytes), (&shape(&w.shape), &w.bytes), "{fixture} case {c} output {k}");
                    compared += 1;
                }
            }
        }
    }
    eprintln!("{compared} outputs compared");
    assert!(compared >= 5 * 7 * 2, "{compared} outputs");
}

/// A Relax executable (TVM 0.19, 0.21, 0.27): the config auto-completed from the executable
/// alone (inputs from its checks, outputs from probe runs; the symbolic batch the batch axis under
/// max_batch_size), and gathered requests answered as each version's own runtime answered them.
#[test]
fn a_relax_model_describes_itself_and_answers_as_its_compiler() {
    for version in ["0.19", "0.21", "0.27"] {
        let fixture = format!("relax/{version}/mlp_bound");
        let dir = version_dir("relax", &[("", &fixture, &["model.so"])]);
        let mut config = json!({"max_batch_size": 8});
        let (model, changed) = load(&dir, &mut config, true).unwrap();
        assert!(changed, "{version}");
        assert_eq!(config["input"], json!([{"name": "x", "data_type": "TYPE_FP32", "dims": [16]}]), "{version}");
        assert_eq!(config["output"], json!([{"name": "output_0", "data_type": "TYPE_FP32", "dims": [4]}]), "{version}");
        let instance = Instance::new(Arc::new(model)).unwrap();
        let d = fixtures().join(&fixture);
        let (x2, x5) = (f32s(&d.join("in_0_0.bin")), f32s(&d.join("in_1_0.bin")));
        let (s2, s5) = ([2i64, 16], [5i64, 16]);
        let x = |bytes, shape| Given { name: "x", wire_type: 11, shape, pieces: vec![bytes] };
        let requests = vec![
            check(&instance.model.spec, Incoming { inputs: vec![x(&x5[..], &s5[..])], requested: vec![] }),
            check(&instance.model.spec, Incoming { inputs: vec![x(&x2[..], &s2[..])], requested: vec![] }),
        ];
        let answers = instance.execute(&requests, &mut (0, 0));
        let (a5, a2) = (answers[0].as_ref().unwrap(), answers[1].as_ref().unwrap());
        assert_eq!((a5[0].shape.clone(), a2[0].shape.clone()), (vec![5, 4], vec![2, 4]), "{version}");
        assert_eq!(a5[0].bytes, f32s(&d.join("out_1_0.bin")), "{version}");
        assert_eq!(a2[0].bytes, f32s(&d.join("out_0_0.bin")), "{version}");
    }
    // A tuple of four dtypes, fixed shapes: every output described, none open.
    let dir = version_dir("relax-tuple", &[("", "relax/0.27/tuple_mixed", &["model.so"])]);
    let mut config = json!({});
    load(&dir, &mut config, true).unwrap();
    let outs: Vec<(String, Value)> = config["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["data_type"].as_str().unwrap().to_string(), o["dims"].clone()))
        .collect();
    assert_eq!(
        outs,
        vec![
            ("TYPE_FP16".to_string(), json!([3, 5])),
            ("TYPE_INT64".to_string(), json!([3, 5])),
            ("TYPE_FP32".to_string(), json!([5])),
            ("TYPE_INT32".to_string(), json!([3, 5]))
        ]
    );
}
