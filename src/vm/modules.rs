//! The two modules hosts meet, with upstream's function tables: `VMExecutable` (the code, its
//! constants, its library as import 0) and `VirtualMachine` (made from it by `vm_load_executable`
//! or `runtime._VirtualMachine`; `runtime._VirtualMachineDebug` makes one that also profiles).

#![forbid(unsafe_code)]

use super::code::Instr;
use super::executable::Executable;
use super::machine::{Device, Machine, OutputBinding};
use super::objects::AdtObj;
use super::profiler::Recorder;
use super::storage::Allocator;
use super::text;
use crate::dlpack::{kTVMDLTensorHandle, kTVMNDArrayHandle, kTVMObjectHandle, DLDevice};
use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::{AnyObject, ObjRef};
use crate::packed::{Args, MapObj, PackedFunc, RetValue, StringObj};
use crate::tensor::NDArray;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// `VMExecutable`.
pub struct ExecutableModule {
    pub exe: Arc<Executable>,
}

impl ExecutableModule {
    /// The module of `exe`.
    pub fn module(exe: Executable) -> ObjRef<Module> {
        Module::new(ExecutableModule { exe: Arc::new(exe) })
    }
}

/// The executable of a module that is one.
pub fn executable_of(m: &ObjRef<Module>) -> Result<Arc<Executable>> {
    m.node::<ExecutableModule>()
        .map(|e| e.exe.clone())
        .ok_or_else(|| Error::type_err(format!("the module is a {}, not a VMExecutable", m.type_key())))
}

