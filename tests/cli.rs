//! The `tvmrt` command line on the fixtures: values, files written, profile and trace structure.

use serde_json::Value;
use std::process::Command;

fn tvmrt(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tvmrt")).args(args).env("TVM_NUM_THREADS", "1").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (ok, out, err) = tvmrt(&all);
    assert!(ok, "tvmrt {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
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
    assert!(!ok && err.contains("no input named 'output_0'"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn profile_sums_to_the_run_time_and_writes_a_chrome_trace() {
    let trace = std::env::temp_dir().join(format!("tvmrt-trace-{}.json", std::process::id()));
    let r = json(&["profile", &fixture("convnet"), "--repeat", "20", "--trace", trace.to_str().unwrap()]);
    let ops = r["operators"].as_array().unwrap();
    assert_eq!(ops.len(), 8);
    let shares: f64 = ops.iter().map(|o| o["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-6);
    let medians: Vec<f64> = ops.iter().map(|o| o["median_us"].as_f64().unwrap()).collect();
    assert!(medians.windows(2).all(|w| w[0] >= w[1]), "sorted by time: {medians:?}");
    let sum = r["sum_of_operators_ms"].as_f64().unwrap();
    let whole = r["run_ms"]["median"].as_f64().unwrap();
    assert!(sum > 0.2 * whole && sum < 5.0 * whole, "operators {sum} ms vs run {whole} ms");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), 8);
    for e in events {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() > 0.0);
        assert!(e["name"].as_str().unwrap().starts_with("tvmgen_default_"));
    }
    std::fs::remove_file(trace).unwrap();
}

#[test]
fn inspect_lists_inputs_outputs_operators_and_storage() {
    let r = json(&["inspect", &fixture("lstm_seq8")]);
    let inputs = r["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 5);
    assert_eq!(inputs.iter().filter(|i| i["weight"] == true).count(), 4);
    assert_eq!(r["outputs"].as_array().unwrap().len(), 2);
    assert!(r["operators"].as_array().unwrap().iter().any(|o| o["function"] == "__nop"));
    let storage = r["storage"].as_array().unwrap();
    assert!(storage.iter().any(|s| s["role"] == "input") && storage.iter().any(|s| s["role"] == "activation"));
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
    assert_eq!(unshared - total, 3 * execs[0]["memory"]["weights_shared"].as_u64().unwrap());
}

#[test]
fn errors_are_clear() {
    let (ok, _, err) = tvmrt(&["run", "/nonexistent"]);
    assert!(!ok && err.contains("no operator library at /nonexistent"), "{err}");
    let (ok, _, err) = tvmrt(&["run", "--repeat", "x"]);
    assert!(!ok && err.contains("--repeat takes a number"), "{err}");
    let (ok, _, err) = tvmrt(&["frobnicate"]);
    assert!(!ok && err.contains("unknown command"), "{err}");
}
