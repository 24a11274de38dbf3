//! Programs compiled once, proven through c_tests/opencl_shim.c (so this file is a test process of
//! its own): with every source build made to fail, a fresh load of a model runs only from programs
//! built earlier, handed over as `opencl.SetPreCompiledPrograms`' blob or found in the disk cache;
//! a cache entry that is damaged or another kernel's is never used.

mod common;

use common::shim::{fail, shim};
use common::*;
use std::path::{Path, PathBuf};
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::module::Module;
use tvm_runtime::packed::{registry, ArgsBuilder, RetValue};

const CL: DLDevice = DLDevice { device_type: 4, device_id: 0 };

/// The shim's failures are process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh load of the model (its own OpenCL module, nothing built), given `blob` first if any,
/// run once on the device and checked; the error's text otherwise.
fn run_fresh(f: &Fixture, blob: Option<&[u8]>) -> Result<(), String> {
    let lib = f.load_lib_copy();
    if let Some(blob) = blob {
        let set = Module::get_function(&lib, "opencl.SetPreCompiledPrograms", true).unwrap().unwrap();
        let mut a = ArgsBuilder::new();
        a.bytes(blob);
        set.call(&a.args()).map_err(|e| e.to_string())?;
    }
    let m = f.executor_from_factory_on(&lib, CL);
    f.set_inputs(&m);
    exec(&m).run().map_err(|e| e.to_string())?;
    f.check_outputs(&m, "a fresh load");
    Ok(())
}

fn set_cache(dir: &str) {
    let mut a = ArgsBuilder::new();
    a.str(dir);
    registry::get("tvmrt.opencl.SetProgramCache").unwrap().call(&a.args()).unwrap();
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "clprogram")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn no_source_builds(lib: &libloading::Library, on: bool) {
    fail(lib, "clCreateProgramWithSource", i64::from(on), on);
}

#[test]
fn a_blob_spares_every_source_build() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::load("opencl/mlp_cl");
    let first = f.load_lib_copy();
    let get = Module::get_function(&first, "opencl.GetPreCompiledPrograms", true).unwrap().unwrap();
    let RetValue::Bytes(blob) = get.call(&ArgsBuilder::new().args()).unwrap() else { panic!("bytes") };
    no_source_builds(lib, true);
    let e = run_fresh(&f, None).unwrap_err();
    assert!(e.contains("clCreateProgramWithSource"), "without the blob, the kernels need their source: {e}");
    let ran = run_fresh(&f, Some(&blob));
    no_source_builds(lib, false);
    ran.unwrap();
}

#[test]
fn the_disk_cache_spares_source_builds_and_never_trusts_a_bad_entry() {
    let Some(lib) = shim() else { return };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::load("opencl/mlp_cl");
    let dir = temp_path("opencl_program_cache");
    let _ = std::fs::remove_dir_all(&dir);
    set_cache(dir.to_str().unwrap());
    run_fresh(&f, None).unwrap();
    let stored = entries(&dir);
    assert!(stored.len() >= 2, "one entry per kernel: {stored:?}");

    no_source_builds(lib, true);
    let warm = run_fresh(&f, None);
    // A damaged entry, and an entry holding another kernel's program, are rebuilt from source
    // (which fails here, so the run shows it).
    let original = std::fs::read(&stored[0]).unwrap();
    let mut damaged = original.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x01;
    std::fs::write(&stored[0], &damaged).unwrap();
    let after_damage = run_fresh(&f, None);
    std::fs::write(&stored[0], std::fs::read(&stored[1]).unwrap()).unwrap();
    let after_swap = run_fresh(&f, None);
    no_source_builds(lib, false);
    warm.unwrap();
    assert!(after_damage.unwrap_err().contains("clCreateProgramWithSource"));
    assert!(after_swap.unwrap_err().contains("clCreateProgramWithSource"));

    // Rebuilt and written again: warm once more.
    run_fresh(&f, None).unwrap();
    assert_eq!(entries(&dir), stored);
    no_source_builds(lib, true);
    let rewarmed = run_fresh(&f, None);
    // Off: the cache is not read.
    set_cache("");
    let off = run_fresh(&f, None);
    no_source_builds(lib, false);
    rewarmed.unwrap();
    assert!(off.unwrap_err().contains("clCreateProgramWithSource"));
    let _ = std::fs::remove_dir_all(&dir);
}
