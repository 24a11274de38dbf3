//! The `tvmrt` command line on the fixtures: values, files written, profile and trace structure.

use serde_json::Value;
use std::process::Command;

fn tvmrt(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = tvmrt_in(None, args);
    (code == 0, out, err)
}

/// Runs tvmrt (in `dir` when given); returns the exit code, stdout and stderr.
fn tvmrt_in(dir: Option<&std::path::Path>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tvmrt"));
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let out = cmd.args(args).env("TVM_NUM_THREADS", "1").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tvmrt-cli-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (ok, out, err) = tvmrt(&all);
    assert!(ok, "tvmrt {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn fixture(name: &str) -> String {
    format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn run_without_a_model_runs_the_bundled_one_and_matches_upstream() {
    let (ok, out, err) = tvmrt(&["run", "--repeat", "3"]);
    assert!(ok, "{err}");
    assert!(out.contains("matches the reference"), "{out}");
    assert!(out.contains("mean") && out.contains("median") && out.contains("std"), "{out}");
}

#[test]
fn run_writes_outputs_to_npz_that_read_back_exactly() {
    let dir = std::env::temp_dir().join(format!("tvmrt-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npz = dir.join("out.npz");
    let r = json(&["run", &fixture("multi_io"), "--outputs", npz.to_str().unwrap(), "--repeat", "2"]);
    assert_eq!(r["outputs"].as_array().unwrap().len(), 7);
    assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    assert_eq!(r["run_ms"]["runs"], 2);
    // Read the archive back with the zip and npyz crates and compare with upstream's bytes.
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&npz).unwrap()).unwrap();
    assert_eq!(zip.len(), 7);
    for k in 0..7 {
        let entry = zip.by_name(&format!("output_{k}.npy")).unwrap();
        let npy = npyz::NpyFile::new(entry).unwrap();
        let shape = npy.shape().to_vec();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut npy.into_inner(), &mut data).unwrap();
        let want = std::fs::read(format!("{}/out_{k}.bin", fixture("multi_io"))).unwrap();
        assert_eq!(data, want, "output {k}");
        assert_eq!(shape.len(), r["outputs"][k]["shape"].as_array().unwrap().len());
    }
    // The same archive as inputs: names must match the model's.
    let (ok, _, err) = tvmrt(&["run", &fixture("multi_io"), "--inputs", npz.to_str().unwrap()]);
    assert!(!ok && err.contains("no input named 'output_0'") && err.contains("its inputs: x, y, z"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `profile` reports as TVM's debug executor: --json prints upstream's report JSON (each call's
/// metrics as objects naming their kind, the run's total per device), the table is upstream's,
/// --csv writes upstream's CSV, and the trace has the same calls.
#[test]
fn profile_reports_as_upstream_and_writes_a_chrome_trace() {
    let dir = temp_dir("profile");
    let (trace, csv) = (dir.join("trace.json"), dir.join("report.csv"));
    let args = ["profile", &fixture("convnet"), "--repeat", "5", "--trace", trace.to_str().unwrap()];
    let r = json(&[&args[..], &["--csv", csv.to_str().unwrap()]].concat());
    let calls = r["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 8);
    let total = r["device_metrics"]["cpu0"]["Duration (us)"]["microseconds"].as_f64().unwrap();
    let durations: Vec<f64> = calls.iter().map(|c| c["Duration (us)"]["microseconds"].as_f64().unwrap()).collect();
    let sum: f64 = durations.iter().sum();
    assert!(durations.iter().all(|&d| d > 0.0) && sum <= total, "calls {sum} us in a run of {total} us");
    for c in calls {
        assert_eq!(c["Count"]["count"], 1);
        assert_eq!(c["Device"]["string"], "cpu0");
        assert!(c["Name"]["string"].as_str().unwrap().starts_with("tvmgen_default_"));
        assert!(c["Argument Shapes"]["string"].as_str().unwrap().starts_with("float32["));
    }
    assert_eq!(r["configuration"]["Executor"]["string"], "Graph");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), 8);
    for (e, c) in events.iter().zip(calls) {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() > 0.0);
        assert_eq!(e["name"], c["Name"]["string"]);
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert!(csv_text.starts_with("Argument Shapes,Count,Device,Duration (us),Hash,Name,Percent,"), "{csv_text}");
    assert_eq!(csv_text.lines().count(), 9);
    // The table: upstream's columns, aggregated and sorted; in execution order on request.
    let (ok, out, err) = tvmrt(&["profile", &fixture("convnet"), "--in-order"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("Name ") && lines[0].contains("Duration (us)  Percent  Device  Count"), "{out}");
    assert!(lines[1].starts_with("tvmgen_default_fused_layout_transform "), "execution order: {out}");
    assert!(out.contains("\nConfiguration\n-------------\nNumber of threads: 1\nExecutor: Graph\n"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_lists_inputs_outputs_operators_and_storage() {
    let r = json(&["inspect", &fixture("lstm_seq8"), "--fold"]);
    let inputs = r["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 5);
    assert_eq!(inputs.iter().filter(|i| i["weight"] == true).count(), 4);
    assert_eq!(r["outputs"].as_array().unwrap().len(), 2);
    assert!(r["operators"].as_array().unwrap().iter().any(|o| o["function"] == "__nop"));
    // The weight's layout transform and the bias reshape read only weights: folded.
    let folded: Vec<&str> = r["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["folded"] == true)
        .map(|o| o["function"].as_str().unwrap())
        .collect();
    assert!(folded.contains(&"__nop") && folded.iter().any(|f| f.contains("layout_transform")), "{folded:?}");
    assert!(r["memory"]["weights_derived"].as_u64().unwrap() > 0);
    let storage = r["storage"].as_array().unwrap();
    let holds = |what: &str| storage.iter().filter(|s| s["holds"] == what).count();
    assert_eq!((holds("input"), holds("weight")), (1, 4), "{storage:?}");
    assert!(holds("activation+derived") > 0 && holds("activation") > 0, "{storage:?}");
    // The same memory report as `run`: the data input's buffer counts as activations.
    let run = json(&["run", &fixture("lstm_seq8"), "--repeat", "1", "--fold"]);
    assert_eq!(r["memory"]["activations"], run["memory"]["activations"]);
    let weights = r["memory"]["weights_owned"].as_u64().unwrap();
    assert_eq!(weights, (64 * 8 + 64 + 64 * 16 + 64) * 4);
}

#[test]
fn share_reports_one_copy_of_the_weights() {
    let r = json(&["share", &fixture("mlp_unbound_b1"), &fixture("mlp_unbound_b8"), "-n", "4"]);
    let execs = r["executors"].as_array().unwrap();
    assert_eq!(execs.len(), 4);
    assert!(execs.iter().all(|e| e["memory"]["weights_owned"] == 0), "{r}");
    let (total, unshared) = (r["total_bytes"].as_u64().unwrap(), r["unshared_total_bytes"].as_u64().unwrap());
    // Weights, and what is derived from them, held once instead of four times.
    let m = &execs[0]["memory"];
    let once = m["weights_shared"].as_u64().unwrap() + m["weights_derived"].as_u64().unwrap();
    assert!(m["weights_derived"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(unshared - total, 3 * once);

    // With a pool: the four arenas become the pool's (one arena here: the executors ran one at a
    // time), sized for the batch-8 layout.
    let p = json(&["share", &fixture("mlp_unbound_b1"), &fixture("mlp_unbound_b8"), "-n", "4", "--pool", "2"]);
    let pool = &p["pool"];
    assert_eq!(
        (pool["capacity"].as_u64(), pool["members"].as_u64(), pool["arenas"].as_u64()),
        (Some(2), Some(4), Some(1))
    );
    let arenas: Vec<u64> = execs.iter().map(|e| e["memory"]["activation_arena"].as_u64().unwrap()).collect();
    assert_eq!(pool["arena_bytes"].as_u64(), arenas.iter().max().copied(), "{p}");
    let pooled_total = p["total_bytes"].as_u64().unwrap();
    assert_eq!(total - pooled_total, arenas.iter().sum::<u64>() - pool["bytes"].as_u64().unwrap(), "{p}");
    assert_eq!(p["unshared_total_bytes"], r["unshared_total_bytes"]);
}

#[test]
fn errors_are_clear() {
    let (ok, _, err) = tvmrt(&["run", "/nonexistent"]);
    assert!(!ok && err.contains("no operator library at /nonexistent"), "{err}");
    let (code, _, err) = tvmrt_in(None, &["run", "--repeat", "x"]);
    assert!(code == 2 && err.contains("invalid value 'x' for '--repeat <REPEAT>'"), "{err}");
    let (code, _, err) = tvmrt_in(None, &["frobnicate"]);
    assert!(code == 2 && err.contains("unrecognized subcommand 'frobnicate'"), "{err}");
}

/// A params file whose header declares more names than a file of its size holds (300 MB here,
/// sparse): refused from its first 24 bytes, before the rest is read.
#[test]
fn a_params_header_the_file_cannot_hold_is_refused_from_the_header() {
    let dir = temp_dir("huge-params");
    let path = dir.join("huge.params");
    let f = std::fs::File::create(&path).unwrap();
    use std::io::Write;
    (&f).write_all(&0xF7E5_8D4F_0504_9CB7u64.to_le_bytes()).unwrap();
    (&f).write_all(&0u64.to_le_bytes()).unwrap();
    (&f).write_all(&(1u64 << 40).to_le_bytes()).unwrap();
    f.set_len(300 << 20).unwrap();
    let params = path.to_str().unwrap();
    let (ok, _, err) = tvmrt(&["run", &fixture("mlp_unbound_b1"), "--params", params, "--repeat", "1"]);
    assert!(!ok && err.contains("more than a file of 314572800 bytes holds"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_and_version_go_to_stdout_and_succeed() {
    for args in [&["--help"][..], &["run", "--help"], &["share", "--help"], &["help", "profile"]] {
        let (code, out, err) = tvmrt_in(None, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("Usage: tvmrt") && err.is_empty(), "{args:?}: {out}");
    }
    let (code, out, _) = tvmrt_in(None, &["--version"]);
    assert_eq!((code, out.trim()), (0, concat!("tvmrt ", env!("CARGO_PKG_VERSION"))));
}

/// One version everywhere: the changelog's newest entry and the CMake package say the workspace's
/// (the Python package reads it from Cargo.toml, and its tests compare it with `tvmrt --version`).
#[test]
fn the_changelog_and_cmake_say_the_workspace_version() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    let newest = changelog.lines().find_map(|l| l.strip_prefix("## ")).expect("an entry");
    assert_eq!(newest.split_whitespace().next(), Some(env!("CARGO_PKG_VERSION")), "{newest}");
    let cmake = std::fs::read_to_string(root.join("CMakeLists.txt")).unwrap();
    assert!(cmake.contains("project(tvm_runtime_rs VERSION ${TVM_RT_VERSION}"), "CMake reads Cargo.toml's version");
}

#[test]
fn counts_below_one_extra_arguments_and_foreign_options_are_usage_errors() {
    let mlp = fixture("mlp_b1");
    for args in [
        &["run", "--repeat", "0"][..],
        &["run", "--number", "0"],
        &["share", &mlp, "-n", "0"],
        &["inspect", &mlp, &mlp],
        &["inspect", &mlp, "--repeat", "3"],
        &["align-params", "a"],
        &["run", "--fill", "purple"],
    ] {
        let (code, out, err) = tvmrt_in(None, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("error:"), "{args:?}: {err}");
    }
}

#[test]
fn graph_or_params_without_a_model_is_refused_instead_of_running_the_bundled_one() {
    let (code, out, err) = tvmrt_in(None, &["run", "--graph", &format!("{}/graph.json", fixture("mlp_unbound_b1"))]);
    assert!(code == 2 && err.contains("<MODEL|--lib <FILE>>") && !out.contains("matches"), "{out}{err}");
    let (code, _, err) = tvmrt_in(None, &["inspect", "--params", &format!("{}/params.bin", fixture("mlp_unbound_b1"))]);
    assert!(code == 2 && err.contains("required arguments were not provided"), "{err}");
}

#[test]
fn missing_weights_are_an_error_unless_made_up_on_request_and_every_fill_is_shown() {
    let dir = temp_dir("noweights");
    std::fs::copy(format!("{}/lib.so", fixture("mlp_unbound_b1")), dir.join("lib.so")).unwrap();
    let (ok, _, err) = tvmrt(&["run", dir.to_str().unwrap(), "--repeat", "1"]);
    assert!(!ok && err.contains("has no weights") && err.contains("fc1_weight float32[128, 784]"), "{err}");
    assert!(err.contains("--fill-weights random|zeros"), "{err}");
    let r = json(&["run", dir.to_str().unwrap(), "--repeat", "1", "--fill-weights", "zeros"]);
    let inputs = r["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 7);
    assert_eq!(inputs.iter().filter(|i| i["weight"] == true && i["source"] == "zeros").count(), 6, "{r}");
    let (ok, out, _) = tvmrt(&["run", dir.to_str().unwrap(), "--repeat", "1", "--fill-weights", "random"]);
    assert!(ok && out.matches("(made up: random)").count() == 6, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn params_whose_names_do_not_match_the_graph_are_listed() {
    let (ok, _, err) =
        tvmrt(&["run", &fixture("mlp_unbound_b1"), "--params", &format!("{}/params.bin", fixture("lstm_seq8"))]);
    assert!(!ok && err.contains("holds 4 weight(s) the graph has no input for"), "{err}");
    for name in ["i2h_weight", "i2h_bias", "h2h_weight", "h2h_bias"] {
        assert!(err.contains(name), "{name}: {err}");
    }
}

#[test]
fn map_params_on_an_unaligned_file_says_to_align_it() {
    let (ok, _, err) = tvmrt(&["run", &fixture("mlp_unbound_b1"), "--map-params", "--repeat", "1"]);
    assert!(!ok && err.contains("would be copied") && err.contains("tvmrt align-params"), "{err}");
    let dir = temp_dir("aligned");
    let aligned = dir.join("aligned.params");
    let params = format!("{}/params.bin", fixture("mlp_unbound_b1"));
    assert!(tvmrt(&["align-params", &params, aligned.to_str().unwrap()]).0);
    let r = json(&[
        "run",
        &fixture("mlp_unbound_b1"),
        "--map-params",
        "--params",
        aligned.to_str().unwrap(),
        "--repeat",
        "1",
    ]);
    assert!(r["memory"]["weights_mapped"].as_u64().unwrap() > 400_000, "{r}");
    assert_eq!(r["outputs"][0]["matches_reference"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bare_lib_so_in_the_working_directory_runs() {
    let (code, out, err) =
        tvmrt_in(Some(std::path::Path::new(&fixture("mlp_b1"))), &["run", "lib.so", "--repeat", "1"]);
    assert!(code == 0 && out.contains("matches the reference"), "{out}{err}");
}

#[test]
fn outputs_print_in_their_own_dtype() {
    let r = json(&["run", &fixture("multi_io"), "--repeat", "1"]);
    let outs = r["outputs"].as_array().unwrap();
    assert!(outs[2]["preview"].as_array().unwrap().iter().all(Value::is_boolean), "bool: {}", outs[2]);
    for k in [3, 4, 6] {
        assert!(outs[k]["preview"].as_array().unwrap().iter().all(|v| v.is_i64() || v.is_u64()), "{}", outs[k]);
    }
    assert!(outs[0]["preview"][0].is_f64());
    let (_, out, _) = tvmrt(&["run", &fixture("multi_io"), "--repeat", "1"]);
    let line = out.lines().find(|l| l.contains("output_3")).unwrap();
    assert!(!line.contains(".000000"), "int64 printed as floats: {line}");
    let line = out.lines().find(|l| l.contains("output_2")).unwrap();
    assert!(line.contains("true") || line.contains("false"), "{line}");
}

#[test]
fn an_unwritable_output_fails_before_any_run() {
    let (ok, out, err) =
        tvmrt(&["run", &fixture("mlp_b1"), "--outputs", "/nonexistent/dir/o.npz", "--repeat", "100000"]);
    assert!(!ok && err.contains("/nonexistent/dir/o.npz") && out.is_empty(), "{out}{err}");
}

#[test]
fn with_json_errors_are_json_on_stdout() {
    let (code, out, _) = tvmrt_in(None, &["run", "/nonexistent", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(code, 2, "the user's mistake");
    assert_eq!(v["error"]["kind"], "ValueError");
    assert!(v["error"]["message"].as_str().unwrap().contains("no operator library at /nonexistent"));
    let (code, out, _) = tvmrt_in(None, &["run", "--repeat", "0", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!((code, v["error"]["kind"].as_str()), (2, Some("UsageError")));
}

#[test]
fn save_inputs_writes_what_inputs_reads_back() {
    let dir = temp_dir("inputs");
    let npz = dir.join("in.npz");
    let first =
        json(&["run", &fixture("multi_io"), "--fill", "ones", "--save-inputs", npz.to_str().unwrap(), "--repeat", "1"]);
    let again = json(&["run", &fixture("multi_io"), "--inputs", npz.to_str().unwrap(), "--repeat", "1"]);
    assert!(again["inputs"].as_array().unwrap().iter().all(|i| i["source"] == "file"), "{again}");
    assert_eq!(first["outputs"], again["outputs"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `TVM_RT_FOLD_WEIGHTS`: 0 folds nothing, 1 folds weights mapped from a file too, unset folds
/// the others; outputs are the same bytes every way.
#[test]
fn fold_weights_follows_the_environment() {
    let model = fixture("mlp_unbound_b1");
    let dir = temp_dir("fold");
    let aligned = dir.join("params.aligned");
    assert!(tvmrt(&["align-params", &format!("{model}/params.bin"), aligned.to_str().unwrap()]).0);
    let folded = |env: Option<&str>, mapped: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tvmrt"));
        cmd.args(["run", &model, "--repeat", "1", "--json"]).env("TVM_NUM_THREADS", "1");
        if mapped {
            cmd.args(["--params", aligned.to_str().unwrap(), "--map-params"]);
        }
        match env {
            Some(v) => cmd.env("TVM_RT_FOLD_WEIGHTS", v),
            None => cmd.env_remove("TVM_RT_FOLD_WEIGHTS"),
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
        r["memory"]["ops_folded"].as_u64().unwrap()
    };
    // One executor alone runs its weight-only operators at every run, as upstream (folding pays
    // once a second executor shares the weights); TVM_RT_FOLD_WEIGHTS=1 folds anyway.
    let asked = folded(Some("1"), false);
    assert!(asked > 0);
    assert_eq!((folded(None, false), folded(Some("0"), false)), (0, 0));
    assert_eq!((folded(None, true), folded(Some("1"), true)), (0, asked), "mapped weights fold only when asked");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `prepare-params` writes the weights with what folding derives; `run --map-params` on it folds
/// with nothing computed at load and gives the reference outputs; another model refuses it.
#[test]
fn prepared_params_run_folded_from_the_mapping() {
    let dir = temp_dir("prepare");
    let out = dir.join("mlp.prepared");
    let r = json(&["prepare-params", &fixture("mlp_unbound_b1"), "--out", out.to_str().unwrap()]);
    assert_eq!(r["ops_folded"], 3, "{r}");
    let r =
        json(&["run", &fixture("mlp_unbound_b1"), "--params", out.to_str().unwrap(), "--map-params", "--repeat", "1"]);
    assert_eq!(r["memory"]["ops_folded"], 3, "{r}");
    assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    assert_eq!(r["memory"]["prepared_params"], "used", "{r}");
    // Another build loads it as plain params, and says why its derived weights are not used.
    let (ok, stdout, err) =
        tvmrt(&["run", &fixture("mlp_unbound_b8"), "--params", out.to_str().unwrap(), "--map-params"]);
    assert!(ok && err.contains("not used (made for another build"), "{err}");
    assert!(stdout.contains("matches the reference"), "{stdout}");
    // align-params keeps derived records it can verify.
    let aligned = dir.join("mlp.aligned");
    let r = json(&["align-params", out.to_str().unwrap(), aligned.to_str().unwrap()]);
    assert!(r["derived_dropped"].is_null(), "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `prepare-params` at its edges: a model whose library carries its weights is prepared from them,
/// and the file loads for it; a failure leaves no file behind; options of other commands are
/// usage errors.
#[test]
fn prepare_params_at_its_edges() {
    let dir = temp_dir("prepare-edges");
    for model in ["mlp_b1", "convnet"] {
        let out = dir.join(format!("{model}.prepared"));
        let r = json(&["prepare-params", &fixture(model), "--out", out.to_str().unwrap()]);
        assert!(r["output_bytes"].as_u64().unwrap() > 0, "{r}");
        let r = json(&["run", &fixture(model), "--params", out.to_str().unwrap(), "--map-params", "--repeat", "1"]);
        assert_eq!(r["memory"]["prepared_params"], "used", "{model}: {r}");
        assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    }
    // A failing preparation (params that are not params) leaves no file.
    let out = dir.join("bad.prepared");
    let params = format!("{}/graph.json", fixture("mlp_unbound_b1"));
    let (ok, _, err) =
        tvmrt(&["prepare-params", &fixture("mlp_unbound_b1"), "--params", &params, "--out", out.to_str().unwrap()]);
    assert!(!ok && err.contains("not a params blob"), "{err}");
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("bad")));
    for option in ["--no-fold", "--fold", "--map-params"] {
        let (code, _, err) = tvmrt_in(None, &["prepare-params", &fixture("mlp_unbound_b1"), option, "--out", "x"]);
        assert_eq!(code, 2, "{option}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A texture build (TVM's Adreno target) on the OpenCL device: run matches upstream's OpenCL
/// bytes (pocl), and executors sharing it hold the weights and their texture images once.
#[test]
fn texture_builds_run_and_share_on_opencl() {
    let model = fixture("opencl/convnet_tex_cl");
    let (ok, out, err) = tvmrt(&["run", &model, "--device", "opencl", "--json"]);
    if !ok && err.contains("OpenCL") && std::env::var("TVM_RT_REQUIRE_OPENCL").as_deref() != Ok("1") {
        eprintln!("no OpenCL device: skipping ({err})");
        return;
    }
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    let s = json(&["share", &model, "-n", "3", "--device", "opencl"]);
    let execs = s["executors"].as_array().unwrap();
    assert!(execs.iter().all(|e| e["memory"]["weights_owned"] == 0), "{s}");
    let m = &execs[0]["memory"];
    let once = m["weights_shared"].as_u64().unwrap() + m["weights_derived"].as_u64().unwrap();
    assert!(m["weights_derived"].as_u64().unwrap() > 0, "the texture weights are folded once: {s}");
    let (total, unshared) = (s["total_bytes"].as_u64().unwrap(), s["unshared_total_bytes"].as_u64().unwrap());
    assert_eq!(unshared - total, 2 * once, "{s}");
    // `inspect` names the images: texture storage ids with their scope and extent.
    let i = json(&["inspect", &model, "--device", "opencl"]);
    let images: Vec<&Value> = i["storage"].as_array().unwrap().iter().filter(|s| !s["image"].is_null()).collect();
    assert!(images.iter().any(|s| s["image"]["scope"] == "global.texture"), "{i}");
    assert!(images.iter().all(|s| s["image"]["channels"] == 4 && s["image"]["width"].as_u64() > Some(0)), "{i}");
}

/// Writes `t` (float32 or float64 values of `shape`) as a .npy file.
fn write_npy(path: &std::path::Path, descr: &str, shape: &[usize], bytes: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(bytes);
    std::fs::write(path, out).unwrap();
}

/// A user's mistakes read as such: "error: <message>" (no runtime class names), exit status 2;
/// every message names what to change.
#[test]
fn a_users_mistakes_are_errors_with_exit_status_2() {
    let dir = temp_dir("mistakes");
    let data: Vec<u8> = (0..784).flat_map(|i| (i as f32 / 784.0).to_le_bytes()).collect();
    let wrong_shape = dir.join("shape.npy");
    write_npy(&wrong_shape, "<f4", &[1, 784], &data);
    let doubles: Vec<u8> = (0..784).flat_map(|i| (i as f64 / 784.0).to_le_bytes()).collect();
    let wrong_dtype = dir.join("dtype.npy");
    write_npy(&wrong_dtype, "<f8", &[1, 1, 28, 28], &doubles);
    let mlp = fixture("mlp_b1");
    let rows: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let vm_rows = dir.join("rows.npy");
    write_npy(&vm_rows, "<f4", &[1, 16], &rows);
    let cases: Vec<(Vec<String>, &str)> = vec![
        // A Relay VM model names the misspelt input and lists its own, as a graph model does.
        (
            vec!["run".into(), fixture("vm/0.16/mlp_dyn"), "--input".into(), format!("x={}", vm_rows.display())],
            "no input named 'x' (the inputs: data)",
        ),
        (vec!["run".into(), "/nonexistent".into()], "no operator library at /nonexistent"),
        (vec!["run".into(), mlp.clone(), "--input".into(), format!("data={}", wrong_shape.display())], "[1, 784]"),
        (
            vec!["run".into(), mlp.clone(), "--input".into(), format!("nope={}", wrong_shape.display())],
            "no input named 'nope'",
        ),
        (vec!["run".into(), mlp.clone(), "--input".into(), format!("data={}", wrong_dtype.display())], "--cast"),
        (vec!["run".into(), mlp.clone(), "--inputs".into(), "/nonexistent.npz".into()], "/nonexistent.npz"),
        (vec!["inspect".into(), fixture("opencl/mlp_cl"), "--device".into(), "cpu".into()], "--device"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = tvmrt_in(None, &args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.starts_with("error: ") && err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("InternalError") && !err.contains("ValueError"), "{args:?}: {err}");
    }
    // --cast converts the file (float64 to float32) instead.
    let (ok, out, err) = tvmrt(&["run", &mlp, "--input", &format!("data={}", wrong_dtype.display()), "--cast"]);
    assert!(ok && out.contains("(file, cast)"), "{out}{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A model built for OpenCL runs there with no --device (auto: from the library's kernels).
#[test]
fn the_device_is_the_one_the_model_was_built_for() {
    let model = fixture("opencl/mlp_cl");
    let (ok, out, err) = tvmrt(&["run", &model, "--json", "--repeat", "1"]);
    if !ok && err.contains("OpenCL") && std::env::var("TVM_RT_REQUIRE_OPENCL").as_deref() != Ok("1") {
        eprintln!("no OpenCL device: skipping ({err})");
        return;
    }
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["memory"]["device"], "opencl(0)", "{r}");
    assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    let r = json(&["run", &fixture("mlp_b1"), "--repeat", "1"]);
    assert_eq!(r["memory"]["device"], "cpu(0)");
}

#[test]
fn threads_are_chosen_on_the_command_line() {
    for n in ["1", "2"] {
        let r = json(&["run", &fixture("convnet"), "--threads", n, "--repeat", "1"]);
        assert_eq!(r["threads"].to_string(), n, "{r}");
    }
    let p = json(&["profile", &fixture("convnet"), "--threads", "1"]);
    assert_eq!(p["configuration"]["Number of threads"]["count"], 1, "{p}");
    let (code, _, err) = tvmrt_in(None, &["run", "--threads", "0"]);
    assert_eq!(code, 2, "{err}");
}

/// `run --expect REF.npz`: within the tolerance, exit 0; outside it, the largest differences and
/// exit status 3; --rtol / --atol widen it.
#[test]
fn expect_compares_outputs_with_a_reference() {
    let dir = temp_dir("expect");
    let good = dir.join("good.npz");
    let model = fixture("mlp_b1");
    let (ok, _, err) = tvmrt(&["run", &model, "--outputs", good.to_str().unwrap(), "--repeat", "1"]);
    assert!(ok, "{err}");
    let (code, out, err) = tvmrt_in(None, &["run", &model, "--expect", good.to_str().unwrap(), "--repeat", "1"]);
    assert!(code == 0 && out.contains("every output within tolerance"), "{out}{err}");
    // The same values, one nudged by 1e-3: outside the default tolerance, inside --atol 1e-2.
    let reference: Vec<f32> = std::fs::read(format!("{model}/out_0.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut nudged = reference.clone();
    nudged[3] += 1e-3;
    let bytes: Vec<u8> = nudged.iter().flat_map(|v| v.to_le_bytes()).collect();
    let npy = dir.join("output_0.npy");
    write_npy(&npy, "<f4", &[1, 10], &bytes);
    let bad = dir.join("bad.npz");
    let zipped = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'w'); z.write(sys.argv[2], 'output_0.npy')",
        ])
        .arg(&bad)
        .arg(&npy)
        .status()
        .unwrap();
    assert!(zipped.success());
    let (code, out, _) = tvmrt_in(None, &["run", &model, "--expect", bad.to_str().unwrap(), "--repeat", "1"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("DIFFERS") && out.contains("at [3]") && out.contains("1 of 10 outside"), "{out}");
    let (code, out, _) =
        tvmrt_in(None, &["run", &model, "--expect", bad.to_str().unwrap(), "--atol", "1e-2", "--repeat", "1"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = tvmrt_in(None, &["run", &model, "--expect", bad.to_str().unwrap(), "--repeat", "1", "--json"]);
    assert_eq!(code, 3, "{out}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["expect"]["ok"], false);
    assert_eq!(r["expect"]["outputs"][0]["outside"], 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn outputs_print_in_full_or_their_top_values() {
    let model = fixture("mlp_b1");
    let reference: Vec<f32> = std::fs::read(format!("{model}/out_0.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (ok, out, _) = tvmrt(&["run", &model, "--print-full", "--repeat", "1"]);
    let line = out.lines().find(|l| l.starts_with("output   output_0")).unwrap();
    assert!(ok && !line.contains("...") && line.matches(", ").count() == 9, "{line}");
    let (ok, out, _) = tvmrt(&["run", &model, "--print-top", "3", "--repeat", "1"]);
    let mut order: Vec<usize> = (0..10).collect();
    order.sort_by(|&a, &b| reference[b].total_cmp(&reference[a]));
    let line = out.lines().find(|l| l.starts_with("top 3")).unwrap();
    let want = format!("[{}] {:.6}", order[0], reference[order[0]]);
    assert!(ok && line.contains(&want) && line.contains(&format!("[{}]", order[2])), "{line} vs {want}");
}

#[test]
fn profile_fits_a_terminal_unless_wide() {
    let convnet = fixture("convnet");
    let (ok, out, _) = tvmrt(&["profile", &convnet]);
    assert!(ok && out.contains("..."), "argument shapes shortened: {out}");
    let (ok, wide, _) = tvmrt(&["profile", &convnet, "--wide"]);
    assert!(ok && !wide.contains("...") && wide.contains("float32[1, 1, 16, 16, 3], float32[1, 1, 3, 3, 3, 8]"));
    let (ok, top, _) = tvmrt(&["profile", &convnet, "--top", "2"]);
    let rows = top.lines().take_while(|l| !l.starts_with("---")).filter(|l| l.starts_with("tvmgen")).count();
    assert!(ok && rows == 2, "{top}");
    assert!(top.contains("Total"), "the totals stay: {top}");
}

/// `bench` reports what a request costs on the model given, call by call, every figure a time,
/// the request at least the model's run, the overheads their difference; on bad input the user's
/// error.
#[test]
fn bench_reports_a_requests_costs_call_by_call() {
    let r = json(&["bench", &fixture("multi_io"), "--fill", "ones", "--repeat", "3", "--seconds", "0.05"]);
    let us = &r["us"];
    for k in ["run", "set_inputs_by_name", "set_inputs_by_index", "get_outputs", "request", "request_in_one_call"] {
        assert!(us[k].as_f64().is_some_and(|v| v > 0.0), "{k}: {r}");
    }
    assert_eq!(r["operators"], 7);
    let overhead = r["overhead_us"]["request"].as_f64().unwrap();
    assert!((overhead - (us["request"].as_f64().unwrap() - us["run"].as_f64().unwrap())).abs() < 1e-9, "{r}");
    let (ok, _, err) = tvmrt(&["bench", &fixture("multi_io"), "--input", "nope=x.npy"]);
    assert!(!ok && err.contains("error:"), "{err}");
}

#[test]
fn aot_artefacts_run_and_match_the_compilers_runtime() {
    for version in ["0.16", "0.19"] {
        let dir = std::path::PathBuf::from(fixture(&format!("aot/{version}")));
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        assert!(names.len() >= 6, "{names:?}");
        for model in names {
            let model = model.to_string_lossy().into_owned();
            let v = json(&["run", &model, "--repeat", "2"]);
            assert_eq!(v["executor"], "AOT", "{model}");
            let outs = v["outputs"].as_array().unwrap();
            assert!(!outs.is_empty() && outs.iter().all(|o| o["matches_reference"] == true), "{model}: {outs:?}");
            // One name per output: `run` calls each what `inspect` (the metadata) does.
            let described = json(&["inspect", &model]);
            let named = |v: &serde_json::Value| -> Vec<String> {
                v.as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_string()).collect()
            };
            assert_eq!(named(&v["outputs"]), named(&described["outputs"]), "{model}");
        }
    }
    let d = json(&["inspect", &fixture("aot/0.16/convnet_usmp")]);
    assert_eq!(d["inputs"][0]["name"], "input_1");
    assert_eq!(d["workspace_pools"].as_array().map(Vec::len), Some(1));
    let (ok, _, err) = tvmrt(&["profile", &fixture("aot/0.16/mlp")]);
    assert!(!ok && err.contains("nothing to profile per operator"), "{err}");
}

/// The test plug-in CMake builds (c_tests/cxx/plugin), which TVMRT_TEST_PLUGIN names: scripts/test.sh
/// runs this test again once CMake has built it.
fn test_plugin() -> Option<String> {
    let Ok(path) = std::env::var("TVMRT_TEST_PLUGIN") else {
        eprintln!("the plug-in part skipped: TVMRT_TEST_PLUGIN names no plug-in (CMake builds it)");
        return None;
    };
    assert!(std::path::Path::new(&path).exists(), "TVMRT_TEST_PLUGIN={path}: no such file");
    Some(path)
}

#[test]
fn plugins_load_by_flag_or_environment_and_cpp_libraries_find_the_runtime() {
    // Generated C++ that needs the runtime's C++ symbols (a ccompiler BYOC module).
    let v = json(&["run", &fixture("byoc/ccompiler")]);
    assert_eq!(v["outputs"][0]["matches_reference"], true);
    let model = fixture("byoc/plugin");
    let (ok, _, err) = tvmrt(&["run", &model]);
    assert!(!ok && err.contains("tvmrt_test_plugin") && err.contains("--plugin"), "{err}");
    let Some(plugin) = test_plugin() else { return };
    let v = json(&["run", &model, "--plugin", &plugin]);
    assert_eq!(v["outputs"][0]["matches_reference"], true);
    let out = Command::new(env!("CARGO_BIN_EXE_tvmrt"))
        .args(["run", &model, "--json"])
        .env("TVMRT_PLUGINS", &plugin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, _, err) = tvmrt(&["run", &model, "--plugin", "/nonexistent/plugin.so"]);
    assert!(!ok && err.contains("/nonexistent/plugin.so"), "{err}");
}