fn native(
    this: &ObjRef<Module>,
    f: impl Fn(&Arc<Executable>, &ObjRef<Module>, &Args<'_>) -> Result<RetValue> + Send + Sync + 'static,
) -> ObjRef<PackedFunc> {
    let exe = executable_of(this).expect("functions are made for executables");
    let m = this.clone();
    PackedFunc::native(move |a| f(&exe, &m, a))
}

impl ModuleNode for ExecutableModule {
    fn type_key(&self) -> &str {
        "VMExecutable"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let f = match name {
            "vm_load_executable" => native(this, |_, m, _| Ok(VirtualMachine::create(m, false)?.into())),
            "save" => native(this, |exe, _, _| Ok(RetValue::Bytes(exe.save()))),
            "get_lib" => native(this, |_, m, _| Ok(m.imports().first().cloned().map_or(RetValue::None, Into::into))),
            "get_bytecode" => native(this, |exe, _, _| Ok(text::bytecode(&exe.program).into())),
            "get_constants" => native(this, |exe, _, _| Ok(text::constants(exe).into())),
            "get_virtual_devices" => native(this, |exe, _, _| Ok(text::devices(&exe.program).into())),
            "get_primitives" => native(this, |exe, _, _| Ok(text::primitives(&exe.program).into())),
            "get_stats" => native(this, |exe, _, _| Ok(text::stats(exe).into())),
            "get_function_arity" => {
                native(this, |exe, _, a| Ok(RetValue::Int(exe.program.function(a.str(0)?)?.params.len() as i64)))
            }
            "get_function_param_name" => native(this, |exe, _, a| {
                let f = exe.program.function(a.str(0)?)?;
                let i = a.int(1)?;
                let p = usize::try_from(i).ok().and_then(|i| f.params.get(i));
                p.map(|s| s.as_str().into())
                    .ok_or_else(|| Error::index(format!("parameter {i} of '{}', which has {}", f.name, f.params.len())))
            }),
            "move_late_bound_consts" => native(this, |exe, _, a| {
                let moved = exe.constants.make_late_bound(a.int(1)?)?;
                let bytes = crate::params::save(moved.iter().map(|(n, t)| (n.as_str(), &**t)));
                crate::files::write_whole(std::path::Path::new(a.str(0)?), &bytes)?;
                Ok(RetValue::None)
            }),
            "get_late_bound_consts" => native(this, |exe, _, a| {
                let moved = exe.constants.make_late_bound(a.int(0)?)?;
                let pairs = moved.into_iter().map(|(n, t)| (StringObj::new(&n).into_any(), t.into_any())).collect();
                Ok(MapObj::new(pairs).into())
            }),
            "load_late_bound_consts" => native(this, |exe, _, a| {
                load_late_bound(exe, &crate::files::read(std::path::Path::new(a.str(0)?))?)?;
                Ok(RetValue::None)
            }),
            "load_late_bound_consts_from_map" => native(this, |exe, _, a| {
                let map = a.typed_object::<MapObj>(0, "Map")?;
                let mut pairs = Vec::new();
                for (k, v) in map.entries() {
                    let k =
                        k.downcast_ref::<StringObj>().ok_or_else(|| Error::type_err("the map's keys are strings"))?;
                    let v =
                        v.downcast_ref::<NDArray>().ok_or_else(|| Error::type_err("the map's values are tensors"))?;
                    pairs.push((k.as_str().to_string(), v));
                }
                exe.constants.bind(&pairs).map(Into::into)
            }),
            // This runtime's: the constants from an aligned file, mapped and shared by every process
            // (written first when it is not this executable's); returns whether it was written.
            "tvmrt.map_constants" => native(this, |exe, _, a| {
                let path = std::path::Path::new(a.str(0)?);
                Ok(RetValue::Int(i64::from(exe.constants.map_file(path, || a.mapped_file(0))?)))
            }),
            "tvmrt.memory_usage" => native(this, |exe, _, _| Ok(text::memory(exe).to_string().into())),
            "tvmrt.describe" => {
                native(this, |exe, m, _| Ok(text::describe(exe, !m.imports().is_empty()).to_string().into()))
            }
            _ => return Ok(None),
        };
        Ok(Some(f))
    }

    fn property_mask(&self) -> i32 {
        property::BINARY_SERIALIZABLE
    }

    /// What a blob entry holds (the bytecode as one string), which
    /// `runtime.module.loadfile_VMExecutable` reads back, as upstream writes it.
    fn save_to_file(&self, path: &str, _format: &str) -> Result<()> {
        let code = self.exe.save();
        let mut w = crate::stream::Writer::default();
        w.u64(code.len() as u64);
        w.bytes(&code);
        crate::files::write_whole(std::path::Path::new(path), &w.buf)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Binds the late-bound constants from a params blob of them.
fn load_late_bound(exe: &Executable, bytes: &[u8]) -> Result<()> {
    let tensors = crate::params::parse(bytes)?
        .into_iter()
        .map(|(n, r)| Ok((n.to_string(), r.to_ndarray()?)))
        .collect::<Result<Vec<_>>>()?;
    exe.constants.bind(&tensors)
}

/// What a VM keeps between calls.
#[derive(Default)]
struct State {
    machine: Option<Machine>,
    inputs: HashMap<String, Vec<Option<AnyObject>>>,
    outputs: HashMap<String, OutputBinding>,
    result: Option<AnyObject>,
    /// Threads the kernels use (`set_num_threads`; 0: the process's).
    threads: usize,
}

/// `VirtualMachine`: one caller at a time (its calls serialise); VMs of one executable share its
/// code, constants and storage pools, so several run in parallel, one per thread.
pub struct VirtualMachine {
    /// The executable module (holding the library as its import).
    exe_module: ObjRef<Module>,
    exe: Arc<Executable>,
    /// Shared with the fork handlers, which take it around a fork.
    state: Arc<Mutex<State>>,
    debug: bool,
}

impl VirtualMachine {
    /// A VM of the executable module `exe_module`; `debug` adds `profile`.
    pub fn create(exe_module: &ObjRef<Module>, debug: bool) -> Result<ObjRef<Module>> {
        let exe = executable_of(exe_module)?;
        let unbound = exe.constants.unbound();
        if !unbound.is_empty() {
            return Err(Error::value(format!(
                "Need to load late-bound-constants before creating VM ({} unbound: {})",
                unbound.len(),
                unbound.join(", ")
            )));
        }
        Ok(Module::new(VirtualMachine { exe_module: exe_module.clone(), exe, state: fork_guarded(), debug }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernels the code calls, found in the executable's library (imports included).
    fn kernels(&self) -> Result<Vec<ObjRef<PackedFunc>>> {
        let prims = &self.exe.program.primitives;
        if prims.is_empty() {
            return Ok(Vec::new());
        }
        let lib = self.exe_module.imports().first().cloned().ok_or_else(|| {
            Error::value(
                "If the executable has declared primitive functions, the generated kernel library must be given",
            )
        })?;
        prims
            .iter()
            .map(|name| {
                Module::get_function(&lib, name, true)?.ok_or_else(|| {
                    Error::attribute(format!(
                        "Cannot find function in module: {name} (the executable's kernel library lacks it)"
                    ))
                })
            })
            .collect()
    }

    /// `init`: a (device type, device id, allocator type) triple per device.
    fn init(&self, a: &Args<'_>) -> Result<()> {
        if a.is_empty() || a.len() % 3 != 0 {
            return Err(Error::value("init takes (device type, device id, allocator type) triples"));
        }
        let mut given = Vec::new();
        for i in (0..a.len()).step_by(3) {
            let device = DLDevice { device_type: a.int32(i)?, device_id: a.int32(i + 1)? };
            crate::device::api_of(device)?;
            given.push((device, Allocator::from_code(a.int(i + 2)?)?));
        }
        let devices: Vec<Device> = Machine::devices_for(&self.exe.program, &given, &self.exe.pools)?;
        let kernels = self.kernels()?;
        let machine =
            Machine { program: self.exe.program.clone(), constants: self.exe.constants.clone(), kernels, devices };
        self.lock().machine = Some(machine);
        Ok(())
    }

    fn machine(st: &State) -> Result<&Machine> {
        st.machine.as_ref().ok_or_else(|| {
            Error::value("the VM is not initialised: call init(device type, device id, allocator type, ...) first")
        })
    }

    /// Argument `i` of a packed call as a value on `device`: a tensor (copied there unless it is
    /// one of this runtime's arrays there already), or a tuple of them.
    fn value_on(a: &Args<'_>, i: usize, device: DLDevice) -> Result<AnyObject> {
        match a.code(i) {
            kTVMDLTensorHandle => Ok(NDArray::copy_of(a.tensor(i)?, device)?.into_any()),
            kTVMNDArrayHandle | kTVMObjectHandle => {
                let o = a.object(i)?.ok_or_else(|| Error::value(format!("argument {i} is null")))?;
                to_device(o, device)
            }
            other => Err(Error::type_err(format!(
                "argument {i}: a tensor or a tuple of them, not a {}",
                crate::packed::args::type_code_name(other)
            ))),
        }
    }

    fn set_input(&self, func: &str, a: &Args<'_>, from: usize) -> Result<()> {
        let mut st = self.lock();
        let m = Self::machine(&st)?;
        let f = m.program.function(func)?;
        if a.len() - from != f.params.len() {
            return Err(Error::value(format!(
                "The number of provided parameters doesn't match the number of arguments: '{func}' takes {}, {} given",
                f.params.len(),
                a.len() - from
            )));
        }
        let values = (from..a.len())
            .map(|i| {
                let device = m.devices[f.param_devices[i - from]].device;
                Self::value_on(a, i, device).map(Some).map_err(|e| e.context(format!("input '{}'", f.params[i - from])))
            })
            .collect::<Result<Vec<_>>>()?;
        st.inputs.insert(func.to_string(), values);
        Ok(())
    }

    fn set_one_input(&self, a: &Args<'_>) -> Result<()> {
        a.expect_count("set_one_input", 3, 3)?;
        let func = a.str(0)?;
        let mut st = self.lock();
        let m = Self::machine(&st)?;
        let f = m.program.function(func)?;
        let index = if a.is_name(1) {
            let name = a.str(1)?;
            f.params.iter().position(|p| p == name).ok_or_else(|| {
                Error::key(format!(
                    "'{func}' has no parameter named '{name}' (its parameters: {})",
                    f.params.join(", ")
                ))
            })?
        } else {
            let i = a.int(1)?;
            usize::try_from(i)
                .ok()
                .filter(|&i| i < f.params.len())
                .ok_or_else(|| Error::index(format!("parameter {i} of '{func}', which has {}", f.params.len())))?
        };
        let value = Self::value_on(a, 2, m.devices[f.param_devices[index]].device)?;
        let n = f.params.len();
        let slots = st.inputs.entry(func.to_string()).or_insert_with(|| vec![None; n]);
        slots[index] = Some(value);
        Ok(())
    }

    fn set_outputs(&self, a: &Args<'_>) -> Result<()> {
        if a.len() < 2 {
            return Err(Error::value("There is no output arguments set: set_outputs(function name, tensors...)"));
        }
        let func = a.str(0)?;
        let mut st = self.lock();
        let m = Self::machine(&st)?;
        let f = m.program.function(func)?;
        let regs = output_registers(&f.code)?;
        if regs.len() != a.len() - 1 {
            return Err(Error::value(format!(
                "Number of outside output tensors should be equal to model outputs number: {} given for {}",
                a.len() - 1,
                regs.len()
            )));
        }
        let mut binding = Vec::new();
        for (k, r) in regs.into_iter().enumerate() {
            let t = match a.code(k + 1) {
                kTVMDLTensorHandle => NDArray::over_zero_copy(a.zero_copy(k + 1)?)?,
                _ => a.ndarray(k + 1)?,
            };
            // Kernels write outputs with stores aligned to the runtime's alignment: an unaligned
            // tensor would fault inside them (upstream refuses it too).
            if crate::device::is_host(t.device()) && t.data_ptr() as usize % crate::tensor::ALIGNMENT != 0 {
                return Err(Error::value(format!(
                    "output tensor {k}: its data must be aligned to {} bytes",
                    crate::tensor::ALIGNMENT
                )));
            }
            binding.push((r, t));
        }
        st.outputs.insert(func.to_string(), binding);
        Ok(())
    }

    /// Runs `func` on the inputs set for it; the result is kept for `get_output`.
    fn invoke(&self, func: &str, rec: Option<&mut Recorder>) -> Result<AnyObject> {
        // Through the fork gate: a fork waits for this invocation (see `backend::fork`).
        let _inside = crate::backend::fork::inside();
        let mut st = self.lock();
        let m = Self::machine(&st)?;
        let index = m.program.function_index(func)?;
        let f = &m.program.functions[index];
        let args = if f.params.is_empty() {
            Vec::new()
        } else {
            let given = st
                .inputs
                .get(func)
                .ok_or_else(|| Error::value(format!("Input has not been set for function {func}")))?;
            given
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.clone().ok_or_else(|| Error::value(format!("input '{}' of '{func}' was not set", f.params[i])))
                })
                .collect::<Result<Vec<_>>>()?
        };
        let outputs = st.outputs.remove(func).unwrap_or_default();
        let m = Self::machine(&st)?;
        let result = crate::backend::thread_pool::with_threads(st.threads, || m.invoke(index, args, &outputs, rec))?;
        st.result = Some(result.clone());
        Ok(result)
    }

    fn output(&self, i: i64) -> Result<ObjRef<NDArray>> {
        let st = self.lock();
        let result = st.result.as_ref().ok_or_else(|| Error::value("no output: invoke the VM first"))?;
        let item = match result.downcast_ref::<AdtObj>() {
            Some(adt) => usize::try_from(i)
                .ok()
                .and_then(|i| adt.fields().get(i))
                .cloned()
                .ok_or_else(|| Error::index(format!("output {i} of {}", adt.fields().len())))?,
            None if i == 0 => result.clone(),
            None => {
                return Err(Error::index(format!(
                    "VM output contains only one item, but you are trying to get the {i}th."
                )))
            }
        };
        item.downcast::<NDArray>()
            .map_err(|o| Error::type_err(format!("output {i} is a {}, not a tensor", o.type_key())))
    }

    fn profile(&self, func: &str) -> Result<crate::profiling::Report> {
        for _ in 0..3 {
            self.invoke(func, None)?;
        }
        let devices: Vec<DLDevice> = {
            let st = self.lock();
            let mut ds: Vec<DLDevice> = Self::machine(&st)?.devices.iter().map(|d| d.device).collect();
            ds.dedup();
            ds
        };
        let totals =
            devices.iter().map(|&d| Ok((d, crate::profiling::Timer::start(d)?))).collect::<Result<Vec<_>>>()?;
        let mut rec = Recorder::default();
        self.invoke(func, Some(&mut rec))?;
        let ends = totals.iter().rev().map(|(d, t)| Ok((*d, t.stop()?))).collect::<Result<Vec<_>>>()?;
        Ok(rec.report(&ends.into_iter().rev().collect::<Vec<_>>()))
    }
}

/// A tensor or a tuple of them, with every tensor on `device`.
fn to_device(o: AnyObject, device: DLDevice) -> Result<AnyObject> {
    if let Some(t) = o.downcast_ref::<NDArray>() {
        return Ok(if crate::device::same_memory(t.device(), device) {
            o
        } else {
            NDArray::copy_of(t.raw(), device)?.into_any()
        });
    }
    if let Some(adt) = o.downcast_ref::<AdtObj>() {
        let fields = adt.fields().iter().cloned().map(|f| to_device(f, device)).collect::<Result<Vec<_>>>()?;
        return Ok(AdtObj::new(adt.tag(), fields).into_any());
    }
    Err(Error::type_err(format!("VM data must be tensors or tuples of them, not a {}", o.type_key())))
}

/// The registers a function's outputs are allocated in (for `set_outputs`): found from the
/// instruction that writes the returned register.
fn output_registers(code: &[Instr]) -> Result<Vec<usize>> {
    let result = code
        .iter()
        .find_map(|i| match i {
            Instr::Ret { result } => Some(*result),
            _ => None,
        })
        .ok_or_else(|| Error::value("the function never returns"))?;
    let writer = code.iter().find(|i| match i {
        Instr::AllocTensor { dst, .. } | Instr::AllocAdt { dst, .. } | Instr::ReshapeTensor { dst, .. } => {
            *dst == result
        }
        _ => false,
    });
    match writer {
        Some(Instr::AllocTensor { .. }) => Ok(vec![result]),
        Some(Instr::AllocAdt { fields, .. }) => Ok(fields.to_vec()),
        Some(Instr::ReshapeTensor { tensor, .. }) => Ok(vec![*tensor]),
        _ => Err(Error::value("set_outputs: the function's result is not allocated by a tensor or tuple instruction")),
    }
}

fn vm_of(this: &ObjRef<Module>) -> Arc<VirtualMachine> {
    this.shared_node::<VirtualMachine>().expect("functions are made for VMs")
}

fn wrap(
    this: &ObjRef<Module>,
    f: impl Fn(&VirtualMachine, &Args<'_>) -> Result<RetValue> + Send + Sync + 'static,
) -> ObjRef<PackedFunc> {
    let vm = vm_of(this);
    PackedFunc::native(move |a| f(&vm, a))
}

impl ModuleNode for VirtualMachine {
    fn type_key(&self) -> &str {
        "VirtualMachine"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let f = match name {
            "init" => wrap(this, |vm, a| vm.init(a).map(Into::into)),
            "set_input" => wrap(this, |vm, a| vm.set_input(a.str(0)?, a, 1).map(Into::into)),
            "set_one_input" => wrap(this, |vm, a| vm.set_one_input(a).map(Into::into)),
            "set_outputs" => wrap(this, |vm, a| vm.set_outputs(a).map(Into::into)),
            "invoke" => wrap(this, |vm, a| Ok(vm.invoke(a.str(0)?, None)?.into())),
            "invoke_stateful" => wrap(this, |vm, a| vm.invoke(a.str(0)?, None).map(|_| RetValue::None)),
            "invoke_return_to_device" => wrap(this, |vm, a| {
                if a.len() < 3 {
                    return Err(Error::value(
                        "invoke_return_to_device(function name, device type, device id, inputs...)",
                    ));
                }
                let func = a.str(0)?;
                let host = DLDevice { device_type: a.int32(1)?, device_id: a.int32(2)? };
                vm.set_input(func, a, 3)?;
                Ok(to_device(vm.invoke(func, None)?, host)?.into())
            }),
            "get_output" => wrap(this, |vm, a| Ok(vm.output(a.int(0)?)?.into())),
            "get_num_outputs" => wrap(this, |vm, _| {
                let st = vm.lock();
                let result = st.result.as_ref().ok_or_else(|| Error::value("no output: invoke the VM first"))?;
                Ok(RetValue::Int(result.downcast_ref::<AdtObj>().map_or(1, |a| a.fields().len()) as i64))
            }),
            "get_input_index" => wrap(this, |vm, a| {
                let (input, func) = (a.str(0)?, a.str(1)?);
                let f = vm.exe.program.function(func)?;
                Ok(RetValue::Int(f.params.iter().position(|p| p == input).map_or(-1, |i| i as i64)))
            }),
            "set_num_threads" => wrap(this, |vm, a| {
                let n = a.int(0)?;
                vm.lock().threads = usize::try_from(n).map_err(|_| Error::value(format!("set_num_threads({n})")))?;
                Ok(RetValue::None)
            }),
            "load_late_bound_consts" => wrap(this, |vm, a| {
                load_late_bound(&vm.exe, &crate::files::read(std::path::Path::new(a.str(0)?))?)?;
                Ok(RetValue::None)
            }),
            "profile" if self.debug => wrap(this, |vm, a| Ok(vm.profile(a.str(0)?)?.to_object().into_any().into())),
            "profile_rpc" if self.debug => {
                wrap(this, |vm, a| Ok(crate::profiling::json::to_json(&vm.profile(a.str(0)?)?).into()))
            }
            _ => return Ok(None),
        };
        Ok(Some(f))
    }

    fn property_mask(&self) -> i32 {
        property::RUNNABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A VM's state, which forks take and let go (an invocation on another thread ends first).
fn fork_guarded() -> Arc<Mutex<State>> {
    let state = Arc::new(Mutex::new(State::default()));
    crate::backend::fork::guard(&state);
    state
}
