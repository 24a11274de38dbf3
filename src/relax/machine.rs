//! The interpreter. A [`Machine`] is what `vm_initialization` makes: the devices, the constants
//! placed on the first of them, and every function-table entry resolved once (a builtin, a
//! kernel or global, or bytecode). It holds no per-call state: each call has its own registers,
//! so one machine answers any number of threads at once.

#![forbid(unsafe_code)]

use super::builtins::{self, Builtin, CallCtx};
use super::code::{Code, Instr, Operand, Reg, FIXED_VM, FIXED_VOID};
use super::image::{Constant, FuncKind, Generation, Image};
use super::value::{Callable, Value};
use crate::dlpack::{kDLCPU, DLDevice};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::{registry, ArgsBuilder, PackedFunc};
use crate::tensor::{Buffer, NDArray};
use crate::vm::storage::{Allocator, Pool, Pools};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The executable: its image, decoded code and names, shared by every VM made from it.
pub struct Executable {
    /// The image as read; its constants moved to [`Executable::constants`].
    pub image: Image,
    pub code: Code,
    pub generation: Generation,
    pub by_name: HashMap<String, usize>,
    /// Storage for every VM of the executable, one pool per device: a block comes back when the
    /// last tensor in it goes, and blocks no call used lately are given back after each call.
    pub pools: Pools,
    /// The constant pool; its tensors replaceable by ones over a mapped file (`map_constants`),
    /// which the VMs made after take.
    constants: RwLock<Vec<Constant>>,
}

impl Executable {
    pub fn from_bytes(bytes: &[u8], generation: Generation) -> Result<Executable> {
        let mut image = Image::read(bytes, generation)?;
        let code = super::code::decode(&image)?;
        let mut by_name = HashMap::new();
        for (i, f) in image.functions.iter().enumerate() {
            by_name.entry(f.name.clone()).or_insert(i);
        }
        let constants = RwLock::new(std::mem::take(&mut image.constants));
        Ok(Executable { image, code, generation, by_name, pools: Pools::default(), constants })
    }

    /// The constant pool as it is now (counts of its tensors).
    pub fn constants(&self) -> Vec<Constant> {
        self.constants.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Uses the tensor constants from the aligned params file at `path`, mapped read-only (every
    /// process mapping it shares its pages), instead of the process's own copies, writing the
    /// file first when it is missing or not these constants' (a digest record tells). Returns
    /// whether it wrote the file. VMs made after use the mapped ones. `open` maps the file (the
    /// caller's promise: it does not change while mapped, as a file renamed into place does not).
    pub fn map_constants(
        &self,
        path: &std::path::Path,
        open: impl Fn() -> Result<Arc<crate::tensor::FileMap>>,
    ) -> Result<bool> {
        let mut constants = self.constants.write().unwrap_or_else(|e| e.into_inner());
        let tensors: Vec<(usize, ObjRef<NDArray>)> = constants
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Constant::Tensor(t) if t.device() == DLDevice::CPU => Some((i, t.clone())),
                _ => None,
            })
            .collect();
        let (mapped, wrote) = crate::vm::executable::mapped_constants(path, &tensors, "__tvmrt.relax_constants", open)?;
        drop(tensors);
        for (i, t) in mapped {
            constants[i] = Constant::Tensor(t);
        }
        drop(constants);
        // The process's own copies are gone (unless another load shares them); the heap would
        // otherwise keep their pages.
        crate::host_memory::return_free_heap();
        Ok(wrote)
    }

    /// The index of a Relax function (bytecode) called `name`.
    pub fn function(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .filter(|&i| self.image.functions[i].kind != FuncKind::Packed)
            .ok_or_else(|| Error::value(format!("Unknown function: {name}")))
    }
}

/// What a function-table entry resolved to.
enum Target {
    Builtin(Builtin),
    Packed(ObjRef<PackedFunc>),
    Bytecode,
}

/// Nested Relax calls deeper than this are refused (a recursive executable would otherwise
/// overflow the thread's stack).
const MAX_DEPTH: usize = 200;

pub struct Machine {
    pub exe: Arc<Executable>,
    /// The devices given to `vm_initialization`, the host last, each with its pool and how it
    /// allocates.
    devices: Vec<DLDevice>,
    storage: Vec<(Arc<Pool>, Allocator)>,
    targets: Vec<Target>,
    /// What the code's operands other than registers stand for, as values a call borrows:
    /// `%void`, `%vm`, the constants, the function-table entries and the immediates
    /// (`Code::fixed`).
    fixed: Vec<Value>,
}

