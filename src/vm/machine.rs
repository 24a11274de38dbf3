//! The interpreter: frames of registers, each instruction of the 0.19 set (and 0.8's), kernels
//! called with their tuple arguments flattened, storage from the executable's pools.
//!
//! A register holds an object (a tensor, a tuple, a closure) or a storage block. Every index an
//! instruction carries was checked when the code was read; what only a run can tell (a register
//! read before it was written, a tuple field past its end, a shape that does not fit its storage)
//! is an error of the invocation, never an out-of-bounds access.

#![forbid(unsafe_code)]

use super::code::{Instr, Reg};
use super::executable::{Constants, Program};
use super::objects::{AdtObj, ClosureObj};
use super::profiler::Recorder;
use super::registers::{self, empty_register, Value};
use super::storage::{Allocator, Pool, Pools};
use crate::dlpack::{kDLCPU, kDLInt, DLDataType, DLDevice};
use crate::dtype::{num_elements, tensor_bytes};
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef};
use crate::packed::{with_object_args, PackedFunc};
use crate::tensor::NDArray;
use std::sync::Arc;

/// The registers of one invocation's frames may take this much memory unless
/// `TVM_RT_VM_STACK_MB` says otherwise: a recursion that does not stop ends with an error, while a
/// Relay loop of a million iterations (a frame each, as upstream's VM makes them) runs. Memory
/// the system refuses before that is an error too.
pub const MAX_FRAME_BYTES: usize = 512 << 20;

fn max_frame_bytes() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let mb = std::env::var("TVM_RT_VM_STACK_MB").ok().and_then(|v| v.trim().parse::<usize>().ok());
        mb.map_or(MAX_FRAME_BYTES, |mb| mb.saturating_mul(1 << 20))
    })
}

/// A VM's device for a virtual device of the code.
#[derive(Clone)]
pub struct Device {
    pub device: DLDevice,
    pub allocator: Allocator,
    pub pool: Arc<Pool>,
}

struct Frame {
    func: usize,
    pc: usize,
    regs: Vec<Option<Value>>,
    /// Where the caller wants the result (none for the frame the invocation started with).
    ret_to: Option<Reg>,
}

/// The frames of an invocation, and the memory their registers take (bounded by
/// [`MAX_FRAME_BYTES`]).
#[derive(Default)]
struct Frames {
    stack: Vec<Frame>,
    bytes: usize,
}

impl Frames {
    fn frame_bytes(f: &Frame) -> usize {
        std::mem::size_of::<Frame>() + f.regs.capacity() * std::mem::size_of::<Option<Value>>()
    }

    fn push(&mut self, f: Frame) -> Result<()> {
        let bytes = self.bytes + Self::frame_bytes(&f);
        if bytes > max_frame_bytes() {
            return Err(Error::value(format!(
                "the call stack needs more than {} MiB of registers ({} nested calls): a recursion that does not end? \
                 (TVM_RT_VM_STACK_MB)",
                max_frame_bytes() >> 20,
                self.stack.len()
            )));
        }
        self.stack
            .try_reserve(1)
            .map_err(|_| Error::tvm(format!("out of memory at {} nested calls", self.stack.len())))?;
        self.stack.push(f);
        self.bytes = bytes;
        Ok(())
    }

    fn pop(&mut self) -> Option<Frame> {
        let f = self.stack.pop()?;
        self.bytes -= Self::frame_bytes(&f);
        Some(f)
    }

    fn top(&mut self) -> &mut Frame {
        self.stack.last_mut().expect("a frame runs")
    }

    fn last(&self) -> Option<&Frame> {
        self.stack.last()
    }

    fn last_mut(&mut self) -> Option<&mut Frame> {
        self.stack.last_mut()
    }

    fn len(&self) -> usize {
        self.stack.len()
    }
}

/// What a run needs that a VM holds: the code, constants, kernels and devices.
pub struct Machine {
    pub program: Arc<Program>,
    pub constants: Arc<Constants>,
    pub kernels: Vec<ObjRef<PackedFunc>>,
    pub devices: Vec<Device>,
}

/// Tensors a caller gave for the function's outputs (`set_outputs`): the registers the outputs are
/// allocated in, and the tensor for each.
pub type OutputBinding = Vec<(Reg, ObjRef<NDArray>)>;

