//! Relax VM executables of TVM 0.19, 0.21, 0.25, 0.26 and 0.27 (tests/fixtures/relax, made by
//! scripts/make_relax_fixtures.sh): every case's outputs byte-equal to what that version's own
//! runtime computed, through the executable's and the VM's functions as hosts call them.

mod common;

use common::vm::{host_array, load_vm_fixture, VmFixture};
use common::{call, fixtures_dir};
use std::path::Path;
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::{ArrayObj, RetValue};
use tvm_runtime::tensor::NDArray;

const VERSIONS: [&str; 5] = ["0.19", "0.21", "0.25", "0.26", "0.27"];

fn fixtures() -> Vec<VmFixture> {
    let mut out = vec![];
    for v in VERSIONS {
        let root = fixtures_dir().join("relax").join(v);
        let mut names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        out.extend(names.iter().map(|d| load_vm_fixture(d)));
    }
    assert_eq!(out.len(), 35, "seven models of five versions");
    out
}

fn load(dir: &Path) -> ObjRef<Module> {
    tvm_runtime::library::load_file(dir.join("model.so").to_str().unwrap(), "so").unwrap()
}

fn make_vm(exe: &ObjRef<Module>) -> ObjRef<Module> {
    let vm: ObjRef<Module> = call(exe, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
    call(&vm, "vm_initialization", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap();
    vm
}

fn flatten(o: &AnyObject, out: &mut Vec<ObjRef<NDArray>>) -> String {
    if let Some(arr) = o.downcast_ref::<ArrayObj>() {
        return format!("({})", arr.items().iter().map(|f| flatten(f, out)).collect::<String>());
    }
    out.push(o.downcast_ref::<NDArray>().expect("a tensor"));
    "t".into()
}

fn run_main(vm: &ObjRef<Module>, inputs: &[common::Tensor]) -> tvm_runtime::Result<RetValue> {
    call(vm, "main", |a| {
        for t in inputs {
            a.object(host_array(t).into_any());
        }
    })
}

fn check(f: &VmFixture, k: usize, result: RetValue) {
    let case = &f.cases[k];
    let RetValue::Object(o) = result else { panic!("{}: main returned {result:?}", f.dir.display()) };
    let mut got = vec![];
    assert_eq!(flatten(&o, &mut got), case.structure, "{} case {k}", f.dir.display());
    assert_eq!(got.len(), case.outputs.len());
    for (j, (g, want)) in got.iter().zip(&case.outputs).enumerate() {
        assert_eq!(g.dtype(), want.dtype, "{} case {k} output {j}", f.dir.display());
        assert_eq!(g.shape(), &want.shape[..], "{} case {k} output {j}", f.dir.display());
        assert!(g.to_vec() == want.data, "{} case {k} output {j}: differs from upstream's", f.dir.display());
    }
}

#[test]
fn every_version_matches_its_own_runtime() {
    for f in fixtures() {
        let exe = load(&f.dir);
        let vm = make_vm(&exe);
        for (k, case) in f.cases.iter().enumerate() {
            let r = run_main(&vm, &case.inputs).unwrap_or_else(|e| panic!("{} case {k}: {e}", f.dir.display()));
            check(&f, k, r);
        }
    }
}

fn fixture(version: &str, name: &str) -> VmFixture {
    load_vm_fixture(&fixtures_dir().join("relax").join(version).join(name))
}

/// One VM, four threads calling `main` at once with different batches: every answer right.
/// `TVMRT_RELAX_THREAD_CALLS` sets the calls per thread (300 by default).
#[test]
fn one_vm_answers_many_threads() {
    let calls: usize = std::env::var("TVMRT_RELAX_THREAD_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    for version in ["0.19", "0.27"] {
        let f = fixture(version, "mlp_args");
        let vm = make_vm(&load(&f.dir));
        std::thread::scope(|s| {
            for t in 0..4 {
                let (vm, f) = (&vm, &f);
                s.spawn(move || {
                    for i in 0..calls {
                        let k = (t + i) % f.cases.len();
                        check(f, k, run_main(vm, &f.cases[k].inputs).unwrap());
                    }
                });
            }
        });
    }
}

/// Wrong argument counts, shapes and dtypes are errors that name the parameter.
#[test]
fn wrong_arguments_name_the_parameter() {
    for version in VERSIONS {
        let f = fixture(version, "mlp_args");
        let vm = make_vm(&load(&f.dir));
        let inputs = &f.cases[0].inputs;
        let e = run_main(&vm, &inputs[..2]).unwrap_err().to_string();
        assert!(e.contains("expects 4 arguments") && e.contains("x, w1, b1, w2"), "{version}: {e}");
        let mut wrong = inputs.clone();
        wrong[1].shape = vec![8, 64];
        let e = run_main(&vm, &wrong).unwrap_err().to_string();
        assert!(e.contains("w1"), "{version}: {e}");
        let mut wrong = inputs.clone();
        wrong[0].dtype = "int32".parse().unwrap();
        let e = run_main(&vm, &wrong).unwrap_err().to_string();
        assert!(e.contains("param=x") || e.contains("x"), "{version}: {e}");
        assert!(e.contains("dtype"), "{version}: {e}");
    }
}

/// The stateful calls and the functions' names, as upstream's VM answers them.
#[test]
fn stateful_calls_and_metadata() {
    let f = fixture("0.26", "tuple_mixed");
    let exe = load(&f.dir);
    let has = |name: &str| match call(&exe, "has_function", |a| {
        a.str(name);
    })
    .unwrap()
    {
        RetValue::Int(i) => i,
        other => panic!("{other:?}"),
    };
    assert_eq!((has("main"), has("nothing")), (1, 0));
    let RetValue::Str(stats) = call(&exe, "stats", |_| {}).unwrap() else { panic!() };
    assert!(stats.contains("Globals (#1): [main]"), "{stats}");
    let RetValue::Str(text) = call(&exe, "as_text", |_| {}).unwrap() else { panic!() };
    assert!(text.contains("@main(x)") && text.contains("ret %"), "{text}");
    let vm = make_vm(&exe);
    assert!(matches!(
        call(&vm, "get_function_arity", |a| {
            a.str("main");
        })
        .unwrap(),
        RetValue::Int(1)
    ));
    let RetValue::Str(p) = call(&vm, "get_function_param_name", |a| {
        a.str("main").int(0);
    })
    .unwrap() else {
        panic!()
    };
    assert_eq!(p, "x");
    assert!(call(&vm, "get_output", |a| {
        a.str("main").int(0);
    })
    .unwrap_err()
    .to_string()
    .contains("invoke_stateful"));
    call(&vm, "set_input", |a| {
        a.str("main").object(host_array(&f.cases[0].inputs[0]).into_any());
    })
    .unwrap();
    call(&vm, "invoke_stateful", |a| {
        a.str("main");
    })
    .unwrap();
    assert!(matches!(
        call(&vm, "get_output_arity", |a| {
            a.str("main");
        })
        .unwrap(),
        RetValue::Int(3)
    ));
    let nested: ObjRef<NDArray> = call(&vm, "get_output", |a| {
        a.str("main").int(2).int(1);
    })
    .unwrap()
    .into_object()
    .unwrap();
    assert!(nested.to_vec() == f.cases[0].outputs[3].data);
    assert!(call(&vm, "get_output", |a| {
        a.str("main").int(2);
    })
    .unwrap_err()
    .to_string()
    .contains("cannot return a tuple"));
}

/// A second load of a library holds no second copy of its weights: each tensor constant of 1 KiB
/// and more is the first load's, by address, in every generation; answers unchanged.
#[test]
fn a_second_load_shares_the_first_ones_constants() {
    use tvm_runtime::relax::image::Constant;
    for version in ["0.19", "0.21", "0.27"] {
        let f = fixture(version, "mlp_bound");
        let (a, b) = (load(&f.dir), load(&f.dir));
        let addresses = |m: &ObjRef<Module>| -> Vec<(usize, usize)> {
            let exe = tvm_runtime::relax::executable_of(m).expect("a Relax executable");
            exe.constants()
                .iter()
                .filter_map(|c| match c {
                    Constant::Tensor(t) if t.nbytes() >= tvm_runtime::relax::constants::SHARED_FROM => {
                        Some((t.dl_tensor().data as usize, t.nbytes()))
                    }
                    _ => None,
                })
                .collect()
        };
        let (first, second) = (addresses(&a), addresses(&b));
        assert!(!first.is_empty(), "{version}: the fixture has weights of 1 KiB or more");
        assert_eq!(first, second, "{version}");
        check(&f, 0, run_main(&make_vm(&b), &f.cases[0].inputs).unwrap());
        drop(a);
        check(&f, 1, run_main(&make_vm(&b), &f.cases[1].inputs).unwrap());
    }
}

/// `tvmrt.map_constants(path)`: every tensor constant an array over the one mapped file (written
/// by the first load, read by the next), VMs made after answering as before.
#[test]
fn constants_map_from_one_file() {
    use tvm_runtime::relax::image::Constant;
    let f = fixture("0.21", "mlp_bound");
    let path = std::env::temp_dir().join(format!("relax-constants-{}.params", std::process::id()));
    let _ = std::fs::remove_file(&path);
    for expect_written in [1, 0] {
        let exe = load(&f.dir);
        let written = call(&exe, "tvmrt.map_constants", |a| {
            a.str(path.to_str().unwrap());
        })
        .unwrap();
        assert!(matches!(written, RetValue::Int(w) if w == expect_written), "{written:?}");
        let e = tvm_runtime::relax::executable_of(&exe).unwrap();
        let tensors: Vec<bool> = e
            .constants()
            .iter()
            .filter_map(|c| match c {
                Constant::Tensor(t) => Some(t.is_mapped()),
                _ => None,
            })
            .collect();
        assert!(!tensors.is_empty() && tensors.iter().all(|&m| m), "{tensors:?}");
        let vm = make_vm(&exe);
        for k in 0..f.cases.len() {
            check(&f, k, run_main(&vm, &f.cases[k].inputs).unwrap());
        }
    }
    std::fs::remove_file(&path).unwrap();
}

/// Beside upstream's libtvm_ffi, the library it loaded keeps the executable's bytes in its blob:
/// once parsed, the blob holding exactly those bytes is found among the loaded objects and its
/// pages given back (they read the same after, from the file); bytes no blob holds are refused.
#[test]
fn the_blob_of_a_library_another_loader_opened_is_found_and_given_back() {
    let f = fixture("0.27", "mlp_bound");
    let copy = std::env::temp_dir().join(format!("relax-blob-{}.so", std::process::id()));
    std::fs::copy(f.dir.join("model.so"), &copy).unwrap();
    // SAFETY: a fixture library, opened as another loader would (its constructors are TVM's).
    let lib = unsafe { libloading::Library::new(&copy) }.unwrap();
    // SAFETY: the blob symbol: a u64 length, then the bytes, in the library loaded above.
    let blob: &[u8] = unsafe {
        let at: libloading::Symbol<'_, *const u8> = lib.get(b"__tvm_ffi__library_bin\0").unwrap();
        let base: *const u8 = *at;
        std::slice::from_raw_parts(base.add(8), (base as *const u64).read_unaligned() as usize)
    };
    let before = blob.to_vec();
    // The executable's bytes: the last module entry (its length, then the bytes).
    let marker = b"relax.VMExecutable";
    let at = before.windows(marker.len()).position(|w| w == marker).unwrap() + marker.len();
    let len = u64::from_le_bytes(before[at..at + 8].try_into().unwrap()) as usize;
    let exe_bytes = before[at + 8..at + 8 + len].to_vec();
    assert!(tvm_runtime::library::blob::release_ffi_blob_holding(&exe_bytes).is_some());
    assert_eq!(blob, &before[..], "the blob reads the same after its pages were given back");
    let mut other = exe_bytes.clone();
    other[len / 2] ^= 1;
    assert!(tvm_runtime::library::blob::release_ffi_blob_holding(&other).is_none());
    drop(lib);
    std::fs::remove_file(&copy).unwrap();
}

/// The search reads other loaded libraries' blobs: one another thread unloads meanwhile (a model
/// let go while another loads) stays mapped until the search is done with it.
#[test]
fn the_blob_search_holds_what_it_reads_while_others_unload() {
    let f = fixture("0.27", "mlp_bound");
    let copy = std::env::temp_dir().join(format!("relax-blob-churn-{}.so", std::process::id()));
    std::fs::copy(f.dir.join("model.so"), &copy).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: a fixture library, loaded and let go as another loader would.
                drop(unsafe { libloading::Library::new(&copy) }.unwrap());
            }
        });
        let bytes = vec![7u8; 64];
        for _ in 0..3000 {
            assert!(tvm_runtime::library::blob::release_ffi_blob_holding(&bytes).is_none());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    std::fs::remove_file(&copy).unwrap();
}

