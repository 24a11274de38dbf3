//! Structure-aware mutation of every VM fixture (TVM 0.8, 0.9, 0.16 and 0.19): each mutant changes
//! one field of the bytecode as read (a register, a constant index or a constant's tensor, an
//! immediate, an offset, a shape or dtype, an alignment, an output count, a jump, a count of
//! registers, an instruction replaced, dropped or repeated), is written back, loaded beside the
//! fixture's kernels and run on the fixture's first case. Each is refused, fails with an error or
//! answers: a crash ends the test process, and fails it.
//!
//! `TVMRT_VM_MUTANTS=N` runs N mutants per fixture (default 150; the count in BENCHMARKS.md came
//! from a longer run of this test).

mod common;

use common::vm::*;
use common::*;
use tvm_runtime::dlpack::DLDataType;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::tensor::NDArray;
use tvm_runtime::vm::code::{Instr, Reg};
use tvm_runtime::vm::image::{Constant, Image};

/// xorshift64*: mutants that are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

const VALUES: [i64; 12] = [0, 1, -1, 2, 3, 4, 7, 16, 63, 64, 1 << 20, i64::MIN];
const DIMS: [i64; 9] = [0, 1, 2, 3, 5, 16, -1, 1 << 16, 1 << 40];

fn dtype(rng: &mut Rng) -> DLDataType {
    DLDataType::new(rng.pick(&[0u8, 1, 2, 4]), rng.pick(&[1u8, 8, 16, 32, 64]), 1)
}

/// The register operands of an instruction, to overwrite.
fn registers(i: &mut Instr) -> Vec<&mut Reg> {
    match i {
        Instr::Move { from, dst } => vec![from, dst],
        Instr::Ret { result } => vec![result],
        Instr::Invoke { args, dst, .. } => args.iter_mut().chain(std::iter::once(dst)).collect(),
        Instr::InvokeClosure { closure, args, dst } => {
            std::iter::once(closure).chain(args.iter_mut()).chain(std::iter::once(dst)).collect()
        }
        Instr::InvokePacked { args, .. } => args.iter_mut().collect(),
        Instr::AllocTensor { storage, offset, dst, .. } => vec![storage, offset, dst],
        Instr::AllocTensorReg { storage, offset, shape, dst, .. } => vec![storage, offset, shape, dst],
        Instr::AllocAdt { fields, dst, .. } | Instr::AllocClosure { free_vars: fields, dst, .. } => {
            fields.iter_mut().chain(std::iter::once(dst)).collect()
        }
        Instr::GetField { object, dst, .. } | Instr::GetTag { object, dst } => vec![object, dst],
        Instr::If { test, target, .. } => vec![test, target],
        Instr::LoadConst { dst, .. } | Instr::LoadConsti { dst, .. } | Instr::KillRegister { dst } => vec![dst],
        Instr::AllocStorage { size, dst, .. } => vec![size, dst],
        Instr::ShapeOf { tensor, dst } => vec![tensor, dst],
        Instr::ReshapeTensor { tensor, shape, dst } => vec![tensor, shape, dst],
        Instr::DeviceCopy { src, dst, .. } => vec![src, dst],
        Instr::Goto { .. } | Instr::Fatal => vec![],
    }
}

/// Changes a field of `i` other than its registers, when it has one; says what changed.
fn field(i: &mut Instr, rng: &mut Rng, len: usize, pc: usize, constants: usize) -> Option<&'static str> {
    let jump = |rng: &mut Rng| 1 + rng.below(len - pc) as i64;
    match i {
        Instr::LoadConsti { value, .. } => *value = rng.pick(&VALUES),
        Instr::LoadConst { index, .. } => *index = rng.below(constants),
        Instr::AllocTensor { shape, dtype: dt, .. } => {
            if shape.is_empty() || rng.below(3) == 0 {
                *dt = dtype(rng);
            } else {
                let at = rng.below(shape.len());
                shape[at] = rng.pick(&DIMS);
            }
        }
        Instr::AllocTensorReg { dtype: dt, .. } => *dt = dtype(rng),
        Instr::AllocStorage { alignment, dtype_hint, shape, .. } => match rng.below(3) {
            0 => *alignment = rng.pick(&[0, 1, 4, 32, 64, 128, -64]),
            1 => *dtype_hint = dtype(rng),
            _ if !shape.is_empty() => {
                let at = rng.below(shape.len());
                shape[at] = rng.pick(&DIMS);
            }
            _ => return None,
        },
        Instr::InvokePacked { outputs, args, .. } => *outputs = rng.below(args.len() + 2),
        // Forward only: the compiler never jumps back (loops are recursion), and a backward jump
        // makes a loop no runtime can end (a hang, as on upstream's, not a crash).
        Instr::If { on_equal, otherwise, .. } => {
            if rng.below(2) == 0 {
                *on_equal = jump(rng);
            } else {
                *otherwise = jump(rng);
            }
        }
        Instr::Goto { offset } => *offset = jump(rng),
        Instr::GetField { index, .. } => *index = rng.below(4),
        Instr::AllocAdt { tag, .. } => *tag = rng.pick(&VALUES),
        _ => return None,
    }
    Some("field")
}