impl Machine {
    /// Makes the VM's devices from `init`'s (device, allocator) pairs: each virtual device of the
    /// code gets the first physical device of its type.
    pub fn devices_for(program: &Program, given: &[(DLDevice, Allocator)], pools: &Pools) -> Result<Vec<Device>> {
        program
            .devices
            .iter()
            .map(|v| {
                let (device, allocator) =
                    given.iter().find(|(d, _)| d.device_type == v.device.device_type).copied().ok_or_else(|| {
                        Error::value(format!(
                            "Unable to find a physical device (from among the {} given) to match the virtual device \
                             with device type {}",
                            given.len(),
                            v.device.device_type
                        ))
                    })?;
                if crate::device::texture::Texture::of_scope(&v.scope)?.is_some() {
                    return Err(Error::value(format!(
                        "memory scope '{}' (textures) in a VM executable: not supported by this runtime",
                        v.scope
                    )));
                }
                Ok(Device { device, allocator, pool: pools.of(device) })
            })
            .collect()
    }

    pub fn host(&self) -> DLDevice {
        self.devices[self.program.host].device
    }

    /// Runs function `func` on `args`; returns what it returns.
    pub fn invoke(
        &self,
        func: usize,
        args: Vec<AnyObject>,
        outputs: &OutputBinding,
        mut rec: Option<&mut Recorder>,
    ) -> Result<AnyObject> {
        let f = &self.program.functions[func];
        if args.len() != f.params.len() {
            return Err(Error::value(format!(
                "function '{}' takes {} arguments, {} given",
                f.name,
                f.params.len(),
                args.len()
            )));
        }
        let mut frames = Frames::default();
        frames.push(self.frame(func, args.into_iter().map(Value::Obj), None)?)?;
        for (r, t) in outputs {
            frames.stack[0].regs[*r] = Some(Value::Obj(t.clone().into_any()));
        }
        let result = self.run(&mut frames, outputs, &mut rec).and_then(writable);
        for d in &self.devices {
            d.pool.end();
        }
        result.map_err(|e| {
            let where_ = frames.last().map_or(String::new(), |fr| {
                format!("in function '{}', instruction {}", self.program.functions[fr.func].name, fr.pc)
            });
            if where_.is_empty() {
                e
            } else {
                e.context(where_)
            }
        })
    }

    fn frame(&self, func: usize, args: impl Iterator<Item = Value>, ret_to: Option<Reg>) -> Result<Frame> {
        let f = &self.program.functions[func];
        // The code sizes this: memory the system refuses is the invocation's error, not an abort.
        let mut regs = Vec::new();
        regs.try_reserve_exact(f.registers)
            .map_err(|_| Error::tvm(format!("out of memory: a frame of {} registers for '{}'", f.registers, f.name)))?;
        regs.resize(f.registers, None);
        for (i, a) in args.enumerate() {
            *regs.get_mut(i).ok_or_else(|| Error::value(format!("too many arguments for '{}'", f.name)))? = Some(a);
        }
        Ok(Frame { func, pc: 0, regs, ret_to })
    }

