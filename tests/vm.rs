//! The Relay VM on executables built by TVM 0.8, 0.9, 0.16 and 0.19 (tests/fixtures/vm, made by
//! scripts/make_vm_fixtures.sh with each compiler's own VM computing the references): outputs
//! byte-equal in both artefact forms, many VMs on threads, storage bounded under changing shapes,
//! and bad files and bad calls refused with an error.

mod common;

use common::vm::*;
use common::*;
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::RetValue;
use tvm_runtime::tensor::NDArray;

#[test]
fn every_version_runs_byte_equal_to_its_compilers_vm_in_both_forms() {
    let mut ran = 0;
    for f in vm_fixtures() {
        let mut forms = vec![("one file", load_one_file(&f.dir))];
        if f.dir.join("code.ro").exists() {
            forms.push(("split", load_split(&f.dir)));
        }
        for (form, exe) in forms {
            assert_eq!(exe.type_key(), "VMExecutable");
            let vm = make_vm(&exe, false);
            // Every case on one VM, then again in reverse: shapes change from call to call.
            for k in (0..f.cases.len()).chain((0..f.cases.len()).rev()) {
                let what = format!("{} ({form}) case {k}", f.dir.display());
                check(&what, &invoke(&vm, &f.cases[k].inputs).unwrap(), &f.cases[k]);
                ran += 1;
            }
            let arity = call(&exe, "get_function_arity", |a| {
                a.str("main");
            })
            .unwrap();
            assert!(matches!(arity, RetValue::Int(n) if n as usize == f.params.len()));
        }
    }
    assert!(ran >= 4 * 5 * 6, "{ran} runs");
}

#[test]
fn opencl_builds_match_upstreams_opencl_vm() {
    if !have_opencl() {
        return;
    }
    for name in ["mlp_dyn", "control"] {
        let f = load_vm_fixture(&fixtures_dir().join("vm/opencl").join(name));
        for exe in [load_one_file(&f.dir), load_split(&f.dir)] {
            let vm = make_vm(&exe, true);
            for (k, case) in f.cases.iter().enumerate() {
                check(&format!("opencl {name} case {k}"), &invoke(&vm, &case.inputs).unwrap(), case);
            }
        }
    }
}

#[test]
fn vms_of_one_executable_run_on_threads_and_share_its_constants() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.19/mlp_dyn"));
    let exe = load_one_file(&f.dir);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (exe, f) = (&exe, &f);
            s.spawn(move || {
                let vm = make_vm(exe, false);
                for r in 0..30 {
                    let k = (t + r) % f.cases.len();
                    check(&format!("thread {t} run {r}"), &invoke(&vm, &f.cases[k].inputs).unwrap(), &f.cases[k]);
                }
            });
        }
    });
    // Constants are the executable's: both VMs' loads are the same tensors.
    let exe_ref = tvm_runtime::vm::executable_of(&exe).unwrap();
    let a = exe_ref.constants.on(9, DLDevice::CPU).unwrap();
    let b = exe_ref.constants.on(9, DLDevice::CPU).unwrap();
    assert!(ObjRef::ptr_eq(&a, &b));
}

#[test]
fn storage_stays_bounded_under_changing_shapes() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/seq_dyn"));
    let exe = load_one_file(&f.dir);
    let vm = make_vm(&exe, false);
    let pools = tvm_runtime::vm::executable_of(&exe).unwrap().pools.clone();
    let mut peak = 0;
    let mut seed = 1u64;
    for i in 0..200 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let n = 1 + (seed >> 33) as i64 % 64;
        let x = Tensor {
            name: "tokens".into(),
            dtype: DLDataType::F32,
            shape: vec![1, n, 8],
            data: vec![0u8; n as usize * 32],
        };
        let out = invoke(&vm, &[x]).unwrap();
        drop(out);
        let bytes: usize = pools.all().iter().map(|p| p.usage().bytes).sum();
        if i >= 20 {
            peak = peak.max(bytes);
        }
    }
    // The largest request (64 steps) needs a few kB per tensor: what is kept stays within what a
    // handful of recent invocations needed, however many shapes went by.
    assert!(peak < 64 * 1024, "storage kept grew to {peak} bytes");
    // The VM keeps its last result (for get_output): once it goes, every block is free.
    drop(vm);
    for p in pools.all() {
        p.clear();
        assert_eq!(p.usage().bytes, 0);
    }
}