/// The profiler VM (`vm_profiler_load_executable`): `profile(name, args...)` times one call's
/// kernels and builtins as upstream's report; `profile_rpc` gives the same JSON for the inputs
/// `set_input` gave; the plain VM has neither.
#[test]
fn the_profiler_vm_reports_each_kernel_call() {
    let f = fixture("0.27", "mlp_args");
    let exe = load(&f.dir);
    assert!(Module::get_function(&make_vm(&exe), "profile", false).unwrap().is_none());
    let vm: ObjRef<Module> = call(&exe, "vm_profiler_load_executable", |_| {}).unwrap().into_object().unwrap();
    call(&vm, "vm_initialization", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap();
    let inputs = &f.cases[0].inputs;
    let report = call(&vm, "profile", |a| {
        a.str("main");
        for t in inputs {
            a.object(host_array(t).into_any());
        }
    })
    .unwrap()
    .into_object::<tvm_runtime::profiling::objects::ReportObj>()
    .unwrap();
    let report = tvm_runtime::profiling::Report::from_object(&report).unwrap();
    let name = |c: &tvm_runtime::profiling::Metrics| match tvm_runtime::profiling::metric(c, "Name") {
        Some(tvm_runtime::profiling::Metric::Str(s)) => s.clone(),
        other => panic!("{other:?}"),
    };
    let names: Vec<String> = report.calls.iter().map(name).collect();
    // The model's four kernels, once each, in the order the function calls them.
    let kernels: Vec<&str> = names.iter().map(String::as_str).filter(|n| !n.starts_with("vm.builtin.")).collect();
    assert_eq!(kernels, ["shape_func", "matmul", "add", "relu", "matmul1"], "{names:?}");
    assert!(names.iter().any(|n| n == "vm.builtin.alloc_storage"), "{names:?}");
    let matmul = report.calls.iter().find(|c| name(c) == "matmul").unwrap();
    match tvm_runtime::profiling::metric(matmul, "Argument Shapes") {
        Some(tvm_runtime::profiling::Metric::Str(s)) => {
            assert_eq!(s, "float32[1, 16], float32[16, 32], float32[1, 32]")
        }
        other => panic!("{other:?}"),
    }
    call(&vm, "set_input", |a| {
        a.str("main");
        for t in inputs {
            a.object(host_array(t).into_any());
        }
    })
    .unwrap();
    let RetValue::Str(json) = call(&vm, "profile_rpc", |a| {
        a.str("main");
    })
    .unwrap() else {
        panic!()
    };
    let again = tvm_runtime::profiling::json::from_json(&json).unwrap();
    assert_eq!(again.calls.iter().map(name).collect::<Vec<_>>(), names);
    // The VM still answers as a VM.
    check(&f, 0, run_main(&vm, inputs).unwrap());
}

/// A tvm-ffi kernel's own argument check raises through TVMFFIErrorSetRaisedFromCStrParts: an
/// error with its message, and the process lives.
#[test]
fn a_kernel_error_is_an_error() {
    for version in ["0.21", "0.27"] {
        let f = fixture(version, "mlp_bound");
        let exe = load(&f.dir);
        let lib = exe.imports()[0].clone();
        let matmul = Module::get_function(&lib, "matmul", false).unwrap().expect("the kernel");
        let x = host_array(&f.cases[0].inputs[0]);
        let mut b = tvm_runtime::packed::ArgsBuilder::new();
        b.object(x.into_any());
        let e = matmul.call(&b.args()).unwrap_err().to_string();
        assert!(e.contains("matmul") || e.contains("arguments") || e.contains("num_args"), "{version}: {e}");
    }
}

/// Damaged executables: every byte of three models' executables of 0.19 and 0.27 changed three
/// ways, loaded beside the model's kernels and run on its first case. Each is refused, fails with
/// an error or answers: a crash ends the campaign's process, and fails the test. The campaign runs
/// in a child process (this test executable again, alone) under an address-space limit, as a
/// damaged shape may ask for any size, which must come back as an error too.
#[test]
fn damaged_executables_are_errors() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "damage_campaign_child", "--nocapture", "--test-threads=1"])
        .env("TVMRT_RELAX_DAMAGE_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the campaign failed: {:?}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find_map(|l| l.split("damage counts: ").nth(1)).expect("the counts");
    eprintln!("damaged executables (refused, failed, answered): {line}");
    let n: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    assert!(n.len() == 3 && n.iter().all(|&c| c > 0), "{line}");
}