/// A function of the executable's library or its imports.
fn from_imports(m: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
    for import in m.imports() {
        if let Some(f) = Module::get_function(&import, name, true)? {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

impl Machine {
    /// `vm_initialization`: `devices` as given (the host is added last if missing).
    pub fn new(
        exe: Arc<Executable>,
        exe_module: &ObjRef<Module>,
        mut devices: Vec<(DLDevice, Allocator)>,
    ) -> Result<Machine> {
        if devices.is_empty() {
            return Err(Error::value("vm_initialization needs at least one device"));
        }
        if devices.last().map(|d| d.0.device_type) != Some(kDLCPU) {
            devices.push((DLDevice::CPU, Allocator::Pooled));
        }
        let storage = devices.iter().map(|&(d, how)| (exe.pools.of(d), how)).collect();
        let devices: Vec<DLDevice> = devices.into_iter().map(|d| d.0).collect();
        let first = devices[0];
        let constants = exe
            .constants()
            .iter()
            .map(|c| {
                Ok(match c {
                    Constant::Tensor(t) if t.device() == first => Value::Tensor(t.clone()),
                    Constant::Tensor(t) => Value::Tensor(NDArray::copy_of(t.raw(), first)?),
                    Constant::DataType(d) => Value::DataType(*d),
                    Constant::Shape(s) => Value::Shape(s.as_slice().into()),
                    Constant::Str(s) => Value::Str(s.as_str().into()),
                    Constant::Int(i) => Value::Int(*i),
                    Constant::Float(f) => Value::Float(*f),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let targets = exe
            .image
            .functions
            .iter()
            .map(|f| {
                Ok(match f.kind {
                    FuncKind::Bytecode => Target::Bytecode,
                    FuncKind::CompiledTir => {
                        return Err(Error::value(format!(
                        "function '{}' was compiled to TIR (exec_mode=\"compiled\"), which this runtime does not run; \
                             build with the default exec_mode=\"bytecode\"",
                        f.name
                    )))
                    }
                    FuncKind::Packed => match Builtin::by_name(&f.name) {
                        Some(b) => Target::Builtin(b),
                        None => Target::Packed(
                            from_imports(exe_module, &f.name)?.or_else(|| registry::get(&f.name)).ok_or_else(|| {
                                Error::attribute(format!(
                                    "Cannot find PackedFunc {} in the Relax VM kernel library, the runtime's registry, \
                                     or the executable's Relax functions",
                                    f.name
                                ))
                            })?,
                        ),
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let functions: Vec<Value> = (0..targets.len()).map(|g| function_value(&targets, g)).collect();
        let fixed = exe.code.fixed(constants, functions, Value::None, Value::Vm, Value::Int);
        Ok(Machine { exe, devices, storage, targets, fixed })
    }

    pub fn devices(&self) -> &[DLDevice] {
        &self.devices
    }

    pub fn first_device(&self) -> DLDevice {
        self.devices[0]
    }
}

impl Machine {
    /// The index of a device the code names (-1: the host).
    fn device_index(&self, i: i64) -> Result<usize> {
        if i == -1 {
            return Ok(self.devices.len() - 1);
        }
        usize::try_from(i)
            .ok()
            .filter(|&i| i < self.devices.len())
            .ok_or_else(|| Error::value(format!("device index {i} outside the VM's {} devices", self.devices.len())))
    }
}

impl builtins::Machine for Machine {
    fn device_at(&self, i: i64) -> Result<DLDevice> {
        Ok(self.devices[self.device_index(i)?])
    }

    fn storage(&self, device: i64, bytes: usize) -> Result<Arc<Buffer>> {
        let (pool, how) = &self.storage[self.device_index(device)?];
        pool.take(bytes, 0, *how)
    }

    fn call_value(&self, f: &Value, args: &[&Value], cx: &mut CallCtx) -> Result<Value> {
        match f {
            Value::Func(Callable::Closure { func, bound }) => {
                let mut all = args.to_vec();
                all.extend(bound.iter());
                self.call_index(*func, &all, cx)
            }
            Value::Func(Callable::Packed(p)) => self.call_packed(p, args),
            other => Err(Error::type_err(format!("a call of a {}, not a function", other.kind()))),
        }
    }
}

impl Machine {
    /// Calls Relax function `func` with `args` (from a host: a fresh call context).
    pub fn invoke(&self, func: usize, args: Vec<Value>) -> Result<Value> {
        let mut cx = CallCtx::default();
        let out = match self.targets[func] {
            Target::Bytecode => self.run(func, args, &mut cx),
            _ => self.call_index(func, &args.iter().collect::<Vec<_>>(), &mut cx),
        };
        self.end_call();
        out
    }

    /// Blocks no call used lately go back to the system: once per pool (devices given twice,
    /// as the host usually is, share one).
    fn end_call(&self) {
        for (i, (pool, _)) in self.storage.iter().enumerate() {
            if !self.storage[..i].iter().any(|(p, _)| Arc::ptr_eq(p, pool)) {
                pool.end();
            }
        }
    }

    /// `invoke` with every kernel and builtin call timed (the profiler VM's `profile`): the
    /// result and upstream's report of the calls, with each device's total.
    pub fn invoke_profiled(&self, func: usize, args: Vec<Value>) -> Result<(Value, crate::profiling::Report)> {
        let mut cx = CallCtx { recorder: Some(Default::default()), ..Default::default() };
        let totals =
            self.devices.iter().map(|&d| Ok((d, crate::profiling::Timer::start(d)?))).collect::<Result<Vec<_>>>()?;
        let out = match self.targets[func] {
            Target::Bytecode => self.run(func, args, &mut cx),
            _ => self.call_index(func, &args.iter().collect::<Vec<_>>(), &mut cx),
        }?;
        let ends = totals.iter().rev().map(|(d, t)| Ok((*d, t.stop()?))).collect::<Result<Vec<_>>>()?;
        let ends: Vec<_> = ends.into_iter().rev().collect();
        self.end_call();
        Ok((out, cx.recorder.take().expect("set above").report(&ends)))
    }

    /// Calls a function value a host holds (`invoke_closure`).
    pub fn invoke_value(&self, f: &Value, args: &[Value]) -> Result<Value> {
        builtins::Machine::call_value(self, f, &args.iter().collect::<Vec<_>>(), &mut CallCtx::default())
    }

    fn call_packed(&self, f: &PackedFunc, args: &[&Value]) -> Result<Value> {
        // Kernels take tensors and numbers: lent, with no argument arrays on the heap.
        if let Some(r) = f.call_lent(args, |a| a.item()) {
            return Value::from_ret(r?);
        }
        let mut b = ArgsBuilder::new();
        for (i, a) in args.iter().enumerate() {
            a.push_arg(&mut b).map_err(|e| e.context(format!("argument {i}")))?;
        }
        Value::from_ret(f.call(&b.args())?)
    }

    fn call_index(&self, func: usize, args: &[&Value], cx: &mut CallCtx) -> Result<Value> {
        let name = || &self.exe.image.functions[func].name;
        match &self.targets[func] {
            Target::Builtin(_) | Target::Packed(_) if cx.recorder.is_some() => self.call_timed(func, args, cx),
            Target::Builtin(b) => b.call(self, args, cx).map_err(|e| e.context(name().to_string())),
            Target::Packed(p) => self.call_packed(p, args).map_err(|e| e.context(format!("calling '{}'", name()))),
            Target::Bytecode => {
                if cx.depth >= MAX_DEPTH {
                    return Err(Error::value(format!("Relax calls nested deeper than {MAX_DEPTH} in '{}'", name())));
                }
                cx.depth += 1;
                let mut list = self.frame_for(func);
                list.extend(args.iter().map(|&v| v.clone()));
                let r = self.run(func, list, cx);
                cx.depth -= 1;
                r
            }
        }
    }

    /// A kernel's or builtin's call, timed on the first device, with its tensors' shapes.
    fn call_timed(&self, func: usize, args: &[&Value], cx: &mut CallCtx) -> Result<Value> {
        let device = self.first_device();
        let started = crate::profiling::Timer::start(device)?;
        let mut recorder = cx.recorder.take();
        let out = match &self.targets[func] {
            Target::Builtin(b) => b.call(self, args, cx),
            Target::Packed(p) => self.call_packed(p, args),
            Target::Bytecode => unreachable!("only kernels and builtins are timed"),
        };
        let name = &self.exe.image.functions[func].name;
        let tensors: Vec<ObjRef<NDArray>> = args
            .iter()
            .filter_map(|&a| match a {
                Value::Tensor(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        if let Some(r) = &mut recorder {
            r.stop_call(name, device, started, &tensors, &[])?;
        }
        cx.recorder = recorder;
        out.map_err(|e| e.context(format!("calling '{name}'")))
    }

    /// Interprets bytecode function `func`.
    fn run(&self, func: usize, args: Vec<Value>, cx: &mut CallCtx) -> Result<Value> {
        let f = &self.exe.image.functions[func];
        if args.len() as i64 != f.num_args {
            let names = if f.params.is_empty() { String::new() } else { format!(" ({})", f.params.join(", ")) };
            return Err(Error::type_err(format!(
                "Function {} expects {} arguments{names}, but {} arguments were provided",
                f.name,
                f.num_args,
                args.len()
            )));
        }
        let mut frame = Frame(args);
        let regs = &mut frame.0;
        regs.resize_with(f.registers as usize, Value::default);
        let code = &self.exe.code;
        let mut pc = f.start as usize;
        loop {
            match &code.instrs[pc] {
                Instr::Call { dst, func: callee, args } => {
                    // A call's arguments are lent: registers, constants and the like by
                    // reference, in an array on the stack of about their number.
                    let operands = &code.operands[args.clone()];
                    let ret = match operands.len() {
                        0..=4 => self.call_lent::<4>(*callee, regs, operands, cx),
                        5..=8 => self.call_lent::<8>(*callee, regs, operands, cx),
                        9..=16 => self.call_lent::<16>(*callee, regs, operands, cx),
                        _ => {
                            let lent: Vec<&Value> = operands.iter().map(|a| self.operand(regs, a)).collect();
                            self.call_index(*callee, &lent, cx)
                        }
                    };
                    let ret = ret.map_err(|e| e.context(format!("in '{}'", f.name)))?;
                    if let Some(d) = dst {
                        regs[*d] = ret;
                    }
                    pc += 1;
                }
                Instr::Ret(r) => return Ok(self.reg(regs, *r).clone()),
                Instr::Goto(to) => pc = *to,
                Instr::If { cond, else_pc } => {
                    let taken = match self.reg(regs, *cond) {
                        Value::Int(i) => *i != 0,
                        other => {
                            return Err(Error::type_err(format!(
                                "'{}': an If on a {}, not an int",
                                f.name,
                                other.kind()
                            )))
                        }
                    };
                    pc = if taken { pc + 1 } else { *else_pc };
                }
            }
        }
    }

    /// Calls `callee` with `operands` (at most `N`) lent from the frame and the fixed values.
    #[inline]
    fn call_lent<const N: usize>(
        &self,
        callee: usize,
        regs: &[Value],
        operands: &[Operand],
        cx: &mut CallCtx,
    ) -> Result<Value> {
        let mut lent = [&self.fixed[FIXED_VOID]; N];
        for (slot, a) in lent.iter_mut().zip(operands) {
            *slot = self.operand(regs, a);
        }
        self.call_index(callee, &lent[..operands.len()], cx)
    }

    /// An empty argument list for `invoke` of `func`, with room for its whole frame: the
    /// thread's spare one when it has one (a frame gives its list back when it ends), so calls
    /// made over and over allocate no registers.
    pub fn frame_for(&self, func: usize) -> Vec<Value> {
        let registers = self.exe.image.functions[func].registers.max(0) as usize;
        let mut list = SPARE_FRAMES.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        list.reserve(registers);
        list
    }

    /// What register `r` holds.
    fn reg<'a>(&'a self, regs: &'a [Value], r: Reg) -> &'a Value {
        match r {
            Reg::Index(i) => &regs[i],
            Reg::Void => &self.fixed[FIXED_VOID],
            Reg::Vm => &self.fixed[FIXED_VM],
        }
    }

    /// What a call's operand stands for.
    #[inline]
    fn operand<'a>(&'a self, regs: &'a [Value], a: &Operand) -> &'a Value {
        match *a {
            Operand::Reg(i) => &regs[i],
            Operand::Fixed(k) => &self.fixed[k],
        }
    }
}

thread_local! {
    /// Register lists of frames that ended, for the thread's next calls (a few, not large ones).
    static SPARE_FRAMES: std::cell::RefCell<Vec<Vec<Value>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A frame's registers: emptied and kept for the thread's next frame when it ends.
struct Frame(Vec<Value>);

impl Drop for Frame {
    fn drop(&mut self) {
        let mut list = std::mem::take(&mut self.0);
        list.clear();
        if list.capacity() <= 4096 {
            let _ = SPARE_FRAMES.try_with(|s| {
                let mut spare = s.borrow_mut();
                if spare.len() < 8 {
                    spare.push(list);
                }
            });
        }
    }
}

/// A function-table entry as a value (a function argument).
fn function_value(targets: &[Target], g: usize) -> Value {
    match &targets[g] {
        Target::Packed(p) => Value::Func(Callable::Packed(p.clone())),
        _ => Value::Func(Callable::Closure { func: g, bound: Arc::from(Vec::new()) }),
    }
}