#[test]
fn set_outputs_writes_into_the_callers_tensors() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/conv_static"));
    let exe = load_one_file(&f.dir);
    let vm = make_vm(&exe, false);
    let case = &f.cases[0];
    let out = NDArray::empty(&case.outputs[0].shape, case.outputs[0].dtype, DLDevice::CPU).unwrap();
    invoke_into(&vm, &case.inputs, std::slice::from_ref(&out)).unwrap();
    assert!(out.to_vec() == case.outputs[0].data, "the output was not written where the caller asked");
    // A wrong shape is refused.
    let wrong = NDArray::empty(&[1, 3], case.outputs[0].dtype, DLDevice::CPU).unwrap();
    let e = invoke_into(&vm, &case.inputs, &[wrong]).unwrap_err().to_string();
    assert!(e.contains("output tensor"), "{e}");
}

#[test]
fn save_writes_what_loads_back_in_the_files_own_generation() {
    for v in VERSIONS {
        let f = load_vm_fixture(&fixtures_dir().join("vm").join(v).join("control"));
        let exe = load_one_file(&f.dir);
        let RetValue::Bytes(saved) = call(&exe, "save", |_| {}).unwrap() else { panic!("bytes") };
        let lib = exe.imports()[0].clone();
        let again = tvm_runtime::vm::load_executable(&saved, Some(lib)).unwrap();
        let RetValue::Bytes(twice) = call(&again, "save", |_| {}).unwrap() else { panic!("bytes") };
        assert!(saved == twice, "{v}: save is not stable");
        let vm = make_vm(&again, false);
        for case in &f.cases {
            check(&format!("{v} saved"), &invoke(&vm, &case.inputs).unwrap(), case);
        }
    }
}

