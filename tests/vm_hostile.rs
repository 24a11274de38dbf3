//! The Relay VM under input a hostile caller or file gives it: tensors of no elements or no
//! dimensions, callers' output tensors at unaligned addresses, tensors placed at unaligned
//! offsets, frames the system cannot allocate, loops of a million iterations and tuples a
//! million deep. Each gets an answer or an error, never a crash.

mod common;

use common::vm::*;
use common::*;
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::RetValue;
use tvm_runtime::tensor::{Buffer, NDArray};
use tvm_runtime::vm::code::Instr;
use tvm_runtime::vm::objects::{AdtObj, ClosureObj};

/// Shapes of every rank 0 to 4 with a zero-length axis in every position, and 0-d.
fn empty_shapes() -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for rank in 1..=4 {
        for zero in 0..rank {
            out.push((0..rank).map(|a| if a == zero { 0 } else { 3 }).collect());
        }
    }
    out
}

#[test]
fn empty_and_0d_inputs_get_an_answer_or_an_error_for_every_input_of_every_fixture() {
    let mut tried = 0;
    let mut answered = 0;
    for f in vm_fixtures() {
        let exe = load_one_file(&f.dir);
        let vm = make_vm(&exe, false);
        let good = &f.cases[0].inputs;
        for k in 0..good.len() {
            for shape in empty_shapes() {
                let mut inputs = good.clone();
                let bytes = shape.iter().product::<i64>() as usize * inputs[k].dtype.bits as usize / 8;
                inputs[k].shape = shape.clone();
                inputs[k].data = vec![0; bytes];
                // A crash here kills the test process: an answer or an error both pass.
                if invoke(&vm, &inputs).is_ok() {
                    answered += 1;
                }
                tried += 1;
            }
            // The VM still answers right after each input's hostile shapes.
            check(&format!("{} after empty inputs", f.dir.display()), &invoke(&vm, good).unwrap(), &f.cases[0]);
        }
    }
    assert!(tried >= 20 * 11, "{tried} tried ({answered} answered)");
}

#[test]
fn a_0d_array_points_its_shape_and_data_at_real_memory() {
    tvm_runtime::init();
    let t = NDArray::empty(&[], DLDataType::F32, DLDevice::CPU).unwrap();
    let dl = t.dl_tensor();
    assert_eq!(dl.ndim, 0);
    // SAFETY: the shape pointer addresses at least one element (a zero past ndim).
    assert_eq!(unsafe { *dl.shape }, 0);
    let e = NDArray::empty(&[0, 4], DLDataType::F32, DLDevice::CPU).unwrap();
    // SAFETY: an empty array's data addresses the alignment's worth of zeroed bytes.
    let first = unsafe { std::slice::from_raw_parts(e.data_ptr(), 64) };
    assert!(first.iter().all(|&b| b == 0));
    assert_eq!(e.data_ptr() as usize % 64, 0);
}

#[test]
fn an_unaligned_output_tensor_is_refused_by_set_outputs() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/conv_static"));
    let exe = load_one_file(&f.dir);
    let vm = make_vm(&exe, false);
    let want = &f.cases[0].outputs[0];
    let bytes = want.data.len();
    let block = std::sync::Arc::new(Buffer::zeroed(bytes + 64).unwrap());
    for offset in [4, 8, 32] {
        let out = NDArray::view_of(&block, offset, &want.shape, want.dtype).unwrap();
        assert_eq!(out.data_ptr() as usize % 64, offset);
        let e = invoke_into(&vm, &f.cases[0].inputs, &[out]).unwrap_err().to_string();
        assert!(e.contains("aligned to 64"), "{e}");
    }
    // An aligned one is taken and written.
    let out = NDArray::view_of(&block, 64, &want.shape, want.dtype).unwrap();
    invoke_into(&vm, &f.cases[0].inputs, std::slice::from_ref(&out)).unwrap();
    assert!(out.to_vec() == want.data);
}

/// The MLP's bytecode with instruction `at` made `LoadConsti value -> dst`.
fn with_offset(at: usize, value: i64) -> ObjRef<Module> {
    let (code, lib) = mlp_code();
    let image = tvm_runtime::vm::image::read(&code).unwrap();
    let Instr::LoadConst { dst, .. } = image.functions[0].code[at] else { panic!("instruction {at}") };
    let code = edited(&code, |c| c[at] = Instr::LoadConsti { value, dst });
    tvm_runtime::vm::load_executable(&code, Some(lib)).unwrap()
}

