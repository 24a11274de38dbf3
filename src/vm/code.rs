//! A Relay VM executable's code as this runtime holds it: functions of typed instructions whose
//! every register, function, constant, primitive, device and jump was checked against the
//! executable when it was read, so the interpreter never indexes out of range.
//!
//! Three generations of the bytecode exist ([`Layout`]): TVM 0.8 (devices named by type, no
//! `KillRegister`), 0.9 to 0.13 (virtual devices by index), 0.14 to 0.19 (memory scopes, a device
//! index on `LoadConst`, a shape on `AllocStorage`). Each is read into the same instructions; the
//! fields each opcode has in each generation are written down in [`Instr::decode`] and
//! [`Instr::encode`], which are inverses.

#![forbid(unsafe_code)]

use crate::dlpack::DLDataType;
use crate::error::{Error, Result};

/// Which generation of the bytecode a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// TVM 0.8.
    V08,
    /// TVM 0.9 to 0.13.
    V09,
    /// TVM 0.14 to 0.19.
    V014,
}

impl Layout {
    /// The generation a compiler's version string names ("0.16.dev0", "0.8.0"), if it is one this
    /// runtime knows.
    pub fn of_version(version: &str) -> Option<Layout> {
        let mut parts = version.split(['.', '-', '+']);
        let major: u32 = parts.next()?.trim().parse().ok()?;
        let minor: u32 = parts.next()?.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
        match (major, minor) {
            (0, 8) => Some(Layout::V08),
            (0, 9..=13) => Some(Layout::V09),
            (0, 14..=19) => Some(Layout::V014),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Layout::V08 => "TVM 0.8",
            Layout::V09 => "TVM 0.9 to 0.13",
            Layout::V014 => "TVM 0.14 to 0.19",
        }
    }
}

/// A register of the current frame.
pub type Reg = usize;

/// One instruction, its operands checked (see [`Function::validate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instr {
    Move {
        from: Reg,
        dst: Reg,
    },
    Ret {
        result: Reg,
    },
    Invoke {
        func: usize,
        args: Box<[Reg]>,
        dst: Reg,
    },
    InvokeClosure {
        closure: Reg,
        args: Box<[Reg]>,
        dst: Reg,
    },
    /// `args` holds the inputs then the `outputs` outputs.
    InvokePacked {
        packed: usize,
        outputs: usize,
        args: Box<[Reg]>,
    },
    AllocTensor {
        storage: Reg,
        offset: Reg,
        dtype: DLDataType,
        shape: Box<[i64]>,
        dst: Reg,
    },
    AllocTensorReg {
        storage: Reg,
        offset: Reg,
        shape: Reg,
        dtype: DLDataType,
        dst: Reg,
    },
    AllocAdt {
        tag: i64,
        fields: Box<[Reg]>,
        dst: Reg,
    },
    AllocClosure {
        func: usize,
        free_vars: Box<[Reg]>,
        dst: Reg,
    },
    GetField {
        object: Reg,
        index: usize,
        dst: Reg,
    },
    /// Jumps by `on_equal` when the scalars in `test` and `target` are equal, else by `otherwise`.
    If {
        test: Reg,
        target: Reg,
        on_equal: i64,
        otherwise: i64,
    },
    /// `device` is the instruction's own field (0.14+); the constant's device decides where it goes.
    LoadConst {
        index: usize,
        device: usize,
        dst: Reg,
    },
    Goto {
        offset: i64,
    },
    GetTag {
        object: Reg,
        dst: Reg,
    },
    LoadConsti {
        value: i64,
        dst: Reg,
    },
    Fatal,
    /// `size` is a register holding the byte size, used when `shape` is empty; a non-empty
    /// `shape` (0.14+) sizes the storage by shape and `dtype_hint`.
    AllocStorage {
        size: Reg,
        alignment: i64,
        dtype_hint: DLDataType,
        device: usize,
        shape: Box<[i64]>,
        dst: Reg,
    },
    ShapeOf {
        tensor: Reg,
        dst: Reg,
    },
    ReshapeTensor {
        tensor: Reg,
        shape: Reg,
        dst: Reg,
    },
    DeviceCopy {
        src: Reg,
        from: usize,
        to: usize,
        dst: Reg,
    },
    KillRegister {
        dst: Reg,
    },
}

