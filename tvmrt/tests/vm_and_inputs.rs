//! The tool on Relay VM models (every compiler's fixtures, both forms, inputs from files), and on
//! inputs as other tools write them: big-endian and Fortran-ordered .npy, a system-lib library.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tvmrt(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tvmrt")).args(args).env("TVM_NUM_THREADS", "1").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name)
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tvmrt-vmcli-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An .npy of `shape` with `descr` ('<f4', '>f4', ...), the bytes given, C or Fortran order.
fn write_npy(path: &Path, descr: &str, shape: &[usize], fortran: bool, bytes: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let order = if fortran { "True" } else { "False" };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {tuple}, }}");
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

fn json_run(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = tvmrt(&all);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn vm_models_of_every_version_run_and_match_their_compilers() {
    for v in ["0.8", "0.9", "0.16", "0.19"] {
        for m in ["mlp_dyn", "seq_dyn", "nms_head", "control", "conv_static"] {
            let dir = fixture(&format!("vm/{v}/{m}"));
            let r = json_run(&["run", dir.to_str().unwrap(), "--repeat", "2"]);
            assert_eq!(r["executor"], "Relay VM");
            let outs = r["outputs"].as_array().unwrap();
            assert!(!outs.is_empty() && outs.iter().all(|o| o["matches_reference"] == true), "{v} {m}: {r}");
        }
    }
    // The split form, named by its folder (the bytecode beside lib.so).
    let split = temp_dir("split");
    for f in ["code.ro", "lib.so", "manifest.txt", "in_0_0.bin", "out_0_0.bin", "out_0_1.bin"] {
        std::fs::copy(fixture("vm/0.19/mlp_dyn").join(f), split.join(f)).unwrap();
    }
    let r = json_run(&["run", split.to_str().unwrap(), "--repeat", "1"]);
    assert!(r["model"].as_str().unwrap().contains("code.ro"), "{r}");
    assert!(r["outputs"].as_array().unwrap().iter().all(|o| o["matches_reference"] == true), "{r}");
    std::fs::remove_dir_all(&split).unwrap();
}

/// Relax executables of every generation (TVM 0.19, 0.21, 0.25-0.27): `run` on the folder matches
/// each version's own runtime, `inspect` names the function's parameters, a misnamed input is named.
#[test]
fn relax_models_of_every_version_run_and_match_their_compilers() {
    for v in ["0.19", "0.21", "0.25", "0.26", "0.27"] {
        for m in ["mlp_args", "mlp_bound", "conv", "tuple_mixed", "parallel", "control", "runtime_ops"] {
            let dir = fixture(&format!("relax/{v}/{m}"));
            let r = json_run(&["run", dir.to_str().unwrap(), "--repeat", "2"]);
            assert_eq!(r["executor"], "Relax VM", "{v} {m}");
            let outs = r["outputs"].as_array().unwrap();
            assert!(!outs.is_empty() && outs.iter().all(|o| o["matches_reference"] == true), "{v} {m}: {r}");
        }
    }
    let dir = fixture("relax/0.27/mlp_args");
    let (code, out, err) = tvmrt(&["inspect", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("main(x, w1, b1, w2)") && out.contains("tvm-ffi"), "{out}");
    let npy = temp_dir("relax").join("x.npy");
    write_npy(&npy, "<f4", &[2, 16], false, &[0u8; 2 * 16 * 4]);
    let (code, _, err) = tvmrt(&["run", dir.to_str().unwrap(), "--input", &format!("y={}", npy.display())]);
    assert_ne!(code, 0);
    assert!(err.contains("no input named 'y'") && err.contains("x, w1, b1, w2"), "{err}");
    // `profile`: each kernel and builtin call of the Relax function, in upstream's table.
    for v in ["0.19", "0.21", "0.27"] {
        let (code, out, err) = tvmrt(&["profile", fixture(&format!("relax/{v}/conv")).to_str().unwrap()]);
        assert_eq!(code, 0, "{v}: {err}");
        assert!(
            out.contains("conv2d") && out.contains("vm.builtin.alloc_storage") && out.contains("Total"),
            "{v}: {out}"
        );
    }
}

#[test]
fn vm_inputs_of_any_shape_from_files_and_a_clear_error_without() {
    let dir = temp_dir("vm-inputs");
    std::fs::copy(fixture("vm/0.16/mlp_dyn/vm.so"), dir.join("vm.so")).unwrap();
    let (code, _, err) = tvmrt(&["run", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--input") && err.contains("data"), "{err}");
    for rows in [1usize, 5, 11] {
        let npy = dir.join(format!("x{rows}.npy"));
        let bytes: Vec<u8> = (0..rows * 16).flat_map(|i| (i as f32 / 100.0).to_le_bytes()).collect();
        write_npy(&npy, "<f4", &[rows, 16], false, &bytes);
        let r =
            json_run(&["run", dir.to_str().unwrap(), "--input", &format!("data={}", npy.display()), "--repeat", "1"]);
        assert_eq!(r["outputs"][0]["shape"], serde_json::json!([rows, 8]), "{r}");
        assert_eq!(r["outputs"][1]["shape"], serde_json::json!([rows]), "{r}");
    }
    let (code, _, err) = tvmrt(&["run", dir.to_str().unwrap(), "--input", "nope=/dev/null"]);
    assert_eq!(code, 2, "{err}");
    let i = json_run(&["inspect", dir.to_str().unwrap()]);
    assert_eq!(i["functions"][0]["params"], serde_json::json!(["data"]));
    assert_eq!(i["primitives"].as_array().unwrap().len(), 7);
    let (code, out, err) = tvmrt(&["profile", fixture("vm/0.19/conv_static").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("conv2d") && out.contains("VM::AllocStorage"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn big_endian_and_fortran_npy_inputs_give_the_native_answer() {
    let dir = temp_dir("npy-orders");
    let mlp = fixture("mlp_b1");
    let x = std::fs::read(mlp.join("in_0.bin")).unwrap();
    let swapped: Vec<u8> = x.chunks_exact(4).flat_map(|c| [c[3], c[2], c[1], c[0]]).collect();
    write_npy(&dir.join("be.npy"), ">f4", &[1, 1, 28, 28], false, &swapped);
    let reference = json_run(&["run", mlp.to_str().unwrap(), "--repeat", "1"]);
    let be = json_run(&[
        "run",
        mlp.to_str().unwrap(),
        "--input",
        &format!("data={}", dir.join("be.npy").display()),
        "--repeat",
        "1",
    ]);
    assert_eq!(be["outputs"][0]["preview"], reference["outputs"][0]["preview"], "big-endian input");
    // multi_io's y is int32 [2, 3]: written in Fortran order it is the transposed bytes.
    let mio = fixture("multi_io");
    let y = std::fs::read(mio.join("in_1.bin")).unwrap();
    let vals: Vec<[u8; 4]> = y.chunks_exact(4).map(|c| c.try_into().unwrap()).collect();
    let fortran: Vec<u8> =
        (0..3).flat_map(|j| (0..2).map(move |i| (i, j))).flat_map(|(i, j)| vals[i * 3 + j]).collect();
    write_npy(&dir.join("y.npy"), "<i4", &[2, 3], true, &fortran);
    write_npy(&dir.join("x.npy"), "<f4", &[2, 3], false, &std::fs::read(mio.join("in_0.bin")).unwrap());
    write_npy(&dir.join("z.npy"), "|u1", &[4], false, &std::fs::read(mio.join("in_2.bin")).unwrap());
    let reference = json_run(&["run", mio.to_str().unwrap(), "--repeat", "1"]);
    let inputs: Vec<String> =
        ["x", "y", "z"].iter().map(|n| format!("{n}={}", dir.join(format!("{n}.npy")).display())).collect();
    let mut args = vec!["run", mio.to_str().unwrap(), "--repeat", "1"];
    for i in &inputs {
        args.extend(["--input", i.as_str()]);
    }
    let got = json_run(&args);
    let previews =
        |r: &Value| r["outputs"].as_array().unwrap().iter().map(|o| o["preview"].clone()).collect::<Vec<_>>();
    assert_eq!(previews(&got), previews(&reference), "Fortran-ordered input");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_system_lib_build_linked_as_a_shared_object_runs() {
    let Some(cc) = ["cc", "gcc"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok()) else {
        eprintln!("no C compiler: skipped");
        return;
    };
    let dir = temp_dir("syslib");
    let src = fixture("mlp_syslib");
    let ok = Command::new(cc)
        .args(["-shared", "-o"])
        .arg(dir.join("lib.so"))
        .arg(src.join("lib0.o"))
        .arg(src.join("devc.o"))
        .status()
        .unwrap();
    assert!(ok.success());
    for f in ["graph.json", "params.bin"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let (code, out, err) = tvmrt(&[
        "run",
        dir.to_str().unwrap(),
        "--repeat",
        "1",
        "--input",
        &format!("data={}", dir.join("x.npy").display()),
    ]);
    // No x.npy: a clear error about the file, not a dead process.
    assert_eq!(code, 2, "{out}{err}");
    let x = std::fs::read(src.join("in_0.bin")).unwrap();
    write_npy(&dir.join("x.npy"), "<f4", &[1, 1, 28, 28], false, &x);
    let r = json_run(&[
        "run",
        dir.to_str().unwrap(),
        "--repeat",
        "1",
        "--input",
        &format!("data={}", dir.join("x.npy").display()),
    ]);
    let want: Vec<f32> = std::fs::read(src.join("out_0.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let got: Vec<f64> = r["outputs"][0]["preview"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - f64::from(*w)).abs() < 1e-5, "{got:?} vs {want:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn raw_inputs_and_references_read_as_the_model_says_or_as_written() {
    let src = fixture("mlp_b1");
    let model = src.to_str().unwrap();
    let input = format!("data={}", src.join("in_0.bin").display());
    let reference = src.join("out_0.bin");
    let reference = reference.to_str().unwrap();
    // Raw bytes read as the input's and the first output's dtype and shape.
    let r = json_run(&["run", model, "--repeat", "1", "--input", &input, "--expect", reference, "--atol", "0"]);
    assert_eq!(r["expect"]["ok"], true, "{r}");
    assert_eq!(r["inputs"][0]["source"], "file");
    // Or as a layout written after the name.
    let with_layout = format!("{reference}@float32[1,10]");
    let r = json_run(&["run", model, "--repeat", "1", "--input", &input, "--expect", &with_layout]);
    assert_eq!(r["expect"]["ok"], true, "{r}");
    // A reference one value off is found (exit 3), naming nothing but the outputs.
    let dir = temp_dir("raw");
    let mut off = std::fs::read(reference).unwrap();
    let second = f32::from_le_bytes(off[4..8].try_into().unwrap()) + 0.5;
    off[4..8].copy_from_slice(&second.to_le_bytes());
    std::fs::write(dir.join("off.bin"), &off).unwrap();
    let (code, out, _) =
        tvmrt(&["run", model, "--repeat", "1", "--input", &input, "--expect", dir.join("off.bin").to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    // The same reference as an .npy.
    write_npy(&dir.join("ref.npy"), "<f4", &[1, 10], false, &std::fs::read(reference).unwrap());
    let r = json_run(&["run", model, "--input", &input, "--expect", dir.join("ref.npy").to_str().unwrap()]);
    assert_eq!(r["expect"]["ok"], true, "{r}");
    // Raw files of the wrong size, or a layout that is not the input's: the user's error, naming the file.
    std::fs::write(dir.join("short.bin"), [0u8; 100]).unwrap();
    let short = format!("data={}", dir.join("short.bin").display());
    let (code, _, err) = tvmrt(&["run", model, "--input", &short]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("short.bin holds 100 bytes") && err.contains("must hold 3136"), "{err}");
    let wrong = format!("{input}@float32[1,1,28,27]");
    let (code, _, err) = tvmrt(&["run", model, "--input", &wrong]);
    assert_eq!(code, 2, "{err}");
    let bad_layout = format!("{input}@float32[1,x]");
    let (code, _, err) = tvmrt(&["run", model, "--input", &bad_layout]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("numbers of 0 or more"), "{err}");
    // A VM model records no input layouts: a raw input says its own.
    let vm = fixture("vm/0.16/mlp_dyn");
    let raw = format!("data={}", vm.join("in_1_0.bin").display());
    let (code, _, err) = tvmrt(&["run", vm.to_str().unwrap(), "--input", &raw]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("@float32[1,3,224,224]"), "{err}");
    let r = json_run(&[
        "run",
        vm.to_str().unwrap(),
        "--repeat",
        "1",
        "--input",
        &format!("{raw}@float32[3,16]"),
        "--expect",
        vm.join("out_1_0.bin").to_str().unwrap(),
        "--atol",
        "0",
        "--rtol",
        "0",
    ]);
    assert_eq!(r["outputs"][0]["shape"], serde_json::json!([3, 8]));
    assert_eq!(r["outputs"][0]["expect"]["ok"], true, "{r}");
    assert!(r["outputs"][1]["expect"].is_null(), "only the first output is checked against one array: {r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_model_folder_is_found_whatever_its_files_are_named() {
    let src = fixture("mlp_unbound_b1");
    let dir = temp_dir("names");
    // DLR's names, and the params under a name of the user's.
    std::fs::copy(src.join("lib.so"), dir.join("deploy_lib.so")).unwrap();
    std::fs::copy(src.join("graph.json"), dir.join("deploy_graph.json")).unwrap();
    std::fs::copy(src.join("params.bin"), dir.join("model.params")).unwrap();
    std::fs::copy(src.join("in_0.bin"), dir.join("input_0.bin")).unwrap();
    let input = format!("data={}", dir.join("input_0.bin").display());
    let reference = src.join("out_0.bin");
    let d = dir.to_str().unwrap();
    let r = json_run(&["run", d, "--input", &input, "--expect", reference.to_str().unwrap(), "--atol", "0"]);
    assert_eq!(r["expect"]["ok"], true, "{r}");
    // Two params files: which one is the user's to say.
    std::fs::copy(src.join("params.bin"), dir.join("other.bin")).unwrap();
    let (code, _, err) = tvmrt(&["run", d, "--input", &input]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("several params files (model.params, other.bin)") && err.contains("--params"), "{err}");
    let other = dir.join("other.bin");
    let r = json_run(&["run", d, "--params", other.to_str().unwrap(), "--input", &input]);
    assert_eq!(r["outputs"][0]["shape"], serde_json::json!([1, 10]));
    // None: the message says what was looked for.
    std::fs::remove_file(dir.join("other.bin")).unwrap();
    std::fs::remove_file(dir.join("model.params")).unwrap();
    let (code, _, err) = tvmrt(&["run", d, "--input", &input]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("looked for params.bin, params, deploy_param.params"), "{err}");
    // Two libraries and none of the usual names: say which to name.
    std::fs::rename(dir.join("deploy_lib.so"), dir.join("a.so")).unwrap();
    std::fs::copy(dir.join("a.so"), dir.join("b.so")).unwrap();
    let (code, _, err) = tvmrt(&["run", d]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("(a.so, b.so)") && err.contains("--lib"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
