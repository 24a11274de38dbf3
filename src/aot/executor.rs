//! The AOT executor: the compiled entry function does the whole model, so the executor holds an
//! array per input and output (upstream's: `get_input` hands out the array `set_input` writes, as
//! TVM's `AotModule.set_input` relies on), the workspace pools USMP planned (its own), and the
//! model's shared constant pool; `run` is one call. Without USMP the code takes its
//! intermediates from `TVMBackendAllocWorkspace` (the backend's per-thread workspace).

use super::model::Model;
use super::overrun::{GuardedPool, CANARY_BYTES};
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, ArgsBuilder, PackedFunc, RetValue};
use crate::tensor::{NDArray, RawTensor};
use std::any::Any;
use std::sync::{Arc, Mutex};

pub struct AotExecutor {
    model: Arc<Model>,
    inputs: Vec<ObjRef<NDArray>>,
    outputs: Vec<ObjRef<NDArray>>,
    /// The pools USMP planned, each with the bytes its kernels were measured to write past it,
    /// then a canary checked after every run.
    workspaces: Vec<GuardedPool>,
    /// Held across a run and a `set_input`: the arrays are written by one at a time.
    busy: Mutex<()>,
}

impl AotExecutor {
    pub fn new(model: Arc<Model>, device: DLDevice) -> Result<AotExecutor> {
        let inputs = super::metadata::empty_arrays(&model.meta.inputs, device)?;
        let outputs = super::metadata::empty_arrays(&model.meta.outputs, device)?;
        let workspaces = model
            .meta
            .workspace_pools
            .iter()
            .zip(&model.workspace_overrun)
            .map(|(p, &past)| {
                let planned = crate::dtype::tensor_bytes(&p.shape, p.dtype)?;
                GuardedPool::new(device, planned, past + CANARY_BYTES)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AotExecutor { model, inputs, outputs, workspaces, busy: Mutex::new(()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of input `name`, as the compiler named it (non-alphanumerics became `_`).
    pub fn input_index(&self, name: &str) -> Option<usize> {
        let sanitized = sanitize(name);
        self.model.meta.inputs.iter().position(|t| t.name == sanitized)
    }

    fn checked_input(&self, key: Key<'_>) -> Result<usize> {
        match key {
            Key::Name(name) => self.input_index(name).ok_or_else(|| {
                let names: Vec<&str> = self.model.meta.inputs.iter().map(|t| t.name.as_str()).collect();
                Error::key(format!("no input '{name}': the model's inputs are {names:?}"))
            }),
            Key::Index(i) if i < self.inputs.len() => Ok(i),
            Key::Index(i) => Err(Error::index(format!("input {i}: the model has {}", self.inputs.len()))),
        }
    }

    fn checked_output(&self, i: usize) -> Result<&ObjRef<NDArray>> {
        self.outputs.get(i).ok_or_else(|| Error::index(format!("output {i}: the model has {}", self.outputs.len())))
    }

    /// Copies `src` into input `name` (byte sizes must match, as upstream's).
    pub fn set_input_named(&self, name: &str, src: RawTensor<'_>) -> Result<()> {
        let i = self.checked_input(Key::Name(name))?;
        self.set_input(i, src)
    }

    fn set_input(&self, i: usize, src: RawTensor<'_>) -> Result<()> {
        let to = &self.inputs[i];
        let want = &self.model.meta.inputs[i];
        let _busy = self.lock();
        // SAFETY: the executor's own input array, written under its lock (what a caller holding it
        // through `get_input` does with it is upstream's contract: the array is the input).
        unsafe { crate::tensor::raw::copy_tensor(src, to.raw()) }
            .map_err(|e| e.context(format!("input '{}' ({} {:?})", want.name, want.dtype, want.shape)))
    }

    pub fn run(&self) -> Result<()> {
        let _inside = crate::backend::fork::inside();
        let _busy = self.lock();
        let mut args = ArgsBuilder::new();
        // The constant pool, one per model (upstream copies it into each executor), then this one's.
        let pools = self.model.meta.constant_pool.iter().chain(self.workspaces.iter().map(|p| &p.tensor));
        for t in self.inputs.iter().chain(&self.outputs).chain(pools) {
            args.object(t.clone().into_any());
        }
        self.model.main.call(&args.args())?;
        for ((pool, info), &past) in
            self.workspaces.iter().zip(&self.model.meta.workspace_pools).zip(&self.model.workspace_overrun)
        {
            let written = pool.written_past(past)?;
            if written > 0 {
                return Err(Error::internal(format!(
                    "the kernels wrote {written} bytes past the workspace pool '{}', beyond the {past} bytes measured at \
                     load (into this executor's own canary: its outputs cannot be trusted)",
                    info.name
                )));
            }
        }
        Ok(())
    }
}

impl ModuleNode for AotExecutor {
    fn type_key(&self) -> &str {
        "AotExecutor"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let f: fn(&AotExecutor, &Args<'_>) -> Result<RetValue> = match name {
            "set_input" => |ex, a| {
                a.expect_count("set_input", 2, 2)?;
                ex.set_input(ex.checked_input(key(a, 0)?)?, a.tensor(1)?).map(Into::into)
            },
            "get_input" => |ex, a| {
                a.expect_count("get_input", 1, 1)?;
                // An unknown name is None, which TVM's AotModule.set_input reports by name.
                match key(a, 0)? {
                    Key::Name(n) => Ok(ex.input_index(n).map_or(RetValue::None, |i| ex.inputs[i].clone().into())),
                    k => Ok(ex.inputs[ex.checked_input(k)?].clone().into()),
                }
            },
            "get_output" => |ex, a| {
                a.expect_count("get_output", 1, 2)?;
                let out = ex.checked_output(index(a, 0)?)?;
                if a.len() == 1 {
                    return Ok(out.clone().into());
                }
                let _busy = ex.lock();
                // SAFETY: the caller's tensor, which the call contract lets this write.
                unsafe { crate::tensor::raw::copy_tensor(out.raw(), a.tensor(1)?) }.map(Into::into)
            },
            "get_num_inputs" => |ex, _| Ok(RetValue::Int(ex.inputs.len() as i64)),
            "get_num_outputs" => |ex, _| Ok(RetValue::Int(ex.outputs.len() as i64)),
            "get_input_index" => |ex, a| Ok(RetValue::Int(ex.input_index(a.str(0)?).map_or(-1, |i| i as i64))),
            "get_input_name" => |ex, a| {
                let i = ex.checked_input(Key::Index(index(a, 0)?))?;
                Ok(ex.model.meta.inputs[i].name.as_str().into())
            },
            // Not upstream's (its AOT executor names no outputs): the metadata's name, so every
            // face calls an output what the compiler did.
            "get_output_name" => |ex, a| {
                a.expect_count("get_output_name", 1, 1)?;
                let i = index(a, 0)?;
                ex.checked_output(i)?;
                Ok(ex.model.meta.outputs[i].name.as_str().into())
            },
            "run" => |ex, _| ex.run().map(Into::into),
            "set_input_zero_copy" | "set_output_zero_copy" => {
                |_, _| Err(Error::tvm("the AOT executor copies its inputs and outputs (no zero-copy, as upstream's)"))
            }
            _ => return Ok(None),
        };
        let me = this.clone();
        Ok(Some(PackedFunc::native(move |a| f(me.node::<AotExecutor>().expect("an AOT executor's function"), a))))
    }

    fn property_mask(&self) -> i32 {
        crate::module::property::RUNNABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

enum Key<'a> {
    Name(&'a str),
    Index(usize),
}

fn key<'a>(a: &Args<'a>, i: usize) -> Result<Key<'a>> {
    if a.is_name(i) {
        return Ok(Key::Name(a.str(i)?));
    }
    index(a, i).map(Key::Index)
}

fn index(a: &Args<'_>, i: usize) -> Result<usize> {
    let v = a.int(i)?;
    usize::try_from(v).map_err(|_| Error::index(format!("negative index {v}")))
}

/// The compiler's form of a name: every character that is not alphanumeric becomes `_`.
fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}