/// Opcodes as the bytecode numbers them.
pub mod op {
    pub const MOVE: i64 = 0;
    pub const RET: i64 = 1;
    pub const INVOKE: i64 = 2;
    pub const INVOKE_CLOSURE: i64 = 3;
    pub const INVOKE_PACKED: i64 = 4;
    pub const ALLOC_TENSOR: i64 = 5;
    pub const ALLOC_TENSOR_REG: i64 = 6;
    pub const ALLOC_ADT: i64 = 7;
    pub const ALLOC_CLOSURE: i64 = 8;
    pub const GET_FIELD: i64 = 9;
    pub const IF: i64 = 10;
    pub const LOAD_CONST: i64 = 11;
    pub const GOTO: i64 = 12;
    pub const GET_TAG: i64 = 13;
    pub const LOAD_CONSTI: i64 = 14;
    pub const FATAL: i64 = 15;
    pub const ALLOC_STORAGE: i64 = 16;
    pub const SHAPE_OF: i64 = 17;
    pub const RESHAPE_TENSOR: i64 = 18;
    pub const DEVICE_COPY: i64 = 19;
    pub const KILL_REGISTER: i64 = 20;
}

/// The device fields of 0.8 instructions are device types; the loader maps them to indices of
/// the devices it makes for such a file (and back when it writes one).
pub trait DeviceMap {
    fn index_of_type(&self, device_type: i64) -> Result<usize>;
    fn type_of_index(&self, index: usize) -> i64;
}

fn reg(v: i64) -> Result<Reg> {
    usize::try_from(v).map_err(|_| Error::value(format!("register {v} is negative")))
}

fn index(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::value(format!("{what} {v} is negative")))
}

fn regs(v: &[i64]) -> Result<Box<[Reg]>> {
    v.iter().map(|&r| reg(r)).collect()
}

fn dtype(code: i64, bits: i64, lanes: i64) -> Result<DLDataType> {
    match (u8::try_from(code), u8::try_from(bits), u16::try_from(lanes)) {
        (Ok(c), Ok(b), Ok(l)) if b > 0 && l > 0 => Ok(DLDataType::new(c, b, l)),
        _ => Err(Error::value(format!("invalid dtype (code {code}, bits {bits}, lanes {lanes})"))),
    }
}

/// `fields` has exactly `n` items, or `fixed` plus the count at `count_at` (a list at the end).
fn expect_len(fields: &[i64], fixed: usize, count_at: Option<usize>) -> Result<()> {
    let want = match count_at {
        Some(at) => {
            let n = fields.get(at).copied().ok_or_else(|| Error::value("too few fields"))?;
            fixed.checked_add(index(n, "a count")?).ok_or_else(|| Error::value("a count out of range"))?
        }
        None => fixed,
    };
    if fields.len() != want {
        return Err(Error::value(format!("{} fields, {want} expected", fields.len())));
    }
    Ok(())
}

