//! The instructions, decoded once at load with every operand checked: registers within their
//! function's register file, constants and functions within their tables, jumps within their
//! function. The interpreter then indexes without checks of its own.
//!
//! Four opcodes: Call (dst, function, argument count, arguments: an 8-bit kind and a 56-bit
//! signed value each), Ret, Goto (a relative jump), If (a register and the relative jump taken
//! when it is zero). Jumps go forward only, so a function's body always ends.

#![forbid(unsafe_code)]

use super::image::{FuncInfo, FuncKind, Image};
use crate::error::{Error, Result};
use std::ops::Range;

/// Registers from 2^54 are special: `%void` (no destination; reads as None) and `%vm` (the
/// machine itself, the first argument of builtins that allocate).
const SPECIAL_BEGIN: i64 = 1 << 54;
const VOID: i64 = SPECIAL_BEGIN;
const VM: i64 = SPECIAL_BEGIN + 1;
const VALUE_BITS: u32 = 56;
/// More registers than any function has; a corrupt count is refused before a call sizes a frame.
const MAX_REGISTERS: i64 = 1 << 20;

/// A register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    Index(usize),
    Void,
    Vm,
}

/// A call argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    Reg(Reg),
    Imm(Imm),
    Const(usize),
    Func(usize),
}

/// An immediate argument: its value, and its place in [`Code::ints`] (where the VM finds it as
/// a value it can lend to a call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm {
    pub value: i64,
    pub slot: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instr {
    /// `dst = functions[func](args...)`; `dst` None for `%void`.
    Call {
        dst: Option<usize>,
        func: usize,
        args: Range<usize>,
    },
    Ret(Reg),
    Goto(usize),
    /// Falls through when the register is non-zero, else jumps to `else_pc`.
    If {
        cond: Reg,
        else_pc: usize,
    },
}

/// Where the VM finds a call's argument: a register of the frame, or a value fixed for the
/// whole executable, by its place in the VM's table of them: `%void`, `%vm`, the constants, the
/// function-table entries, then the immediates by slot (see [`Code::fixed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Reg(usize),
    Fixed(usize),
}

/// The decoded code of an executable: instructions by their global index, arguments in one list.
#[derive(Debug, Default)]
pub struct Code {
    pub instrs: Vec<Instr>,
    pub args: Vec<Arg>,
    /// Each of `args` as the VM finds it.
    pub operands: Vec<Operand>,
    /// Every distinct immediate, by its slot.
    pub ints: Vec<i64>,
}

/// The places of `%void` and `%vm` in the table of fixed values.
pub(crate) const FIXED_VOID: usize = 0;
pub(crate) const FIXED_VM: usize = 1;

impl Code {
    /// The table of fixed values an [`Operand::Fixed`] indexes, from the values of `constants`
    /// and of `functions` (the function-table entries) and `void`, `vm` and `int` to make them.
    pub fn fixed<V>(
        &self,
        constants: impl IntoIterator<Item = V>,
        functions: impl IntoIterator<Item = V>,
        void: V,
        vm: V,
        int: impl Fn(i64) -> V,
    ) -> Vec<V> {
        let mut table = vec![void, vm];
        table.extend(constants);
        table.extend(functions);
        table.extend(self.ints.iter().map(|&i| int(i)));
        table
    }
}

struct Decoder<'a> {
    image: &'a Image,
    code: Code,
    slots: std::collections::HashMap<i64, usize>,
}

impl Decoder<'_> {
    fn word(&self, at: i64) -> Result<i64> {
        usize::try_from(at)
            .ok()
            .and_then(|i| self.image.words.get(i).copied())
            .ok_or_else(|| Error::value(format!("code word {at} is past the {} words", self.image.words.len())))
    }

    fn reg(&self, value: i64, f: &FuncInfo) -> Result<Reg> {
        match value {
            VOID => Ok(Reg::Void),
            VM => Ok(Reg::Vm),
            r if (0..f.registers).contains(&r) => Ok(Reg::Index(r as usize)),
            r => Err(Error::value(format!("register {r} outside the function's {} registers", f.registers))),
        }
    }

    fn arg(&mut self, word: i64, f: &FuncInfo) -> Result<Arg> {
        let kind = (word as u64 >> VALUE_BITS) as u8;
        // The value is the low 56 bits, sign-extended.
        let value = (word << 8) >> 8;
        let index = |what: &str, n: usize| {
            usize::try_from(value)
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| Error::value(format!("{what} {value} outside the table of {n}")))
        };
        Ok(match kind {
            0 => Arg::Reg(self.reg(value, f)?),
            1 => {
                let ints = &mut self.code.ints;
                let slot = *self.slots.entry(value).or_insert_with(|| {
                    ints.push(value);
                    ints.len() - 1
                });
                Arg::Imm(Imm { value, slot })
            }
            2 => Arg::Const(index("constant", self.image.constants.len())?),
            3 => Arg::Func(index("function", self.image.functions.len())?),
            k => return Err(Error::value(format!("argument kind {k}"))),
        })
    }

    /// The instruction at global index `pc`, of function `f` (whose instructions are `span`).
    fn instr(&mut self, pc: usize, f: &FuncInfo, span: &Range<usize>) -> Result<Instr> {
        let at = self.image.instr_offsets[pc];
        // Relax has no loops (repetition is recursion): its jumps only go forward, so a jump
        // backwards (a damaged offset) is refused rather than left to spin for ever.
        let jump = |offset: i64| {
            let target = (pc as i64).checked_add(offset).filter(|_| offset > 0);
            target
                .and_then(|t| usize::try_from(t).ok())
                .filter(|t| span.contains(t))
                .ok_or_else(|| Error::value(format!("jump by {offset} leaves the function")))
        };
        Ok(match self.word(at)? {
            1 => {
                let dst = match self.reg(self.word(at + 1)?, f)? {
                    Reg::Index(r) => Some(r),
                    Reg::Void => None,
                    Reg::Vm => return Err(Error::value("a call writes %vm")),
                };
                let func = self.word(at + 2)?;
                let func = usize::try_from(func)
                    .ok()
                    .filter(|&i| i < self.image.functions.len())
                    .ok_or_else(|| Error::value(format!("call of function {func}, past the table")))?;
                let n = self.word(at + 3)?;
                if !(0..=i64::from(u16::MAX)).contains(&n) {
                    return Err(Error::value(format!("call with {n} arguments")));
                }
                let first = self.code.args.len();
                for i in 0..n {
                    let a = self.arg(self.word(at + 4 + i)?, f).map_err(|e| e.context(format!("argument {i}")))?;
                    self.code.args.push(a);
                }
                Instr::Call { dst, func, args: first..self.code.args.len() }
            }
            2 => Instr::Ret(self.reg(self.word(at + 1)?, f)?),
            3 => Instr::Goto(jump(self.word(at + 1)?)?),
            4 => {
                let cond = self.reg(self.word(at + 1)?, f)?;
                Instr::If { cond, else_pc: jump(self.word(at + 2)?)? }
            }
            op => return Err(Error::value(format!("opcode {op}"))),
        })
    }
}