#[test]
fn a_tensor_at_an_unaligned_offset_runs_as_upstreams_does() {
    // Instruction 56 loads the offset of the row sums (the second output) in its storage.
    // Upstream hands kernels the storage's aligned address with the offset as `byte_offset`,
    // which its kernels do not add while copies out do: the sums come back shifted by the offset
    // (what upstream v0.16 answers on this edited file, checked by hand), and nothing faults.
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/mlp_dyn"));
    for offset in [4, 8, 20] {
        let vm = make_vm(&with_offset(56, offset), false);
        for case in &f.cases {
            let mut got = vec![];
            flatten(&invoke(&vm, &case.inputs).unwrap(), &mut got);
            assert!(got[0].to_vec() == case.outputs[0].data, "the first output does not move");
            let sums = &case.outputs[1].data;
            let k = offset as usize;
            let read = got[1].to_vec();
            let n = sums.len().saturating_sub(k);
            assert!(read[..n] == sums[sums.len() - n..], "offset {offset}: the sums shifted as upstream's");
            let dl = got[1].dl_tensor();
            assert_eq!((dl.data as usize % 64, dl.byte_offset), (0, offset as u64));
        }
    }
    // An aligned offset keeps the address form, and the bytes.
    let vm = make_vm(&with_offset(56, 0), false);
    check("offset 0", &invoke(&vm, &f.cases[1].inputs).unwrap(), &f.cases[1]);
}

/// The MLP's `main` with 2^20 registers (16 MiB a frame), calling itself first when `recurse`.
fn big_frames(recurse: bool) -> ObjRef<Module> {
    let (code, lib) = mlp_code();
    let mut image = tvm_runtime::vm::image::read(&code).unwrap();
    image.functions[0].registers = tvm_runtime::vm::code::MAX_REGISTERS;
    if recurse {
        image.functions[0].code[0] = Instr::Invoke { func: 0, args: Box::new([0]), dst: 1 };
    }
    tvm_runtime::vm::load_executable(&tvm_runtime::vm::image::write(&image), Some(lib)).unwrap()
}

#[test]
fn frames_the_system_cannot_allocate_are_an_error() {
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/mlp_dyn"));
    // A frame of 2^20 registers runs.
    check("2^20 registers", &invoke(&make_vm(&big_frames(false), false), &f.cases[0].inputs).unwrap(), &f.cases[0]);
    // A recursion of such frames that does not end: the frames' memory bound ends it.
    let vm = make_vm(&big_frames(true), false);
    let e = invoke(&vm, &f.cases[0].inputs).unwrap_err().to_string();
    assert!(e.contains("MiB of registers"), "{e}");
    // The same in a child under an address-space limit: the system refuses a frame first, which
    // must end the invocation with an error, never abort the process.
    // SAFETY: the child only calls the VM and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let rl = libc::rlimit { rlim_cur: pages * 4096 + (256 << 20), rlim_max: libc::RLIM_INFINITY };
        // SAFETY: setting our own limit.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) };
        let code = match invoke(&vm, &f.cases[0].inputs) {
            Err(e) if e.to_string().contains("out of memory") => 0,
            Err(e) => {
                eprintln!("{e}");
                2
            }
            Ok(_) => 3,
        };
        // SAFETY: leaving the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child died of signal {}", libc::WTERMSIG(status));
    assert_eq!(libc::WEXITSTATUS(status), 0, "the invocation did not fail with out of memory");
}

#[test]
fn a_loop_past_the_old_frame_limit_runs() {
    // The control fixture's loop runs `n` times, a frame per iteration as upstream's VM makes
    // them: past the 100,000 frames once refused, in linear time (a million runs in
    // c_tests/test_vm.c, on the release library); with zeros the sums stay 0.
    let f = load_vm_fixture(&fixtures_dir().join("vm/0.16/control"));
    let exe = load_one_file(&f.dir);
    let vm = make_vm(&exe, false);
    let x = Tensor { name: "x".into(), dtype: DLDataType::F32, shape: vec![4], data: vec![0; 16] };
    let n: i32 = if cfg!(debug_assertions) { 100_001 } else { 1_000_000 };
    let count =
        Tensor { name: "n".into(), dtype: DLDataType::new(0, 32, 1), shape: vec![], data: n.to_le_bytes().to_vec() };
    let result = invoke(&vm, &[x, count]).unwrap();
    let mut got = vec![];
    flatten(&result, &mut got);
    assert_eq!(got.len(), 3);
    assert!(got[1].to_vec().iter().all(|&b| b == 0), "{n} iterations");
    drop((got, result));
    // Every frame's storage came back to the pool: what stays busy is the three outputs the VM
    // keeps for get_output.
    let Ok(RetValue::Str(usage)) = call(&exe, "tvmrt.memory_usage", |_| {}) else { panic!("memory_usage") };
    assert!(usage.contains("\"busy_blocks\":3,"), "{usage}");
}

#[test]
fn a_tuple_a_million_deep_drops_on_a_small_stack() {
    tvm_runtime::init();
    let dropped = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let mut t = AdtObj::new(0, vec![]);
            for _ in 0..1_000_000 {
                t = AdtObj::new(
                    0,
                    vec![t.into_any(), NDArray::empty(&[1], DLDataType::F32, DLDevice::CPU).unwrap().into_any()],
                );
            }
            drop(t);
            // Closures over closures, and tuples inside closures, alike.
            let mut c = ClosureObj::new(0, vec![]);
            for k in 0..1_000_000 {
                let inner = if k % 2 == 0 { c.into_any() } else { AdtObj::new(0, vec![c.into_any()]).into_any() };
                c = ClosureObj::new(0, vec![inner]);
            }
            drop(c);
            true
        })
        .unwrap()
        .join();
    assert!(dropped.unwrap());
}