impl Instr {
    /// Reads an instruction serialised as `opcode` and `fields` by a compiler of `layout`.
    pub fn decode(layout: Layout, opcode: i64, f: &[i64], devices: &dyn DeviceMap) -> Result<Instr> {
        let dev = |v: i64| if layout == Layout::V08 { devices.index_of_type(v) } else { index(v, "device index") };
        Ok(match opcode {
            op::MOVE => {
                expect_len(f, 2, None)?;
                Instr::Move { from: reg(f[0])?, dst: reg(f[1])? }
            }
            op::RET => {
                expect_len(f, 1, None)?;
                Instr::Ret { result: reg(f[0])? }
            }
            op::FATAL => {
                expect_len(f, 0, None)?;
                Instr::Fatal
            }
            op::INVOKE_PACKED => {
                expect_len(f, 3, Some(1))?;
                let outputs = index(f[2], "output count")?;
                if outputs > f.len() - 3 {
                    return Err(Error::value(format!("{outputs} outputs of {} arguments", f.len() - 3)));
                }
                Instr::InvokePacked { packed: index(f[0], "primitive")?, outputs, args: regs(&f[3..])? }
            }
            op::ALLOC_TENSOR => {
                expect_len(f, 7, Some(5))?;
                Instr::AllocTensor {
                    storage: reg(f[0])?,
                    offset: reg(f[1])?,
                    dtype: dtype(f[2], f[3], f[4])?,
                    dst: reg(f[6])?,
                    shape: f[7..].into(),
                }
            }
            op::ALLOC_TENSOR_REG => {
                expect_len(f, 7, None)?;
                Instr::AllocTensorReg {
                    storage: reg(f[0])?,
                    offset: reg(f[1])?,
                    shape: reg(f[2])?,
                    dtype: dtype(f[3], f[4], f[5])?,
                    dst: reg(f[6])?,
                }
            }
            op::ALLOC_ADT => {
                expect_len(f, 3, Some(1))?;
                Instr::AllocAdt { tag: f[0], dst: reg(f[2])?, fields: regs(&f[3..])? }
            }
            op::ALLOC_CLOSURE => {
                expect_len(f, 3, Some(1))?;
                Instr::AllocClosure { func: index(f[0], "function")?, dst: reg(f[2])?, free_vars: regs(&f[3..])? }
            }
            op::IF => {
                expect_len(f, 4, None)?;
                Instr::If { test: reg(f[0])?, target: reg(f[1])?, on_equal: f[2], otherwise: f[3] }
            }
            op::INVOKE => {
                expect_len(f, 3, Some(1))?;
                Instr::Invoke { func: index(f[0], "function")?, dst: reg(f[2])?, args: regs(&f[3..])? }
            }
            op::INVOKE_CLOSURE => {
                expect_len(f, 3, Some(1))?;
                Instr::InvokeClosure { closure: reg(f[0])?, dst: reg(f[2])?, args: regs(&f[3..])? }
            }
            op::LOAD_CONST if layout == Layout::V014 => {
                expect_len(f, 3, None)?;
                Instr::LoadConst { index: index(f[0], "constant")?, device: dev(f[1])?, dst: reg(f[2])? }
            }
            op::LOAD_CONST => {
                expect_len(f, 2, None)?;
                Instr::LoadConst { index: index(f[0], "constant")?, device: 0, dst: reg(f[1])? }
            }
            op::LOAD_CONSTI => {
                expect_len(f, 2, None)?;
                Instr::LoadConsti { value: f[0], dst: reg(f[1])? }
            }
            op::GET_FIELD => {
                expect_len(f, 3, None)?;
                Instr::GetField { object: reg(f[0])?, index: index(f[1], "field")?, dst: reg(f[2])? }
            }
            op::GET_TAG => {
                expect_len(f, 2, None)?;
                Instr::GetTag { object: reg(f[0])?, dst: reg(f[1])? }
            }
            op::GOTO => {
                expect_len(f, 1, None)?;
                Instr::Goto { offset: f[0] }
            }
            op::ALLOC_STORAGE => {
                let (shape, dst): (Box<[i64]>, Reg) = if layout == Layout::V014 {
                    expect_len(f, 8, Some(6))?;
                    (f[8..].into(), reg(f[7])?)
                } else {
                    expect_len(f, 7, None)?;
                    (Box::default(), reg(f[6])?)
                };
                // With a shape the size field is not read (compilers leave anything there).
                let size = if shape.is_empty() { reg(f[0])? } else { 0 };
                Instr::AllocStorage {
                    size,
                    alignment: f[1],
                    dtype_hint: dtype(f[2], f[3], f[4])?,
                    device: dev(f[5])?,
                    shape,
                    dst,
                }
            }
            op::SHAPE_OF => {
                expect_len(f, 2, None)?;
                Instr::ShapeOf { tensor: reg(f[0])?, dst: reg(f[1])? }
            }
            op::RESHAPE_TENSOR => {
                expect_len(f, 3, None)?;
                Instr::ReshapeTensor { tensor: reg(f[0])?, shape: reg(f[1])?, dst: reg(f[2])? }
            }
            op::DEVICE_COPY => {
                expect_len(f, 4, None)?;
                Instr::DeviceCopy { src: reg(f[0])?, from: dev(f[1])?, to: dev(f[2])?, dst: reg(f[3])? }
            }
            op::KILL_REGISTER if layout != Layout::V08 => {
                expect_len(f, 1, None)?;
                Instr::KillRegister { dst: reg(f[0])? }
            }
            other => return Err(Error::value(format!("unknown opcode {other} (in {} bytecode)", layout.describe()))),
        })
    }