/// The instructions of every bytecode function of `image`, checked.
pub fn decode(image: &Image) -> Result<Code> {
    let n = image.instr_offsets.len();
    let mut d = Decoder { image, code: Code::default(), slots: Default::default() };
    // Instructions no function owns stay `Ret(Void)`: never reached, as no jump leaves a function.
    d.code.instrs = vec![Instr::Ret(Reg::Void); n];
    let mut owner: Vec<Option<usize>> = vec![None; n];
    for (fi, f) in image.functions.iter().enumerate() {
        let ctx = |e: Error| e.context(format!("function '{}'", f.name));
        // (Packed entries say -1 or -2 arguments: variadic.)
        if f.kind != FuncKind::Bytecode {
            continue;
        }
        if f.num_args < 0 || f.num_args > f.registers || f.registers > MAX_REGISTERS {
            return Err(ctx(Error::value(format!("{} arguments in {} registers", f.num_args, f.registers))));
        }
        let span = usize::try_from(f.start)
            .ok()
            .zip(usize::try_from(f.end).ok())
            .filter(|&(s, e)| s < e && e <= n)
            .map(|(s, e)| s..e)
            .ok_or_else(|| ctx(Error::value(format!("instructions {}..{} of {n}", f.start, f.end))))?;
        for pc in span.clone() {
            if let Some(other) = owner[pc] {
                let other = &image.functions[other].name;
                return Err(ctx(Error::value(format!("instruction {pc} also belongs to '{other}'"))));
            }
            owner[pc] = Some(fi);
            d.code.instrs[pc] = d.instr(pc, f, &span).map_err(|e| ctx(e.context(format!("instruction {pc}"))))?;
        }
        // The last instruction must not fall through past the function.
        if !matches!(d.code.instrs[span.end - 1], Instr::Ret(_) | Instr::Goto(_)) {
            return Err(ctx(Error::value("the last instruction falls through past the function")));
        }
    }
    let (constants, functions) = (image.constants.len(), image.functions.len());
    d.code.operands = d
        .code
        .args
        .iter()
        .map(|a| match *a {
            Arg::Reg(Reg::Index(i)) => Operand::Reg(i),
            Arg::Reg(Reg::Void) => Operand::Fixed(FIXED_VOID),
            Arg::Reg(Reg::Vm) => Operand::Fixed(FIXED_VM),
            Arg::Const(c) => Operand::Fixed(2 + c),
            Arg::Func(g) => Operand::Fixed(2 + constants + g),
            Arg::Imm(i) => Operand::Fixed(2 + constants + functions + i.slot),
        })
        .collect();
    Ok(d.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relax::image::{FuncInfo, MAGIC_V1};

    /// One function of two instructions: a Goto by `offset`, then `ret %void`.
    fn goto_then_ret(offset: i64) -> Image {
        let main = FuncInfo {
            kind: FuncKind::Bytecode,
            name: "main".into(),
            start: 0,
            end: 2,
            num_args: 0,
            registers: 1,
            params: vec![],
        };
        Image {
            magic: MAGIC_V1,
            functions: vec![main],
            scopes: vec![],
            constants: vec![],
            instr_offsets: vec![0, 2],
            words: vec![3, offset, 2, VOID],
        }
    }

    #[test]
    fn jumps_go_forward_only() {
        assert!(decode(&goto_then_ret(1)).is_ok());
        // A jump to itself would spin for ever; one backwards too.
        for offset in [0, -1, 2] {
            let e = decode(&goto_then_ret(offset)).unwrap_err().to_string();
            assert!(e.contains("leaves the function"), "{offset}: {e}");
        }
    }
}