/// The campaign itself, when `damaged_executables_are_errors` runs this executable for it.
#[test]
fn damage_campaign_child() {
    if std::env::var_os("TVMRT_RELAX_DAMAGE_CHILD").is_none() {
        return;
    }
    let rl = libc::rlimit { rlim_cur: 3 << 30, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setting this process's own limit.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) };
    let (refused, failed, answered) = damage_campaign();
    println!("damage counts: {refused} {failed} {answered}");
}

fn damage_campaign() -> (u64, u64, u64) {
    use tvm_runtime::relax::image::{Generation, MAGIC_V1, MAGIC_V2};
    use tvm_runtime::relax::{Executable, ExecutableModule};
    let (mut refused, mut failed, mut answered) = (0, 0, 0);
    for (version, generation) in [("0.19", Generation::Classic), ("0.27", Generation::Ffi)] {
        for name in ["control", "mlp_args", "tuple_mixed"] {
            let f = fixture(version, name);
            let lib = load(&f.dir).imports()[0].clone();
            let so = std::fs::read(f.dir.join("model.so")).unwrap();
            let at = so
                .windows(8)
                .position(|w| w == MAGIC_V1.to_le_bytes() || w == MAGIC_V2.to_le_bytes())
                .expect("the executable");
            // Both blobs put the executable's length right before it.
            let len = u64::from_le_bytes(so[at - 8..at].try_into().unwrap()) as usize;
            let bytes = &so[at..at + len];
            assert!(Executable::from_bytes(bytes, generation).is_ok(), "{version} {name}");
            for i in 0..bytes.len() {
                for delta in [1u8, 0x80, 0xff] {
                    let mut damaged = bytes.to_vec();
                    damaged[i] = damaged[i].wrapping_add(delta);
                    let Ok(exe) = Executable::from_bytes(&damaged, generation) else {
                        refused += 1;
                        continue;
                    };
                    let m = ExecutableModule::module(exe, "relax.VMExecutable");
                    Module::import(&m, lib.clone()).unwrap();
                    let vm: ObjRef<Module> = call(&m, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
                    let run = call(&vm, "vm_initialization", |a| {
                        a.int(1).int(0).int(2);
                    })
                    .and_then(|_| match Module::get_function(&vm, "main", false)? {
                        Some(_) => run_main(&vm, &f.cases[0].inputs),
                        None => Err(tvm_runtime::Error::value("no main")),
                    });
                    match run {
                        Ok(_) => answered += 1,
                        Err(_) => failed += 1,
                    }
                }
            }
        }
    }
    (refused, failed, answered)
}
