//! The `GraphExecutorFactory` module that `export_library` embeds: graph, weights and a name.
//! Executors it creates share its weights (no copy per executor) and one plan.

#![forbid(unsafe_code)]

use super::plan::Plan;
use super::GraphExecutor;
use crate::dlpack::{kDLDevice, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, ArrayObj, MapObj, PackedFunc, RetValue, StringObj};
use crate::params;
use crate::stream::Reader;
use crate::tensor::{NDArray, Weight};
use once_cell::sync::OnceCell;
use std::any::Any;
use std::sync::Arc;

/// A named weight with its tensor type, as a factory (or a params blob) holds it.
pub struct Param {
    pub name: String,
    pub dtype: DLDataType,
    pub shape: Box<[i64]>,
    pub weight: Arc<Weight>,
}

impl Param {
    /// A new array holding a copy of the weight: what callers outside the executors get, so a
    /// write through it changes no executor.
    pub fn to_ndarray(&self) -> Result<ObjRef<NDArray>> {
        NDArray::from_bytes(&self.shape, self.dtype, &self.weight.bytes()?)
    }
}

pub struct Factory {
    graph_json: String,
    params: Vec<Param>,
    module_name: String,
    plan: OnceCell<Arc<Plan>>,
}

/// The blob's loaders of the factory (the library layer finds them by type key; upstream's older
/// key too).
pub const LOADERS: &[(&str, crate::module::Loader)] = &[
    ("GraphExecutorFactory", |r| Ok(Module::new(Factory::load_binary(r)?))),
    ("GraphRuntimeFactory", |r| Ok(Module::new(Factory::load_binary(r)?))),
];

impl Factory {
    pub fn new(graph_json: String, params: Vec<Param>, module_name: String) -> Factory {
        Factory { graph_json, params, module_name, plan: OnceCell::new() }
    }

    /// Reads the factory's bytes from a module blob.
    pub fn load_binary(r: &mut Reader<'_>) -> Result<Factory> {
        let graph_json = r.string()?.to_string();
        let count = r.u64()?;
        let names = r.strings()?;
        if names.len() as u64 != count {
            return Err(r.error(format!("factory: {count} params announced but {} names", names.len())));
        }
        let mut params = Vec::with_capacity(names.len());
        for name in names {
            let rec = params::read_record(r).map_err(|e| e.context(format!("factory parameter '{name}'")))?;
            params.push(Param {
                name: name.to_string(),
                dtype: rec.dtype,
                shape: rec.shape.clone().into(),
                weight: Arc::new(Weight::copy_of(rec.data)?),
            });
        }
        let module_name = r.string()?.to_string();
        Ok(Factory::new(graph_json, params, module_name))
    }

    pub fn graph_json(&self) -> &str {
        &self.graph_json
    }

    pub fn params(&self) -> &[Param] {
        &self.params
    }

    fn library(this: &ObjRef<Module>) -> Result<ObjRef<Module>> {
        this.imports().into_iter().next().ok_or_else(|| Error::value("the factory has no operator library imported"))
    }

    /// A new executor on `device`, bound to the factory's weights.
    pub fn create_executor(&self, this: &ObjRef<Module>, device: DLDevice) -> Result<ObjRef<Module>> {
        self.create(this, &[device], false)
    }

    /// A new executor on `devices` (the first the primary one; several for graphs on several
    /// device types), bound to the factory's weights.
    pub fn create_executor_on(&self, this: &ObjRef<Module>, devices: &[DLDevice]) -> Result<ObjRef<Module>> {
        self.create(this, devices, false)
    }

    fn create(&self, this: &ObjRef<Module>, devices: &[DLDevice], debug: bool) -> Result<ObjRef<Module>> {
        let cached =
            self.plan.get_or_try_init(|| Plan::with_devices(&self.graph_json, Factory::library(this)?, devices))?;
        // One plan serves every executor on the first devices; other devices get their own.
        let plan = if cached.given == devices {
            cached.clone()
        } else {
            Plan::with_devices(&self.graph_json, Factory::library(this)?, devices)?
        };
        let exec = if debug { GraphExecutor::new_debug(plan)? } else { GraphExecutor::new(plan)? };
        exec.bind_params(&self.params)?;
        Ok(Module::new(exec))
    }
}

/// The devices a factory function is given: Device values, or (dev_type, dev_id) pairs as
/// upstream's C++ also accepts.
fn devices(args: &Args<'_>) -> Result<Vec<DLDevice>> {
    if args.is_empty() {
        return Err(Error::type_err("expected at least one device"));
    }
    if args.code(0) != kDLDevice {
        if args.len() % 2 != 0 {
            return Err(Error::type_err("devices must be given as (device_type, device_id) pairs"));
        }
        return (0..args.len())
            .step_by(2)
            .map(|i| Ok(DLDevice { device_type: args.int32(i)?, device_id: args.int32(i + 1)? }))
            .collect();
    }
    (0..args.len()).map(|i| args.device(i)).collect()
}

fn factory(m: &ObjRef<Module>) -> &Factory {
    m.node::<Factory>().expect("factory functions are only made for factories")
}

impl ModuleNode for Factory {
    fn type_key(&self) -> &str {
        "GraphExecutorFactory"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let m = this.clone();
        Ok(Some(match name {
            n if n == self.module_name => PackedFunc::native(move |a| {
                let devs = devices(a)?;
                factory(&m).create_executor_on(&m, &devs).map(Into::into).map_err(|e| e.context("GraphExecutorFactory"))
            }),
            "debug_create" => PackedFunc::native(move |a| {
                let f = factory(&m);
                if a.str(0)? != f.module_name {
                    return Err(Error::value(format!("debug_create: this factory's module is '{}'", f.module_name)));
                }
                let dev = if a.code(1) == kDLDevice {
                    a.device(1)?
                } else {
                    DLDevice { device_type: a.int32(1)?, device_id: a.int32(2)? }
                };
                f.create(&m, &[dev], true).map(Into::into).map_err(|e| e.context("debug_create"))
            }),
            "get_graph_json" => PackedFunc::native(move |_| Ok(RetValue::Str(factory(&m).graph_json.clone()))),
            // Copies, as upstream: the factory's weights are what its executors run on.
            "get_graph_params" => PackedFunc::native(move |_| {
                let f = factory(&m);
                let pairs = f
                    .params
                    .iter()
                    .map(|p| Ok((p.name.as_str(), p.to_ndarray()?.into_any())))
                    .collect::<Result<Vec<_>>>()?;
                Ok(MapObj::from_str_pairs(pairs).into())
            }),
            // The names of the weights the factory holds, without copying them (an extension:
            // upstream has only get_graph_params, which copies every weight).
            "get_param_names" => PackedFunc::native(move |_| {
                let names = factory(&m).params.iter().map(|p| StringObj::new(&p.name).into_any()).collect();
                Ok(ArrayObj::new(names).into())
            }),
            "remove_params" => PackedFunc::native(move |_| {
                let f = factory(&m);
                let fresh = Module::new(Factory::new(f.graph_json.clone(), Vec::new(), f.module_name.clone()));
                for import in m.imports() {
                    Module::import(&fresh, import)?;
                }
                Ok(fresh.into())
            }),
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