#[test]
fn late_bound_constants_move_out_and_back() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.19/mlp_dyn"));
    let exe = load_one_file(&f.dir);
    let path = temp_path("late-bound.params");
    call(&exe, "move_late_bound_consts", |a| {
        a.str(path.to_str().unwrap()).int(64);
    })
    .unwrap();
    let e = call(&exe, "vm_load_executable", |_| {}).unwrap_err().to_string();
    assert!(e.contains("late-bound"), "{e}");
    call(&exe, "load_late_bound_consts", |a| {
        a.str(path.to_str().unwrap());
    })
    .unwrap();
    let vm = make_vm(&exe, false);
    check("late-bound", &invoke(&vm, &f.cases[1].inputs).unwrap(), &f.cases[1]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_profiling_vm_reports_every_kernel() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/mlp_dyn"));
    let exe = load_one_file(&f.dir);
    let debug = tvm_runtime::vm::VirtualMachine::create(&exe, true).unwrap();
    call(&debug, "init", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap();
    call(&debug, "set_input", |a| {
        a.str("main").object(host_array(&f.cases[1].inputs[0]).into_any());
    })
    .unwrap();
    let RetValue::Str(json) = call(&debug, "profile_rpc", |a| {
        a.str("main");
    })
    .unwrap() else {
        panic!("a string")
    };
    let report = tvm_runtime::profiling::json::from_json(&json).unwrap();
    let names: Vec<String> = report
        .calls
        .iter()
        .filter_map(|c| match tvm_runtime::profiling::metric(c, "Name") {
            Some(tvm_runtime::profiling::Metric::Str(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert!(names.iter().any(|n| n.contains("fused_nn_contrib_dense_pack")), "{names:?}");
    assert!(names.iter().any(|n| n == "VM::AllocStorage"), "{names:?}");
    assert!(report.device_metrics.iter().any(|(d, _)| d == "cpu0"));
}

/// The bytecode of the 0.16 MLP, for the malformed-file tests.
#[test]
fn truncated_or_damaged_bytecode_is_refused_without_a_crash() {
    let (code, _) = mlp_code();
    for n in (0..code.len()).step_by(7) {
        assert!(tvm_runtime::vm::Executable::from_bytes(&code[..n]).is_err(), "a prefix of {n} bytes loaded");
    }
    // Every byte flipped in turn: an error, or a program whose every operand is in range.
    let mut loaded = 0;
    for i in 0..code.len() {
        let mut bad = code.clone();
        bad[i] ^= 0x5a;
        if tvm_runtime::vm::Executable::from_bytes(&bad).is_ok() {
            loaded += 1;
        }
    }
    assert!(loaded < code.len() / 4, "{loaded} of {} damaged files loaded", code.len());
}

#[test]
fn operands_out_of_range_are_refused_at_load() {
    use tvm_runtime::vm::code::Instr;
    let (code, _) = mlp_code();
    type Edit = Box<dyn FnOnce(&mut Vec<Instr>)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("register", Box::new(|c: &mut Vec<Instr>| c[0] = Instr::Move { from: 0, dst: 100_000 })),
        ("constant", Box::new(|c: &mut Vec<Instr>| c[1] = Instr::LoadConst { index: 999, device: 0, dst: 2 })),
        ("function", Box::new(|c: &mut Vec<Instr>| c[0] = Instr::Invoke { func: 7, args: Box::new([]), dst: 1 })),
        (
            "primitive",
            Box::new(|c: &mut Vec<Instr>| c[0] = Instr::InvokePacked { packed: 99, outputs: 0, args: Box::new([]) }),
        ),
        ("jump", Box::new(|c: &mut Vec<Instr>| c[0] = Instr::Goto { offset: 10_000 })),
        ("device", Box::new(|c: &mut Vec<Instr>| c[0] = Instr::DeviceCopy { src: 0, from: 0, to: 5, dst: 1 })),
    ];
    for (what, edit) in cases {
        let e = tvm_runtime::vm::Executable::from_bytes(&edited(&code, edit)).err().unwrap().to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
    // An unknown opcode and a wrong hash, written by hand.
    let image = tvm_runtime::vm::image::read(&code).unwrap();
    let bytes = tvm_runtime::vm::image::write(&image);
    // The last instruction is `ret $r`: [3, hash, 1, r]; make its opcode 77 (hash kept: wrong).
    let at = bytes.len() - 16;
    let mut wrong_hash = bytes.clone();
    wrong_hash[at..at + 8].copy_from_slice(&77i64.to_le_bytes());
    let e = tvm_runtime::vm::Executable::from_bytes(&wrong_hash).err().unwrap().to_string();
    assert!(e.contains("hash does not match"), "{e}");
    let mut unknown = wrong_hash.clone();
    let r = i64::from_le_bytes(bytes[at + 8..].try_into().unwrap());
    let hash = tvm_runtime::vm::code::instruction_hash(77, &[r]);
    unknown[at - 8..at].copy_from_slice(&hash.to_le_bytes());
    let e = tvm_runtime::vm::Executable::from_bytes(&unknown).err().unwrap().to_string();
    assert!(e.contains("unknown opcode 77"), "{e}");
}

#[test]
fn any_version_string_of_a_known_generation_loads_and_an_unknown_one_is_named() {
    let (code, lib) = mlp_code();
    let mut image = tvm_runtime::vm::image::read(&code).unwrap();
    image.version = "0.17.0".into();
    assert!(tvm_runtime::vm::Executable::from_bytes(&tvm_runtime::vm::image::write(&image)).is_ok());
    image.version = "my-fork-3".into();
    let exe = tvm_runtime::vm::load_executable(&tvm_runtime::vm::image::write(&image), Some(lib)).unwrap();
    let vm = make_vm(&exe, false);
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/mlp_dyn"));
    check("a fork's version string", &invoke(&vm, &f.cases[0].inputs).unwrap(), &f.cases[0]);
    // An unknown version whose bytes fit no generation: refused, the version named.
    let mut bad = code.clone();
    let n = u64::from_le_bytes(bad[8..16].try_into().unwrap()) as usize;
    bad.truncate(16 + n + 20);
    bad[16..16 + n].copy_from_slice(
        &b"9.99.0-weird"[..n.min(12)].iter().chain(std::iter::repeat(&b'x')).take(n).copied().collect::<Vec<_>>(),
    );
    let e = tvm_runtime::vm::Executable::from_bytes(&bad).err().unwrap().to_string();
    assert!(e.contains("9.99.0") && e.contains("does not know"), "{e}");
}

#[test]
fn bad_calls_are_errors() {
    let (code, lib) = mlp_code();
    let exe = tvm_runtime::vm::load_executable(&code, Some(lib)).unwrap();
    let vm: ObjRef<Module> = call(&exe, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
    let x = Tensor { name: "data".into(), dtype: DLDataType::F32, shape: vec![2, 16], data: vec![0; 128] };
    let e = invoke(&vm, std::slice::from_ref(&x)).unwrap_err().to_string();
    assert!(e.contains("not initialised"), "{e}");
    call(&vm, "init", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap();
    let e = invoke(&vm, &[]).unwrap_err().to_string();
    assert!(e.contains("doesn't match the number"), "{e}");
    let e = call(&vm, "invoke", |a| {
        a.str("nope");
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("Cannot find function nope"), "{e}");
    let wrong_dtype =
        Tensor { name: "data".into(), dtype: DLDataType::new(0, 32, 1), shape: vec![2, 16], data: vec![0; 128] };
    assert!(invoke(&vm, &[wrong_dtype]).is_err(), "an int32 input for a float32 parameter");
    let wrong_rank = Tensor { name: "data".into(), dtype: DLDataType::F32, shape: vec![32], data: vec![0; 128] };
    assert!(invoke(&vm, &[wrong_rank]).is_err(), "a 1-D input for a 2-D parameter");
    let e = call(&vm, "init", |a| {
        a.int(4).int(0);
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("triples"), "{e}");
    // The VM still answers right after all that.
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/mlp_dyn"));
    check("after bad calls", &invoke(&vm, &f.cases[2].inputs).unwrap(), &f.cases[2]);
    // A library without the kernels: refused when the VM is made ready.
    let other = tvm_runtime::library::load_file(fixtures_dir().join("mlp_b1/lib.so").to_str().unwrap(), "so").unwrap();
    let exe = tvm_runtime::vm::load_executable(&code, Some(other)).unwrap();
    let vm: ObjRef<Module> = call(&exe, "vm_load_executable", |_| {}).unwrap().into_object().unwrap();
    let e = call(&vm, "init", |a| {
        a.int(1).int(0).int(2);
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("Cannot find function in module"), "{e}");
}

/// A primitive's arguments are built on the stack for up to 16 objects and in lists past that:
/// both carry every object under its natural code, in order (a VM primitive may take many).
#[test]
fn primitive_arguments_carry_every_object_in_order() {
    use tvm_runtime::dlpack::kTVMNDArrayHandle;
    use tvm_runtime::object::AnyObject;
    use tvm_runtime::packed::with_object_args;
    for n in [0usize, 3, 16, 17, 40] {
        let objects: Vec<AnyObject> = (0..n)
            .map(|i| NDArray::empty(&[i as i64 + 1], DLDataType::F32, DLDevice::CPU).unwrap().into_any())
            .collect();
        let refs: Vec<&AnyObject> = objects.iter().collect();
        let shapes = with_object_args(&refs, |a| {
            assert_eq!(a.len(), n);
            (0..n)
                .map(|i| {
                    assert_eq!(a.code(i), kTVMNDArrayHandle);
                    a.tensor(i).unwrap().shape().to_vec()
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(shapes, (0..n).map(|i| vec![i as i64 + 1]).collect::<Vec<_>>(), "{n} objects");
    }
}

/// A scalar read copies the first bytes of a tensor alone: any prefix of its bytes, never more.
#[test]
fn a_prefix_of_a_tensors_bytes_reads_alone() {
    let t = NDArray::from_bytes(&[4], DLDataType::new(0, 32, 1), &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
        .unwrap();
    let mut four = [0u8; 4];
    t.copy_prefix_to_bytes(&mut four).unwrap();
    assert_eq!(four, [1, 0, 0, 0]);
    let mut all = [0u8; 16];
    t.copy_prefix_to_bytes(&mut all).unwrap();
    assert_eq!(all.to_vec(), t.to_vec());
    let mut more = [0u8; 17];
    let e = t.copy_prefix_to_bytes(&mut more).unwrap_err().to_string();
    assert!(e.contains("holds 16 bytes, 17 requested"), "{e}");
}
