//! The executable's reports: upstream's texts (`get_bytecode`, `get_constants`, `get_stats`, ...)
//! and a JSON description for this runtime's tools (`tvmrt inspect`, the Python package).

#![forbid(unsafe_code)]

use super::code::{Function, Instr};
use super::executable::{Executable, Program};
use super::image::Constant;
use std::fmt::Write;

fn regs(rs: &[usize]) -> String {
    rs.iter().map(|r| format!("${r}")).collect::<Vec<_>>().join(", ")
}

/// An instruction as upstream prints it after its fields.
fn instruction(p: &Program, ins: &Instr) -> String {
    match ins {
        Instr::Move { from, dst } => format!("move ${dst} ${from}"),
        Instr::Ret { result } => format!("ret ${result}"),
        Instr::Fatal => "fatal".into(),
        Instr::InvokePacked { packed, outputs, args } => {
            let (ins, outs) = args.split_at(args.len() - outputs);
            format!("invoke_packed PackedFunc[{packed}] (in: {}, out: {})", regs(ins), regs(outs))
        }
        Instr::AllocTensor { storage, offset, dtype, shape, dst } => {
            format!("alloc_tensor ${dst} ${storage} ${offset} {shape:?} {dtype}")
        }
        Instr::AllocTensorReg { storage, offset, shape, dtype, dst } => {
            format!("alloc_tensor_reg ${dst} ${storage} ${offset} ${shape} {dtype}")
        }
        Instr::AllocAdt { tag, fields, dst } => format!("alloc_data ${dst} tag({tag}) [{}]", regs(fields)),
        Instr::AllocClosure { func, free_vars, dst } => {
            format!("alloc_closure ${dst} VMFunc[{func}]({})", regs(free_vars))
        }
        Instr::GetField { object, index, dst } => format!("get_field ${dst} ${object}[{index}]"),
        Instr::GetTag { object, dst } => format!("get_tag ${dst} ${object}"),
        Instr::If { test, target, on_equal, otherwise } => {
            format!("if ${test} == ${target} goto {on_equal} else goto {otherwise}")
        }
        Instr::Invoke { func, args, dst } => {
            let name = p.globals.get(*func).map_or("?", String::as_str);
            format!("invoke ${dst} VMFunc[{func}]({}) # {name}", regs(args))
        }
        Instr::InvokeClosure { closure, args, dst } => format!("invoke_closure ${dst} ${closure}({})", regs(args)),
        Instr::LoadConst { index, device, dst } => format!("load_const ${dst} Const[{index}] {device}"),
        Instr::LoadConsti { value, dst } => format!("load_consti ${dst} {value}"),
        Instr::Goto { offset } => format!("goto {offset}"),
        Instr::AllocStorage { size, alignment, dtype_hint, device, shape, dst } => {
            if shape.is_empty() {
                format!("alloc_storage ${dst} ${size} {alignment} {dtype_hint} {device}")
            } else {
                format!("alloc_storage ${dst} {shape:?} {dtype_hint} {device}")
            }
        }
        Instr::ShapeOf { tensor, dst } => format!("shape_of ${dst} ${tensor}"),
        Instr::ReshapeTensor { tensor, shape, dst } => format!("reshape_tensor ${dst} ${tensor} ${shape}"),
        Instr::DeviceCopy { src, from, to, dst } => format!("device_copy ${dst} ${src} {from} {to}"),
        Instr::KillRegister { dst } => format!("kill_register ${dst}"),
    }
}

fn function(out: &mut String, p: &Program, i: usize, f: &Function) {
    let _ = writeln!(out, "VM Function[{i}]: {}({})", f.name, f.params.join(", "));
    let _ = writeln!(out, "# reg file size = {}", f.registers);
    let _ = writeln!(out, "# instruction count = {}", f.code.len());
    let _ = writeln!(out, "opcode, fields # inst(text):");
    let map = DeviceIndexes;
    for (pc, ins) in f.code.iter().enumerate() {
        let (opcode, fields) = ins.encode(super::code::Layout::V014, &map);
        let mut line = format!("{pc:>2}: {opcode} ");
        for v in fields {
            let _ = write!(line, "{v} ");
        }
        let _ = writeln!(out, "{line:<40}  # {}", instruction(p, ins));
    }
    out.push('\n');
}

struct DeviceIndexes;

impl super::code::DeviceMap for DeviceIndexes {
    fn index_of_type(&self, t: i64) -> crate::error::Result<usize> {
        Ok(t as usize)
    }
    fn type_of_index(&self, i: usize) -> i64 {
        i as i64
    }
}