    fn run(&self, frames: &mut Frames, outputs: &OutputBinding, rec: &mut Option<&mut Recorder>) -> Result<AnyObject> {
        loop {
            let depth = frames.len();
            let fr = frames.top();
            let code = &self.program.functions[fr.func].code;
            let ins = code.get(fr.pc).ok_or_else(|| Error::value("ran past the function's last instruction"))?;
            let read = |regs: &[Option<Value>], r: Reg| regs[r].clone().ok_or_else(|| empty_register(r));
            match ins {
                Instr::Move { from, dst } => {
                    fr.regs[*dst] = Some(read(&fr.regs, *from)?);
                    fr.pc += 1;
                }
                Instr::Fatal => return Err(Error::tvm("VM encountered fatal error")),
                Instr::LoadConst { index, dst, .. } => {
                    let device = self.devices[self.program.const_devices[*index]].device;
                    let started = begin(rec, device)?;
                    let c = self.constants.on(*index, device)?;
                    if let (Some(r), Some(s)) = (rec.as_mut(), started) {
                        r.stop("VM::LoadConst", device, s, None)?;
                    }
                    fr.regs[*dst] = Some(Value::Obj(c.into_any()));
                    fr.pc += 1;
                }
                Instr::LoadConsti { value, dst } => {
                    let t = NDArray::from_bytes(&[1], DLDataType::new(kDLInt, 64, 1), &value.to_le_bytes())?;
                    fr.regs[*dst] = Some(Value::Obj(self.on_host(t)?.into_any()));
                    fr.pc += 1;
                }
                Instr::Invoke { func, args, dst } => {
                    let args = args.iter().map(|&r| read(&fr.regs, r)).collect::<Result<Vec<_>>>()?;
                    fr.pc += 1;
                    let callee = self.frame(*func, args.into_iter(), Some(*dst))?;
                    frames.push(callee)?;
                }
                Instr::InvokeClosure { closure, args, dst } => {
                    let c = registers::object(&fr.regs, *closure)?.downcast::<ClosureObj>().map_err(|o| {
                        Error::type_err(format!("register ${closure} holds a {}, not a closure", o.type_key()))
                    })?;
                    let mut all: Vec<Value> = c.free_vars.iter().cloned().map(Value::Obj).collect();
                    for &r in args.iter() {
                        all.push(read(&fr.regs, r)?);
                    }
                    let func = c.func;
                    if func >= self.program.functions.len() {
                        return Err(Error::value(format!("a closure of function {func}")));
                    }
                    let want = self.program.functions[func].params.len();
                    if all.len() != want {
                        return Err(Error::value(format!("a closure called with {} values for {want}", all.len())));
                    }
                    fr.pc += 1;
                    frames.push(self.frame(func, all.into_iter(), Some(*dst))?)?;
                }
                Instr::InvokePacked { packed, outputs: n_out, args } => {
                    self.invoke_packed(*packed, *n_out, &fr.regs, args, rec)?;
                    fr.pc += 1;
                }
                Instr::GetField { object, index, dst } => {
                    let adt = registers::adt(&fr.regs, *object)?;
                    let field = adt.fields().get(*index).cloned().ok_or_else(|| {
                        Error::index(format!("field {index} of a tuple of {} fields", adt.fields().len()))
                    })?;
                    fr.regs[*dst] = Some(Value::Obj(field));
                    fr.pc += 1;
                }
                Instr::GetTag { object, dst } => {
                    let tag = registers::adt(&fr.regs, *object)?.tag() as i32;
                    let t = NDArray::from_bytes(&[1], DLDataType::new(kDLInt, 32, 1), &tag.to_le_bytes())?;
                    fr.regs[*dst] = Some(Value::Obj(self.on_host(t)?.into_any()));
                    fr.pc += 1;
                }
                Instr::Goto { offset } => fr.pc = (fr.pc as i64 + offset) as usize,
                Instr::If { test, target, on_equal, otherwise } => {
                    let equal =
                        registers::scalar(&fr.regs, *test)? as i32 == registers::scalar(&fr.regs, *target)? as i32;
                    fr.pc = (fr.pc as i64 + if equal { *on_equal } else { *otherwise }) as usize;
                }
                Instr::AllocTensor { storage, offset, dtype, shape, dst } => {
                    let t = match outputs.iter().find(|(r, _)| r == dst).filter(|_| depth == 1) {
                        Some((_, t)) => check_output(t, *dtype, shape)?,
                        None => {
                            let offset = registers::scalar(&fr.regs, *offset)?;
                            self.view(&fr.regs, *storage, offset, shape, *dtype, rec)?
                        }
                    };
                    fr.regs[*dst] = Some(Value::Obj(t.into_any()));
                    fr.pc += 1;
                }
                Instr::AllocTensorReg { storage, offset, shape, dtype, dst } => {
                    let shape = registers::shape_from(&fr.regs, *shape)?;
                    let offset = registers::scalar(&fr.regs, *offset)?;
                    let t = self.view(&fr.regs, *storage, offset, &shape, *dtype, rec)?;
                    fr.regs[*dst] = Some(Value::Obj(t.into_any()));
                    fr.pc += 1;
                }
                Instr::AllocAdt { tag, fields, dst } => {
                    let fields = fields.iter().map(|&r| registers::object(&fr.regs, r)).collect::<Result<Vec<_>>>()?;
                    fr.regs[*dst] = Some(Value::Obj(AdtObj::new(*tag, fields).into_any()));
                    fr.pc += 1;
                }
                Instr::AllocClosure { func, free_vars, dst } => {
                    let free_vars =
                        free_vars.iter().map(|&r| registers::object(&fr.regs, r)).collect::<Result<Vec<_>>>()?;
                    fr.regs[*dst] = Some(Value::Obj(ClosureObj::new(*func, free_vars).into_any()));
                    fr.pc += 1;
                }
                Instr::AllocStorage { size, alignment, dtype_hint, device, shape, dst } => {
                    let bytes = if shape.is_empty() {
                        let n = registers::scalar(&fr.regs, *size)?;
                        usize::try_from(n).map_err(|_| Error::value(format!("a storage of {n} bytes")))?
                    } else {
                        tensor_bytes(shape, *dtype_hint)?
                    };
                    let d = &self.devices[*device];
                    let started = begin(rec, d.device)?;
                    let block = d.pool.take(bytes, *alignment, d.allocator)?;
                    if let (Some(r), Some(s)) = (rec.as_mut(), started) {
                        let what = format!("{dtype_hint}[{bytes}]");
                        r.stop("VM::AllocStorage", d.device, s, Some(("VM::Argument Shapes", what)))?;
                    }
                    fr.regs[*dst] = Some(Value::Storage(block));
                    fr.pc += 1;
                }
                Instr::ShapeOf { tensor, dst } => {
                    let t = registers::tensor(&fr.regs, *tensor)?;
                    let bytes: Vec<u8> = t.shape().iter().flat_map(|d| d.to_le_bytes()).collect();
                    let s = NDArray::from_bytes(&[t.shape().len() as i64], DLDataType::new(kDLInt, 64, 1), &bytes)?;
                    fr.regs[*dst] = Some(Value::Obj(self.on_host(s)?.into_any()));
                    fr.pc += 1;
                }
                Instr::ReshapeTensor { tensor, shape, dst } => {
                    let t = registers::tensor(&fr.regs, *tensor)?;
                    let shape = registers::shape_from(&fr.regs, *shape)?;
                    // Sizes from the code: a negative dimension or a count that overflows is no
                    // shape, never a wrapped count.
                    let same = matches!((num_elements(&shape), num_elements(t.shape())), (Ok(a), Ok(b)) if a == b);
                    if !same {
                        return Err(Error::value(format!("reshaping {:?} to {shape:?}", t.shape())));
                    }
                    let v = NDArray::create_view(&t, &shape, t.dtype())?;
                    fr.regs[*dst] = Some(Value::Obj(v.into_any()));
                    fr.pc += 1;
                }
                Instr::DeviceCopy { src, from, to, dst } => {
                    let t = registers::tensor(&fr.regs, *src)?;
                    let (from, to) = (self.devices[*from].device, self.devices[*to].device);
                    if t.device() != from {
                        return Err(Error::value(format!(
                            "a device copy from {} of a tensor on {}",
                            crate::device::describe(from),
                            crate::device::describe(t.device())
                        )));
                    }
                    let started = begin(rec, to)?;
                    let copy = if t.device() == to { t } else { NDArray::copy_of(t.raw(), to)? };
                    if let (Some(r), Some(s)) = (rec.as_mut(), started) {
                        r.stop("VM::DeviceCopy", to, s, None)?;
                    }
                    fr.regs[*dst] = Some(Value::Obj(copy.into_any()));
                    fr.pc += 1;
                }
                Instr::KillRegister { dst } => {
                    fr.regs[*dst] = None;
                    fr.pc += 1;
                }
                Instr::Ret { result } => {
                    let value = read(&fr.regs, *result)?;
                    let ret_to = fr.ret_to;
                    frames.pop();
                    match (ret_to, frames.last_mut()) {
                        (Some(r), Some(caller)) => caller.regs[r] = Some(value),
                        _ => {
                            return match value {
                                Value::Obj(o) => Ok(o),
                                Value::Storage(_) => Err(Error::value("the function returned a storage block")),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Calls primitive `packed` on the objects of registers `args` (tuples flattened into their
    /// fields), unless its one output is empty (a zero in its shape), as upstream skips it. The
    /// registers keep the objects alive for the call: they are passed borrowed, the arguments
    /// built on the stack (with_object_args), so a call allocates one small list at most.
    fn invoke_packed(
        &self,
        packed: usize,
        outputs: usize,
        regs: &[Option<Value>],
        args: &[Reg],
        rec: &mut Option<&mut Recorder>,
    ) -> Result<()> {
        let mut objects: Vec<&AnyObject> = Vec::with_capacity(args.len());
        for &r in args {
            let o = registers::object_ref(regs, r)?;
            let items = match o.payload::<AdtObj>() {
                Some(adt) => adt.fields(),
                None => std::slice::from_ref(o),
            };
            for item in items {
                if item.payload::<NDArray>().is_none() {
                    return Err(Error::type_err(format!(
                        "a primitive's argument is a {}, not a tensor",
                        item.type_key()
                    )));
                }
                objects.push(item);
            }
        }
        if outputs == 1 {
            let last = args.last().map(|&r| registers::object_ref(regs, r)).transpose()?;
            if last.and_then(|o| o.payload::<NDArray>()).is_some_and(|t| t.shape().contains(&0)) {
                return Ok(());
            }
        }
        let kernel = &self.kernels[packed];
        let name = &self.program.primitives[packed];
        let first = objects.first().and_then(|o| o.payload::<NDArray>());
        let device = first.map_or(self.host(), |t| t.device());
        let started = begin(rec, device)?;
        with_object_args(&objects, |a| kernel.call(a)).map_err(|e| e.context(format!("primitive {name}")))?;
        if let (Some(r), Some(s)) = (rec.as_mut(), started) {
            let tensors: Vec<ObjRef<NDArray>> = objects.iter().filter_map(|o| o.downcast_ref::<NDArray>()).collect();
            r.stop_call(name, device, s, &tensors, self.program.attrs_of(packed))?;
        }
        Ok(())
    }

    /// A tensor made on the host (a scalar, a shape) on the code's host device.
    fn on_host(&self, t: ObjRef<NDArray>) -> Result<ObjRef<NDArray>> {
        let host = self.host();
        if host.device_type == kDLCPU {
            Ok(t)
        } else {
            NDArray::copy_of(t.raw(), host)
        }
    }

    /// A tensor of `shape` and `dtype` at `offset` in the storage block in `storage`.
    fn view(
        &self,
        regs: &[Option<Value>],
        storage: Reg,
        offset: i64,
        shape: &[i64],
        dtype: DLDataType,
        rec: &mut Option<&mut Recorder>,
    ) -> Result<ObjRef<NDArray>> {
        let block = match &regs[storage] {
            Some(Value::Storage(b)) => b.clone(),
            Some(Value::Obj(o)) => {
                return Err(Error::type_err(format!(
                    "register ${storage} holds a {}, not a storage block",
                    o.type_key()
                )))
            }
            None => return Err(empty_register(storage)),
        };
        let offset = usize::try_from(offset).map_err(|_| Error::value(format!("a tensor at offset {offset}")))?;
        let started = begin(rec, block.device())?;
        let t = NDArray::view_of(&block, offset, shape, dtype)?;
        if let (Some(r), Some(s)) = (rec.as_mut(), started) {
            let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
            r.stop(
                "VM::AllocTensor",
                block.device(),
                s,
                Some(("Argument Shapes", format!("{dtype}[{}]", dims.join(", ")))),
            )?;
        }
        Ok(t)
    }
}

/// A result the caller may write: a constant mapped from a file (read-only memory) is copied.
fn writable(o: AnyObject) -> Result<AnyObject> {
    if let Some(t) = o.downcast_ref::<NDArray>() {
        return Ok(if t.is_mapped() { t.deep_copy()?.into_any() } else { o });
    }
    if let Some(adt) = o.downcast_ref::<AdtObj>() {
        if adt
            .fields()
            .iter()
            .any(|f| f.downcast_ref::<NDArray>().is_some_and(|t| t.is_mapped()) || f.downcast_ref::<AdtObj>().is_some())
        {
            let fields = adt.fields().iter().cloned().map(writable).collect::<Result<Vec<_>>>()?;
            return Ok(AdtObj::new(adt.tag(), fields).into_any());
        }
    }
    Ok(o)
}

/// Starts timing a call when the invocation is profiled.
fn begin(rec: &mut Option<&mut Recorder>, device: DLDevice) -> Result<Option<crate::profiling::Timer>> {
    rec.as_mut().map(|r| r.start(device)).transpose()
}

/// A caller's output tensor where the code allocates an output: of its dtype and shape.
fn check_output(t: &ObjRef<NDArray>, dtype: DLDataType, shape: &[i64]) -> Result<ObjRef<NDArray>> {
    if t.dtype() != dtype || t.shape() != shape {
        return Err(Error::value(format!(
            "an output tensor of {} {:?} where the function makes {dtype} {shape:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t.clone())
}
