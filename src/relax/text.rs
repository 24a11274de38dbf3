//! The executable described for people: `stats` (the constants and functions), `as_text` (the
//! instructions) and `as_python` (the same as builder calls).

#![forbid(unsafe_code)]

use super::code::{Arg, Instr, Reg};
use super::image::FuncKind;
use super::machine::Executable;
use std::fmt::Write;

pub fn stats(exe: &Executable) -> String {
    let mut s = String::from("Relax VM executable statistics:\n");
    let constants = exe.constants();
    let _ = writeln!(s, "  Constant pool (# {}): [", constants.len());
    for c in &constants {
        let _ = writeln!(s, "    {},", c.describe());
    }
    s.push_str("  ]\n");
    let names = |kind| exe.image.functions.iter().filter(move |f| f.kind == kind).map(|f| f.name.as_str());
    let relax: Vec<&str> = names(FuncKind::Bytecode).chain(names(FuncKind::CompiledTir)).collect();
    let packed: Vec<&str> = names(FuncKind::Packed).collect();
    let _ = writeln!(s, "  Globals (#{}): [{}]", relax.len(), relax.join(", "));
    let _ = writeln!(s, "  Packed functions (#{}): [{}]", packed.len(), packed.join(", "));
    s
}

fn reg(r: Reg) -> String {
    match r {
        Reg::Index(i) => format!("%{i}"),
        Reg::Void => "%void".into(),
        Reg::Vm => "%vm".into(),
    }
}

fn arg(exe: &Executable, a: &Arg) -> String {
    match a {
        Arg::Reg(r) => reg(*r),
        Arg::Imm(i) => format!("i{}", i.value),
        Arg::Const(c) => format!("c[{c}]"),
        Arg::Func(f) => format!("f[{}]", exe.image.functions[*f].name),
    }
}

pub fn as_text(exe: &Executable) -> String {
    let mut s = String::new();
    for f in &exe.image.functions {
        match f.kind {
            FuncKind::Packed => continue,
            FuncKind::CompiledTir => {
                let _ = writeln!(s, "@{} compiled to TIR", f.name);
                continue;
            }
            FuncKind::Bytecode => {}
        }
        let _ = writeln!(s, "@{}({}):", f.name, f.params.join(", "));
        for pc in f.start as usize..f.end as usize {
            let line = match &exe.code.instrs[pc] {
                Instr::Call { dst, func, args } => {
                    let args: Vec<String> = exe.code.args[args.clone()].iter().map(|a| arg(exe, a)).collect();
                    let dst = dst.map_or("%void".to_string(), |d| format!("%{d}"));
                    format!("call {:<14} in: {:<12} dst: {dst}", exe.image.functions[*func].name, args.join(", "))
                }
                Instr::Ret(r) => format!("ret {}", reg(*r)),
                Instr::Goto(to) => format!("goto {}", *to as i64 - pc as i64),
                Instr::If { cond, else_pc } => format!("If {}, {}", reg(*cond), *else_pc as i64 - pc as i64),
            };
            let _ = writeln!(s, "  {line}");
        }
        s.push('\n');
    }
    s
}

pub fn as_python(exe: &Executable) -> String {
    let mut s = String::from("ib = rx.Builder()\n");
    for f in &exe.image.functions {
        if f.kind != FuncKind::Bytecode {
            continue;
        }
        let params: Vec<String> = f.params.iter().map(|p| format!("\"{p}\"")).collect();
        let _ =
            writeln!(s, "with ib.function(\"{}\", num_inputs={}, params=[{}]):", f.name, f.num_args, params.join(", "));
        for pc in f.start as usize..f.end as usize {
            let line = match &exe.code.instrs[pc] {
                Instr::Call { dst, func, args } => {
                    let args: Vec<String> = exe.code.args[args.clone()].iter().map(|a| arg(exe, a)).collect();
                    let dst = dst.map_or(String::new(), |d| format!(", dst=ib.r({d})"));
                    format!("ib.emit_call(\"{}\", args=[{}]{dst})", exe.image.functions[*func].name, args.join(", "))
                }
                Instr::Ret(r) => format!("ib.emit_ret({})", reg(*r)),
                Instr::Goto(to) => format!("ib.emit_goto({})", *to as i64 - pc as i64),
                Instr::If { cond, else_pc } => format!("ib.emit_if({}, {})", reg(*cond), *else_pc as i64 - pc as i64),
            };
            let _ = writeln!(s, "    {line}");
        }
    }
    s
}

/// What the tool's `inspect` shows (`tvmrt.describe`, the key names the Relay VM's use).
pub fn describe(exe: &Executable, has_lib: bool) -> serde_json::Value {
    let relax = exe.image.functions.iter().filter(|f| f.kind != FuncKind::Packed);
    let kernels = exe
        .image
        .functions
        .iter()
        .filter(|f| f.kind == FuncKind::Packed && super::builtins::Builtin::by_name(&f.name).is_none());
    serde_json::json!({
        "version": exe.generation.tvm_versions(),
        "bytecode": format!("Relax VM executable, {}", exe.generation.describe()),
        "devices": [],
        "host_device": 0,
        "functions": relax.map(|f| {
            let inputs: Vec<serde_json::Value> = exe.by_name.get(&f.name).map(|&i| super::signature::params(exe, i)).unwrap_or_default().iter().map(|p| serde_json::json!({
                "name": p.name, "dtype": p.dtype.map(|d| d.to_string()), "shape": p.shape})).collect();
            serde_json::json!({
            "name": f.name, "params": f.params, "registers": f.registers, "inputs": inputs,
            "instructions": (f.end - f.start).max(0)})}).collect::<Vec<_>>(),
        "constants": exe.constants().len(),
        "constant_bytes": constant_bytes(exe),
        "constant_shapes": exe.constants().iter().map(|c| c.describe()).collect::<Vec<_>>(),
        "late_bound": [],
        "primitives": kernels.map(|f| f.name.as_str()).collect::<Vec<_>>(),
        "has_library": has_lib,
    })
}

/// What the executable and its VMs hold (`tvmrt.memory_usage`): its constants, and each
/// device's storage pool.
pub fn memory(exe: &Executable) -> serde_json::Value {
    serde_json::json!({"constants": constant_bytes(exe), "constants_on_devices": 0,
        "pools": crate::vm::text::pools(&exe.pools)})
}

/// The bytes of the executable's constant tensors.
fn constant_bytes(exe: &Executable) -> usize {
    use super::image::Constant;
    exe.constants().iter().map(|c| if let Constant::Tensor(t) = c { t.nbytes() } else { 0 }).sum()
}