/// One mutation of `image`, described.
fn mutate(image: &mut Image, rng: &mut Rng) -> String {
    let f = rng.below(image.functions.len());
    let func = &mut image.functions[f];
    let (len, registers_of) = (func.code.len(), func.registers);
    let pc = rng.below(len);
    match rng.below(8) {
        0 | 1 => {
            let mut regs = registers(&mut func.code[pc]);
            if regs.is_empty() {
                return "nothing".into();
            }
            let k = rng.below(regs.len());
            *regs[k] = rng.below(registers_of);
            format!("function {f} instruction {pc}: a register")
        }
        2 | 3 => {
            let constants = image.constants.len();
            match field(&mut image.functions[f].code[pc], rng, len, pc, constants) {
                Some(_) => format!("function {f} instruction {pc}: a field"),
                None => "nothing".into(),
            }
        }
        4 => {
            let from = rng.below(len);
            func.code[pc] = func.code[from].clone();
            format!("function {f}: instruction {from} over {pc}")
        }
        5 => {
            if rng.below(2) == 0 {
                func.code.remove(pc);
                format!("function {f}: instruction {pc} dropped")
            } else {
                let again = func.code[pc].clone();
                func.code.insert(pc, again);
                format!("function {f}: instruction {pc} repeated")
            }
        }
        6 => {
            func.registers = rng.pick(&[0, 1, func.params.len(), registers_of / 2, registers_of + 1]);
            format!("function {f}: {} registers", func.registers)
        }
        _ => {
            if image.constants.is_empty() {
                return "nothing".into();
            }
            let k = rng.below(image.constants.len());
            let shape: Vec<i64> = (0..rng.below(4)).map(|_| rng.pick(&[0, 1, 2, 3, 8, 16])).collect();
            let dt = DLDataType::new(rng.pick(&[0u8, 2]), rng.pick(&[32u8, 64]), 1);
            match NDArray::empty(&shape, dt, tvm_runtime::dlpack::DLDevice::CPU) {
                Ok(t) => image.constants[k] = Constant::Tensor(t),
                Err(_) => return "nothing".into(),
            }
            format!("constant {k}: {dt} {shape:?}")
        }
    }
}

#[test]
fn mutated_executables_are_refused_fail_or_answer() {
    // Recursions that never end (an Invoke pointed back at its function) stop at 16 MiB of
    // frames here instead of the default's half a gigabyte: the same error, sooner. Set before
    // the first invocation reads it; the only test of this binary.
    std::env::set_var("TVM_RT_VM_STACK_MB", "16");
    let per_fixture: usize = std::env::var("TVMRT_VM_MUTANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut loaded, mut ran, mut answered) = (0, 0, 0);
    for f in vm_fixtures() {
        let module = load_one_file(&f.dir);
        let kernels: ObjRef<Module> =
            module.imports().into_iter().next().expect("the kernels are the executable's import");
        let bytes = tvm_runtime::vm::executable_of(&module).unwrap().save();
        for _ in 0..per_fixture {
            let mut image = tvm_runtime::vm::image::read(&bytes).unwrap();
            let what = mutate(&mut image, &mut rng);
            let code = tvm_runtime::vm::image::write(&image);
            // A crash names the mutant it came from.
            if std::env::var_os("TVMRT_VM_MUTANT_TRACE").is_some() {
                eprintln!("{}: {what}", f.dir.display());
            }
            let Ok(exe) = tvm_runtime::vm::load_executable(&code, Some(kernels.clone())) else { continue };
            loaded += 1;
            let vm: ObjRef<Module> = match call(&exe, "vm_load_executable", |_| {}) {
                Ok(v) => v.into_object().unwrap(),
                Err(_) => continue,
            };
            if call(&vm, "init", |a| {
                a.int(1).int(0).int(2);
            })
            .is_err()
            {
                continue;
            }
            ran += 1;
            if invoke(&vm, &f.cases[0].inputs).is_ok() {
                answered += 1;
            }
        }
    }
    eprintln!("mutants: {loaded} loaded, {ran} ran, {answered} answered");
    assert!(ran > 0 && answered > 0, "{loaded} loaded, {ran} ran, {answered} answered");
}
