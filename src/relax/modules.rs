//! The two modules hosts meet, with upstream's function tables: the executable
//! (`relax.Executable` in 0.19, `relax.VMExecutable` later; its library is its import) and the
//! VM `vm_load_executable` makes, which `vm_initialization` readies.
//!
//! A VM's Relax functions may be called from any number of threads at once: a call's registers
//! are its own. Only the stateful calls (`set_input`, `invoke_stateful`, `get_output`) keep
//! state, under a lock.

#![forbid(unsafe_code)]

use super::image::Generation;
use super::machine::{Executable, Machine};
use super::text;
use super::value::{Value, CLASSIC_BOOL, FFI_BOOL};
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::vm::storage::Allocator;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub struct ExecutableModule {
    pub exe: Arc<Executable>,
    type_key: &'static str,
}

impl ExecutableModule {
    pub fn module(exe: Executable, type_key: &'static str) -> ObjRef<Module> {
        Module::new(ExecutableModule { exe: Arc::new(exe), type_key })
    }
}

/// The Relax executable of a module that is one.
pub fn executable_of(m: &ObjRef<Module>) -> Option<Arc<Executable>> {
    m.node::<ExecutableModule>().map(|e| e.exe.clone())
}

impl ModuleNode for ExecutableModule {
    fn type_key(&self) -> &str {
        self.type_key
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let exe = self.exe.clone();
        let m = this.clone();
        Ok(Some(match name {
            "vm_load_executable" => PackedFunc::native(move |_| Ok(VirtualMachine::create(&m, false)?.into())),
            "vm_profiler_load_executable" => PackedFunc::native(move |_| Ok(VirtualMachine::create(&m, true)?.into())),
            "stats" => PackedFunc::native(move |_| Ok(text::stats(&exe).into())),
            "as_text" => PackedFunc::native(move |_| Ok(text::as_text(&exe).into())),
            "as_python" => PackedFunc::native(move |_| Ok(text::as_python(&exe).into())),
            "tvmrt.describe" => {
                PackedFunc::native(move |_| Ok(text::describe(&exe, !m.imports().is_empty()).to_string().into()))
            }
            "tvmrt.memory_usage" => PackedFunc::native(move |_| Ok(text::memory(&exe).to_string().into())),
            // This runtime's: the tensor constants from an aligned file every process maps (written
            // first when it is not these constants'); returns whether it was written.
            "tvmrt.map_constants" => {
                let exe = self.exe.clone();
                PackedFunc::native(move |a| {
                    let path = std::path::Path::new(a.str(0)?);
                    Ok(RetValue::Int(i64::from(exe.map_constants(path, || a.mapped_file(0))?)))
                })
            }
            "has_function" => {
                PackedFunc::native(move |a| Ok(RetValue::Int(exe.by_name.contains_key(a.str(0)?) as i64)))
            }
            _ => return Ok(None),
        }))
    }

    fn property_mask(&self) -> i32 {
        property::BINARY_SERIALIZABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Default)]
struct Stateful {
    inputs: HashMap<String, Vec<Value>>,
    outputs: HashMap<String, Value>,
    /// `save_function`'s closures: a function with its trailing arguments bound, and whether a
    /// call returns the result.
    saved: HashMap<String, (usize, Vec<Value>, bool)>,
}

/// `relax.VirtualMachine`.
pub struct VirtualMachine {
    exe_module: ObjRef<Module>,
    exe: Arc<Executable>,
    machine: RwLock<Option<Arc<Machine>>>,
    state: Mutex<Stateful>,
    /// Made by `vm_profiler_load_executable`: answers `profile` and `profile_rpc`.
    profiler: bool,
    /// Threads the kernels of this VM's calls use (`set_num_threads`; 0: the process's).
    threads: AtomicUsize,
}

impl VirtualMachine {
    pub fn create(exe_module: &ObjRef<Module>, profiler: bool) -> Result<ObjRef<Module>> {
        let exe = executable_of(exe_module).ok_or_else(|| Error::type_err("not a Relax executable"))?;
        Ok(Module::new(VirtualMachine {
            exe_module: exe_module.clone(),
            exe,
            machine: RwLock::default(),
            state: Mutex::default(),
            profiler,
            threads: AtomicUsize::new(0),
        }))
    }