    /// The opcode and fields `layout`'s compiler writes for this instruction.
    pub fn encode(&self, layout: Layout, devices: &dyn DeviceMap) -> (i64, Vec<i64>) {
        let dev = |i: usize| if layout == Layout::V08 { devices.type_of_index(i) } else { i as i64 };
        let r = |r: &Reg| *r as i64;
        let dt = |t: &DLDataType| [i64::from(t.code), i64::from(t.bits), i64::from(t.lanes)];
        let list = |head: Vec<i64>, tail: &[Reg]| head.into_iter().chain(tail.iter().map(r)).collect::<Vec<_>>();
        match self {
            Instr::Move { from, dst } => (op::MOVE, vec![r(from), r(dst)]),
            Instr::Ret { result } => (op::RET, vec![r(result)]),
            Instr::Fatal => (op::FATAL, vec![]),
            Instr::InvokePacked { packed, outputs, args } => {
                (op::INVOKE_PACKED, list(vec![*packed as i64, args.len() as i64, *outputs as i64], args))
            }
            Instr::AllocTensor { storage, offset, dtype, shape, dst } => {
                let mut f = vec![r(storage), r(offset)];
                f.extend(dt(dtype));
                f.extend([shape.len() as i64, r(dst)]);
                f.extend(shape.iter());
                (op::ALLOC_TENSOR, f)
            }
            Instr::AllocTensorReg { storage, offset, shape, dtype, dst } => {
                let mut f = vec![r(storage), r(offset), r(shape)];
                f.extend(dt(dtype));
                f.push(r(dst));
                (op::ALLOC_TENSOR_REG, f)
            }
            Instr::AllocAdt { tag, fields, dst } => {
                (op::ALLOC_ADT, list(vec![*tag, fields.len() as i64, r(dst)], fields))
            }
            Instr::AllocClosure { func, free_vars, dst } => {
                (op::ALLOC_CLOSURE, list(vec![*func as i64, free_vars.len() as i64, r(dst)], free_vars))
            }
            Instr::If { test, target, on_equal, otherwise } => {
                (op::IF, vec![r(test), r(target), *on_equal, *otherwise])
            }
            Instr::Invoke { func, args, dst } => {
                (op::INVOKE, list(vec![*func as i64, args.len() as i64, r(dst)], args))
            }
            Instr::InvokeClosure { closure, args, dst } => {
                (op::INVOKE_CLOSURE, list(vec![r(closure), args.len() as i64, r(dst)], args))
            }
            Instr::LoadConst { index, device, dst } => match layout {
                Layout::V014 => (op::LOAD_CONST, vec![*index as i64, dev(*device), r(dst)]),
                _ => (op::LOAD_CONST, vec![*index as i64, r(dst)]),
            },
            Instr::LoadConsti { value, dst } => (op::LOAD_CONSTI, vec![*value, r(dst)]),
            Instr::GetField { object, index, dst } => (op::GET_FIELD, vec![r(object), *index as i64, r(dst)]),
            Instr::GetTag { object, dst } => (op::GET_TAG, vec![r(object), r(dst)]),
            Instr::Goto { offset } => (op::GOTO, vec![*offset]),
            Instr::AllocStorage { size, alignment, dtype_hint, device, shape, dst } => {
                let mut f = vec![r(size), *alignment];
                f.extend(dt(dtype_hint));
                f.push(dev(*device));
                if layout == Layout::V014 {
                    f.extend([shape.len() as i64, r(dst)]);
                    f.extend(shape.iter());
                } else {
                    f.push(r(dst));
                }
                (op::ALLOC_STORAGE, f)
            }
            Instr::ShapeOf { tensor, dst } => (op::SHAPE_OF, vec![r(tensor), r(dst)]),
            Instr::ReshapeTensor { tensor, shape, dst } => (op::RESHAPE_TENSOR, vec![r(tensor), r(shape), r(dst)]),
            Instr::DeviceCopy { src, from, to, dst } => (op::DEVICE_COPY, vec![r(src), dev(*from), dev(*to), r(dst)]),
            Instr::KillRegister { dst } => (op::KILL_REGISTER, vec![r(dst)]),
        }
    }

    /// Every register the instruction reads or writes.
    fn registers(&self) -> Vec<Reg> {
        match self {
            Instr::Move { from, dst } => vec![*from, *dst],
            Instr::Ret { result } => vec![*result],
            Instr::Invoke { args, dst, .. } => args.iter().copied().chain([*dst]).collect(),
            Instr::InvokeClosure { closure, args, dst } => args.iter().copied().chain([*closure, *dst]).collect(),
            Instr::InvokePacked { args, .. } => args.to_vec(),
            Instr::AllocTensor { storage, offset, dst, .. } => vec![*storage, *offset, *dst],
            Instr::AllocTensorReg { storage, offset, shape, dst, .. } => vec![*storage, *offset, *shape, *dst],
            Instr::AllocAdt { fields, dst, .. } => fields.iter().copied().chain([*dst]).collect(),
            Instr::AllocClosure { free_vars, dst, .. } => free_vars.iter().copied().chain([*dst]).collect(),
            Instr::GetField { object, dst, .. } | Instr::GetTag { object, dst } => vec![*object, *dst],
            Instr::If { test, target, .. } => vec![*test, *target],
            Instr::LoadConst { dst, .. } | Instr::LoadConsti { dst, .. } | Instr::KillRegister { dst } => vec![*dst],
            Instr::Goto { .. } | Instr::Fatal => vec![],
            Instr::AllocStorage { size, shape, dst, .. } => {
                if shape.is_empty() {
                    vec![*size, *dst]
                } else {
                    // The size field is not read when a shape sizes the storage (compilers leave
                    // anything there).
                    vec![*dst]
                }
            }
            Instr::ShapeOf { tensor, dst } => vec![*tensor, *dst],
            Instr::ReshapeTensor { tensor, shape, dst } => vec![*tensor, *shape, *dst],
            Instr::DeviceCopy { src, dst, .. } => vec![*src, *dst],
        }
    }
}