/// `get_bytecode`.
pub fn bytecode(p: &Program) -> String {
    let mut out = String::new();
    for (i, f) in p.functions.iter().enumerate() {
        function(&mut out, p, i, f);
    }
    out
}

fn shape_text(c: &Constant) -> String {
    match c {
        Constant::Tensor(t) => {
            let dims: Vec<String> = t.shape().iter().map(i64::to_string).collect();
            format!("{}[{}]", t.dtype(), dims.join(", "))
        }
        Constant::LateBound(name) => format!("late-bound '{name}'"),
    }
}

/// `get_constants`.
pub fn constants(exe: &Executable) -> String {
    let mut out = String::new();
    for (i, c) in exe.constants.snapshot().iter().enumerate() {
        let _ = writeln!(out, "VM Const[{i}]: {} on device index {}", shape_text(c), exe.program.const_devices[i]);
    }
    out
}

/// `get_virtual_devices`.
pub fn devices(p: &Program) -> String {
    let mut out = String::new();
    for (i, d) in p.devices.iter().enumerate() {
        let _ = writeln!(
            out,
            "VM VirtualDevice[{i}]: device type {}, id {} and mem_scope {}",
            d.device.device_type, d.device.device_id, d.scope
        );
    }
    out
}

/// `get_primitives`.
pub fn primitives(p: &Program) -> String {
    p.primitives.iter().enumerate().map(|(i, n)| format!("VM PackedFunc[{i}]: {n}\n")).collect()
}

/// `get_stats`.
pub fn stats(exe: &Executable) -> String {
    let p = &exe.program;
    let shapes: Vec<String> = exe
        .constants
        .snapshot()
        .iter()
        .map(|c| match c {
            Constant::Tensor(t) if t.shape().is_empty() => "scalar".to_string(),
            Constant::Tensor(t) => format!("{:?}", t.shape()),
            Constant::LateBound(n) => format!("late-bound '{n}'"),
        })
        .collect();
    let globals: Vec<String> = p.globals.iter().enumerate().map(|(i, g)| format!("(\"{g}\", {i})")).collect();
    format!(
        "Relay VM executable statistics:\n  Constant shapes (# {}): [{}]\n  Globals (#{}): [{}]\n  Primitive ops (#{}): [{}]\n",
        shapes.len(),
        shapes.join(", "),
        globals.len(),
        globals.join(", "),
        p.primitives.len(),
        p.primitives.join(", ")
    )
}

/// What this runtime's tools show of an executable: its functions (parameters, their devices),
/// constants, kernels and devices.
pub fn describe(exe: &Executable, has_lib: bool) -> serde_json::Value {
    let p = &exe.program;
    let constants = exe.constants.snapshot();
    let bytes: usize = constants
        .iter()
        .map(|c| match c {
            Constant::Tensor(t) => t.nbytes(),
            Constant::LateBound(_) => 0,
        })
        .sum();
    serde_json::json!({
        "version": p.version,
        "bytecode": p.layout.describe(),
        "devices": p.devices.iter().map(|d| serde_json::json!({
            "device_type": d.device.device_type, "device_id": d.device.device_id, "scope": d.scope})).collect::<Vec<_>>(),
        "host_device": p.host,
        "functions": p.functions.iter().map(|f| serde_json::json!({
            "name": f.name, "params": f.params, "param_devices": f.param_devices,
            "registers": f.registers, "instructions": f.code.len()})).collect::<Vec<_>>(),
        "constants": constants.len(),
        "constant_bytes": bytes,
        "constant_shapes": constants.iter().map(shape_text).collect::<Vec<_>>(),
        "late_bound": exe.constants.unbound(),
        "primitives": p.primitives,
        "has_library": has_lib,
    })
}

/// What an executable and its VMs hold (`tvmrt.memory_usage`): constants on the host and their
/// copies on devices, and each device's storage pool.
pub fn memory(exe: &Executable) -> serde_json::Value {
    let (host, copies) = exe.constants.bytes();
    serde_json::json!({"constants": host, "constants_on_devices": copies, "pools": pools(&exe.pools)})
}

/// Each device's storage pool as the memory reports show it (the Relay and the Relax VM's).
pub fn pools(pools: &crate::vm::storage::Pools) -> Vec<serde_json::Value> {
    pools
        .all()
        .iter()
        .map(|p| {
            let u = p.usage();
            serde_json::json!({"device": crate::profiling::device_name(p.device()), "blocks": u.blocks,
                "bytes": u.bytes, "busy_blocks": u.busy_blocks, "busy_bytes": u.busy_bytes})
        })
        .collect()
}