    fn machine(&self) -> Result<Arc<Machine>> {
        self.machine.read().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(|| {
            Error::value(
                "the VM is not initialised: call vm_initialization(device_type, device_id, alloc_type, ...) first",
            )
        })
    }

    fn init(&self, a: &Args<'_>) -> Result<()> {
        if a.is_empty() || a.len() % 3 != 0 {
            return Err(Error::type_err(format!(
                "vm_initialization takes (device_type, device_id, alloc_type) per device, got {} arguments",
                a.len()
            )));
        }
        let devices = (0..a.len() / 3)
            .map(|i| {
                let device = DLDevice { device_type: a.int32(3 * i)?, device_id: a.int32(3 * i + 1)? };
                Ok((device, Allocator::from_code(a.int(3 * i + 2)?)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let machine = Machine::new(self.exe.clone(), &self.exe_module, devices)?;
        *self.machine.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(machine));
        Ok(())
    }

    /// A host's arguments as values, on the VM's first device (booleans as the kernels' ABI
    /// has them).
    fn values(m: &Machine, a: &Args<'_>, from: usize) -> Result<Vec<Value>> {
        Self::values_into(m, a, from..a.len(), Vec::new())
    }

    /// Arguments `range` of a host's call as values, appended to `values`.
    fn values_into(
        m: &Machine,
        a: &Args<'_>,
        range: std::ops::Range<usize>,
        mut values: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let ffi = m.exe.generation == Generation::Ffi;
        values.reserve(range.len());
        for i in range {
            let v = Value::from_arg(a, i, m.first_device())?;
            values.push(if ffi { v.relabel_bools(CLASSIC_BOOL, FFI_BOOL)? } else { v });
        }
        Ok(values)
    }

    /// A value as a (classic) host sees it: booleans as `uint1`.
    fn for_host(&self, v: Value) -> Result<Value> {
        if self.exe.generation == Generation::Ffi {
            v.relabel_bools(FFI_BOOL, CLASSIC_BOOL)
        } else {
            Ok(v)
        }
    }

    /// A value returned to a (classic) host.
    fn ret(&self, v: Value) -> Result<RetValue> {
        self.for_host(v)?.to_ret()
    }

    fn call(&self, func: usize, a: &Args<'_>) -> Result<RetValue> {
        let m = self.machine()?;
        let args = Self::values_into(&m, a, 0..a.len(), m.frame_for(func))?;
        self.ret(m.invoke(func, args)?)
    }

    /// `tvmrt.run_into(func_name, n, args (n of them), outputs...)`: calls the function, then
    /// copies its result (tuples flattened, in order) into the output tensors and returns 0 when
    /// each has its shape and dtype; otherwise writes nothing and returns the result itself. A
    /// host that made the outputs from an earlier result of the same input shapes (the package's
    /// quick request) so learns of an output whose shape follows the data.
    fn run_into(&self, a: &Args<'_>) -> Result<RetValue> {
        let func = self.exe.function(a.str(0)?)?;
        let n = a.int(1)?;
        let ins = usize::try_from(n).ok().filter(|&n| n + 2 <= a.len()).ok_or_else(|| {
            Error::type_err(format!("tvmrt.run_into takes (name, n, n arguments, outputs...): n = {n} of {}", a.len()))
        })?;
        let m = self.machine()?;
        let args = Self::values_into(&m, a, 2..2 + ins, m.frame_for(func))?;
        let out = self.for_host(m.invoke(func, args)?)?;
        let mut flat = Vec::new();
        let targets = 2 + ins..a.len();
        let fits = out.flatten_tensors(&mut flat)
            && flat.len() == targets.len()
            && flat
                .iter()
                .zip(targets.clone())
                .all(|(t, i)| a.tensor(i).is_ok_and(|to| to.has_shape(t.shape()) && to.dtype() == t.dtype()));
        if !fits {
            return out.to_ret();
        }
        for (t, i) in flat.iter().zip(targets) {
            a.write_tensor(i, t.raw()).map_err(|e| e.context(format!("output {}", i - 2 - ins)))?;
        }
        Ok(RetValue::Int(0))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stateful> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_input(&self, a: &Args<'_>) -> Result<()> {
        let name = a.str(0)?;
        let func = self.exe.function(name)?;
        let want = self.exe.image.functions[func].num_args;
        if (a.len() - 1) as i64 != want {
            return Err(Error::type_err(format!(
                "set_input of '{name}': the function takes {want} arguments, {} given",
                a.len() - 1
            )));
        }
        let values = Self::values(&*self.machine()?, a, 1)?;
        self.lock().inputs.insert(name.to_string(), values);
        Ok(())
    }

    fn invoke_stateful(&self, name: &str) -> Result<()> {
        let func = self.exe.function(name)?;
        let inputs = self.lock().inputs.get(name).cloned().ok_or_else(|| {
            Error::value(format!("No inputs set for stateful call of {name}; use `set_input` first."))
        })?;
        let out = self.machine()?.invoke(func, inputs)?;
        self.lock().outputs.insert(name.to_string(), out);
        Ok(())
    }

    /// The saved output of `name`, indexed into by the arguments after the name.
    fn output(&self, a: &Args<'_>) -> Result<Value> {
        let name = a.str(0)?;
        let mut v = self.lock().outputs.get(name).cloned().ok_or_else(|| {
            Error::value(format!("No output saved for call of \"{name}\"; use `invoke_stateful` to call it first."))
        })?;
        for i in 1..a.len() {
            let k = a.int(i)?;
            let t = v.tuple().map_err(|e| e.context(format!("index {i}")))?;
            v = usize::try_from(k)
                .ok()
                .and_then(|k| t.get(k))
                .cloned()
                .ok_or_else(|| Error::index(format!("output index {k} of a tuple of {}", t.len())))?;
        }
        Ok(v)
    }

    /// `save_function(func_name, save_name, include_return, args...)`: `save_name` then calls
    /// `func_name` with those arguments after its own (as upstream binds them).
    fn save_function(&self, a: &Args<'_>) -> Result<()> {
        let (func, save_name) = (self.exe.function(a.str(0)?)?, a.str(1)?);
        let include_return = a.int(2)? != 0;
        let bound = Self::values(&*self.machine()?, a, 3)?;
        self.lock().saved.insert(save_name.to_string(), (func, bound, include_return));
        Ok(())
    }

    fn call_saved(&self, name: &str, a: &Args<'_>) -> Result<RetValue> {
        let (func, bound, include_return) =
            self.lock().saved.get(name).cloned().ok_or_else(|| Error::value(format!("Unknown function: {name}")))?;
        let m = self.machine()?;
        let mut args = Self::values_into(&m, a, 0..a.len(), m.frame_for(func))?;
        args.extend(bound);
        let out = m.invoke(func, args)?;
        if include_return {
            self.ret(out)
        } else {
            Ok(RetValue::None)
        }
    }

    /// `profile(func_name, args...)`: one call of the function, each kernel and builtin timed
    /// (after one untimed call, so the first allocations are not counted), as upstream's report.
    /// With no arguments (or one None, as the Relay VM's profiler is called) it runs on the
    /// inputs `set_input` gave.
    fn profile(&self, a: &Args<'_>) -> Result<crate::profiling::Report> {
        let name = a.str(0)?;
        let stateful = a.len() == 1 || (a.len() == 2 && a.code(1) == crate::dlpack::kTVMNullptr);
        if stateful {
            return self.profile_stateful(name);
        }
        let func = self.exe.function(name)?;
        let m = self.machine()?;
        let args = Self::values(&m, a, 1)?;
        m.invoke(func, args.clone())?;
        Ok(m.invoke_profiled(func, args)?.1)
    }

    /// `profile` on the inputs `set_input` gave (`profile_rpc` returns its JSON).
    fn profile_stateful(&self, name: &str) -> Result<crate::profiling::Report> {
        let func = self.exe.function(name)?;
        let inputs = self.lock().inputs.get(name).cloned().ok_or_else(|| {
            Error::value(format!("No inputs set for stateful call of {name}; use `set_input` first."))
        })?;
        let m = self.machine()?;
        m.invoke(func, inputs.clone())?;
        Ok(m.invoke_profiled(func, inputs)?.1)
    }

    fn param_names(&self, name: &str) -> Result<&[String]> {
        Ok(&self.exe.image.functions[self.exe.function(name)?].params)
    }
}

impl ModuleNode for VirtualMachine {
    fn type_key(&self) -> &str {
        "relax.VirtualMachine"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let vm = this.clone();
        // Every function runs its kernels on the VM's thread count.
        let with = move |f: fn(&VirtualMachine, &Args<'_>) -> Result<RetValue>| {
            let vm = vm.clone();
            PackedFunc::native(move |a| {
                let vm = vm.node::<VirtualMachine>().expect("a VM");
                crate::backend::thread_pool::with_threads(vm.threads.load(Ordering::Relaxed), || f(vm, a))
            })
        };
        Ok(Some(match name {
            // `init` and `invoke` are the Relay VM's names, which the project's tools use for both.
            "vm_initialization" | "init" => with(|vm, a| vm.init(a).map(|_| RetValue::None)),
            "invoke" => with(|vm, a| {
                let name = a.str(0)?;
                vm.invoke_stateful(name)?;
                let out = vm.lock().outputs.remove(name).expect("just stored");
                vm.ret(out)
            }),
            "set_input" => with(|vm, a| vm.set_input(a).map(|_| RetValue::None)),
            "tvmrt.run_into" => with(|vm, a| vm.run_into(a)),
            "save_function" => with(|vm, a| vm.save_function(a).map(|_| RetValue::None)),
            // Found (hosts look them up as they make a VM), refused when called.
            "set_input_with_param_module" | "set_instrument" => {
                let name = name.to_string();
                PackedFunc::native(move |_| {
                    Err(Error::value(format!("relax.VirtualMachine.{name} is not supported by this runtime")))
                })
            }
            "invoke_stateful" => with(|vm, a| vm.invoke_stateful(a.str(0)?).map(|_| RetValue::None)),
            "profile" if self.profiler => with(|vm, a| Ok(RetValue::Object(vm.profile(a)?.to_object().into_any()))),
            "profile_rpc" if self.profiler => {
                with(|vm, a| Ok(RetValue::Str(crate::profiling::json::to_json(&vm.profile_stateful(a.str(0)?)?))))
            }
            "get_output" => with(|vm, a| match vm.output(a)? {
                Value::Tuple(_) => Err(Error::value(
                    "`get_output` cannot return a tuple for RPC compatibility. Please specify another index argument.",
                )),
                v => vm.ret(v),
            }),
            "get_output_arity" => with(|vm, a| {
                Ok(RetValue::Int(match vm.output(a)? {
                    Value::Tuple(t) => t.len() as i64,
                    _ => -1,
                }))
            }),
            "invoke_closure" => with(|vm, a| {
                let m = vm.machine()?;
                let values = Self::values(&m, a, 0)?;
                let (f, rest) = values.split_first().ok_or_else(|| Error::type_err("invoke_closure of nothing"))?;
                vm.ret(m.invoke_value(f, rest)?)
            }),
            "get_function_arity" => with(|vm, a| Ok(RetValue::Int(vm.param_names(a.str(0)?)?.len() as i64))),
            "get_function_param_name" => with(|vm, a| {
                let (name, i) = (a.str(0)?, a.int(1)?);
                let params = vm.param_names(name)?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| params.get(i))
                    .map(|p| p.as_str().into())
                    .ok_or_else(|| Error::value(format!("Invalid index for {name} ({i} out of {})", params.len())))
            }),
            "set_num_threads" => with(|vm, a| {
                let n = a.int(0)?;
                let n = usize::try_from(n).map_err(|_| Error::value(format!("set_num_threads({n})")))?;
                vm.threads.store(n, Ordering::Relaxed);
                Ok(RetValue::None)
            }),
            _ if self.lock().saved.contains_key(name) => {
                let (vm, name) = (this.clone(), name.to_string());
                PackedFunc::native(move |a| {
                    let vm = vm.node::<VirtualMachine>().expect("a VM");
                    crate::backend::thread_pool::with_threads(vm.threads.load(Ordering::Relaxed), || {
                        vm.call_saved(&name, a)
                    })
                })
            }
            _ => {
                let Ok(func) = self.exe.function(name) else { return Ok(None) };
                let vm = this.clone();
                PackedFunc::native(move |a| {
                    let vm = vm.node::<VirtualMachine>().expect("a VM");
                    crate::backend::thread_pool::with_threads(vm.threads.load(Ordering::Relaxed), || vm.call(func, a))
                })
            }
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