/// A function of the executable.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub params: Vec<String>,
    /// The device index of each parameter.
    pub param_devices: Vec<usize>,
    pub registers: usize,
    pub code: Vec<Instr>,
}

/// How many of each kind an executable has: what instructions may name.
pub struct Bounds {
    pub functions: usize,
    pub constants: usize,
    pub primitives: usize,
    pub devices: usize,
}

/// The register files a frame may have: beyond it a file is refused (it would be allocated at
/// every call).
pub const MAX_REGISTERS: usize = 1 << 20;

impl Function {
    /// Checks that every operand of every instruction is in range for this function and `b`, and
    /// that every jump lands on an instruction.
    pub fn validate(&self, b: &Bounds) -> Result<()> {
        let here =
            |pc: usize, what: String| Error::value(format!("function '{}', instruction {pc}: {what}", self.name));
        if self.registers > MAX_REGISTERS {
            return Err(Error::value(format!(
                "function '{}' asks for {} registers (at most {MAX_REGISTERS})",
                self.name, self.registers
            )));
        }
        if self.params.len() > self.registers {
            return Err(Error::value(format!(
                "function '{}' has {} parameters and only {} registers",
                self.name,
                self.params.len(),
                self.registers
            )));
        }
        if self.param_devices.len() != self.params.len() {
            return Err(Error::value(format!(
                "function '{}': {} parameter devices for {} parameters",
                self.name,
                self.param_devices.len(),
                self.params.len()
            )));
        }
        if let Some(d) = self.param_devices.iter().find(|&&d| d >= b.devices) {
            return Err(Error::value(format!("function '{}': parameter device {d} of {}", self.name, b.devices)));
        }
        let n = self.code.len();
        for (pc, ins) in self.code.iter().enumerate() {
            if let Some(r) = ins.registers().into_iter().find(|&r| r >= self.registers) {
                return Err(here(pc, format!("register {r} of {}", self.registers)));
            }
            let jump = |offset: i64| {
                let to = pc as i64 + offset;
                if offset == 0 || to < 0 || to >= n as i64 {
                    Err(here(pc, format!("a jump by {offset} lands outside the function's {n} instructions")))
                } else {
                    Ok(())
                }
            };
            let check = |what: &str, i: usize, of: usize| {
                if i >= of {
                    Err(here(pc, format!("{what} {i} of {of}")))
                } else {
                    Ok(())
                }
            };
            match ins {
                Instr::Invoke { func, .. } | Instr::AllocClosure { func, .. } => check("function", *func, b.functions)?,
                Instr::InvokePacked { packed, .. } => check("primitive", *packed, b.primitives)?,
                Instr::LoadConst { index, device, .. } => {
                    check("constant", *index, b.constants)?;
                    check("device", *device, b.devices)?;
                }
                Instr::AllocStorage { device, shape, .. } => {
                    check("device", *device, b.devices)?;
                    if shape.iter().any(|&d| d < 0) {
                        return Err(here(pc, format!("a storage of negative shape {shape:?}")));
                    }
                }
                Instr::AllocTensor { shape, .. } if shape.iter().any(|&d| d < 0) => {
                    return Err(here(pc, format!("a tensor of negative shape {shape:?}")));
                }
                Instr::DeviceCopy { from, to, .. } => {
                    check("device", *from, b.devices)?;
                    check("device", *to, b.devices)?;
                }
                Instr::If { on_equal, otherwise, .. } => {
                    jump(*on_equal)?;
                    jump(*otherwise)?;
                }
                Instr::Goto { offset } => jump(*offset)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The hash the bytecode stores before each instruction, over its opcode and fields.
pub fn instruction_hash(opcode: i64, fields: &[i64]) -> i64 {
    let mut key = opcode as u64;
    for &v in fields {
        key ^= (v as u64).wrapping_add(0x9e37_79b9).wrapping_add(key << 6).wrapping_add(key >> 2);
    }
    key as i64
}
