//! A Relax function's signature, read off its own checks: the compiler begins every function
//! with `check_tensor_info(param, ndim, dtype)` and `match_shape(param, heap, ndim, code, value,
//! ...)` for each tensor parameter, so the code says each one's dtype, rank and fixed
//! dimensions (a dimension stored to or compared with the shape heap is symbolic: -1).

#![forbid(unsafe_code)]

use super::builtins::Builtin;
use super::code::{Arg, Instr, Reg};
use super::image::{Constant, FuncKind, Generation};
use super::machine::Executable;
use super::value::{CLASSIC_BOOL, FFI_BOOL};
use crate::dlpack::DLDataType;

/// What the checks say of one parameter: its dtype (when checked) and dims (-1: symbolic), when
/// it is a tensor whose rank is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub dtype: Option<DLDataType>,
    pub shape: Option<Vec<i64>>,
}

/// The parameters of bytecode function `func`, as its checks describe them.
pub fn params(exe: &Executable, func: usize) -> Vec<ParamInfo> {
    let f = &exe.image.functions[func];
    let n = f.num_args.max(0) as usize;
    let mut out: Vec<ParamInfo> = (0..n)
        .map(|i| ParamInfo {
            name: f.params.get(i).cloned().unwrap_or_else(|| format!("arg{i}")),
            ..Default::default()
        })
        .collect();
    if f.kind != FuncKind::Bytecode {
        return out;
    }
    let builtin = |callee: usize| {
        let g = &exe.image.functions[callee];
        (g.kind == FuncKind::Packed).then(|| Builtin::by_name(&g.name)).flatten()
    };
    let param = |a: Option<&Arg>| match a {
        Some(Arg::Reg(Reg::Index(r))) if *r < n => Some(*r),
        _ => None,
    };
    let constants = exe.constants();
    let imm = |a: Option<&Arg>| match a {
        Some(Arg::Imm(v)) => Some(v.value),
        Some(Arg::Const(c)) => match constants.get(*c) {
            Some(Constant::Int(v)) => Some(*v),
            _ => None,
        },
        _ => None,
    };
    let dtype = |a: Option<&Arg>| match a {
        Some(Arg::Const(c)) => match constants.get(*c) {
            Some(Constant::DataType(d)) => Some(*d),
            Some(Constant::Str(s)) => s.parse().ok(),
            _ => None,
        },
        _ => None,
    };
    for pc in f.start as usize..f.end as usize {
        let Instr::Call { func: callee, args, .. } = &exe.code.instrs[pc] else { continue };
        let args = &exe.code.args[args.clone()];
        match builtin(*callee) {
            Some(Builtin::CheckTensorInfo) => {
                let Some(p) = param(args.first()) else { continue };
                if let Some(ndim) = imm(args.get(1)).filter(|&d| d >= 0) {
                    out[p].shape.get_or_insert_with(|| vec![-1; ndim as usize]);
                }
                if args.len() == 4 {
                    out[p].dtype = dtype(args.get(2)).map(|d| {
                        // Booleans as classic hosts see them.
                        if exe.generation == Generation::Ffi && d == FFI_BOOL {
                            CLASSIC_BOOL
                        } else {
                            d
                        }
                    });
                }
            }
            Some(Builtin::MatchShape) => {
                let Some(p) = param(args.first()) else { continue };
                let Some(ndim) = imm(args.get(2)).filter(|&d| d >= 0) else { continue };
                let dims = (0..ndim as usize)
                    .map(|i| match (imm(args.get(3 + 2 * i)), imm(args.get(4 + 2 * i))) {
                        (Some(0), Some(v)) => v, // equal to an immediate: fixed
                        _ => -1,
                    })
                    .collect();
                out[p].shape = Some(dims);
            }
            _ => {}
        }
    }
    out
}
