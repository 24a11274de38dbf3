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
