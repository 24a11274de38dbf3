//! `AotExecutorFactory`, the root of an AOT artefact's module tree: params (normally none: the
//! weights are the library's constants) and the module name; `factory[module_name](dev)` makes an
//! executor. What every executor of the artefact shares (`model`) is read once, at the first.

#![forbid(unsafe_code)]

use super::executor::AotExecutor;
use super::model::Model;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, ArrayObj, PackedFunc, RetValue, StringObj};
use crate::params;
use crate::stream::Reader;
use crate::tensor::NDArray;
use once_cell::sync::OnceCell;
use std::any::Any;
use std::sync::Arc;

/// The blob's loader of the factory (the library layer finds it by type key).
pub const LOADERS: &[(&str, crate::module::Loader)] =
    &[("AotExecutorFactory", |r| Ok(Module::new(AotFactory::load_binary(r)?)))];

pub struct AotFactory {
    params: Vec<(String, ObjRef<NDArray>)>,
    module_name: String,
    model: OnceCell<Arc<Model>>,
}

impl AotFactory {
    /// The factory's bytes in a module blob: `u64 n`, n names, n arrays, the module name.
    pub fn load_binary(r: &mut Reader<'_>) -> Result<AotFactory> {
        let count = r.u64()?;
        let names = r.strings()?;
        if names.len() as u64 != count {
            return Err(r.error(format!("AotExecutorFactory: {count} params but {} names", names.len())));
        }
        let mut params = Vec::with_capacity(names.len());
        for name in names {
            params.push((name.to_string(), params::read_record(r)?.to_ndarray()?));
        }
        let module_name = r.string()?.to_string();
        Ok(AotFactory { params, module_name, model: OnceCell::new() })
    }

    fn model(&self, this: &ObjRef<Module>) -> Result<Arc<Model>> {
        self.model
            .get_or_try_init(|| {
                let code = this
                    .imports()
                    .first()
                    .cloned()
                    .ok_or_else(|| Error::value("AotExecutorFactory: no library imported"))?;
                Model::load(&code).map(Arc::new)
            })
            .cloned()
    }

    fn create(&self, this: &ObjRef<Module>, a: &Args<'_>) -> Result<RetValue> {
        if a.is_empty() {
            return Err(Error::type_err(format!("{}: at least one device argument is needed", self.module_name)));
        }
        let devices = (0..a.len()).map(|i| a.device(i)).collect::<Result<Vec<DLDevice>>>()?;
        if devices.len() != 1 || devices[0] != DLDevice::CPU {
            return Err(Error::value(format!(
                "the AOT executor runs on cpu(0) alone (as upstream's), not on {devices:?}"
            )));
        }
        let ex = AotExecutor::new(self.model(this)?, devices[0])?;
        for (name, value) in &self.params {
            ex.set_input_named(name, value.raw())?;
        }
        Ok(Module::new(ex).into())
    }
}

impl ModuleNode for AotFactory {
    fn type_key(&self) -> &str {
        "AotExecutorFactory"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let me = this.clone();
        let f = if name == self.module_name {
            PackedFunc::native(move |a| factory_of(&me).create(&me, a))
        } else if name == "tvmrt.describe" {
            // This runtime's: the entry's tensors and pools, as JSON (the tool's `inspect`).
            PackedFunc::native(move |_| Ok(factory_of(&me).model(&me)?.describe().to_string().into()))
        } else if name == "tvmrt.memory_usage" {
            PackedFunc::native(move |_| Ok(factory_of(&me).model(&me)?.memory_usage().to_string().into()))
        } else if name == "list_module_names" {
            let names = ArrayObj::new(vec![StringObj::new(&self.module_name).into_any()]);
            PackedFunc::native(move |_| Ok(names.clone().into()))
        } else if name == "remove_params" {
            PackedFunc::native(move |_| {
                let f = factory_of(&me);
                let without = Module::new(AotFactory {
                    params: Vec::new(),
                    module_name: f.module_name.clone(),
                    model: OnceCell::new(),
                });
                if let Some(code) = me.imports().first() {
                    Module::import(&without, code.clone())?;
                }
                Ok(without.into())
            })
        } else {
            return Ok(None);
        };
        Ok(Some(f))
    }

    fn property_mask(&self) -> i32 {
        crate::module::property::BINARY_SERIALIZABLE | crate::module::property::RUNNABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn factory_of(m: &ObjRef<Module>) -> &AotFactory {
    m.node::<AotFactory>().expect("a function of the AOT factory holds its module")
}

/// `tvm.aot_executor_factory.create(module, module_name, [name, array]...)`.
pub fn create_factory(a: &Args<'_>) -> Result<RetValue> {
    use crate::module::ModuleArg;
    if a.len() < 2 || a.len() % 2 != 0 {
        return Err(Error::type_err(
            "tvm.aot_executor_factory.create takes (module, module_name, [param name, array]...)",
        ));
    }
    let params =
        (2..a.len()).step_by(2).map(|i| Ok((a.str(i)?.to_string(), a.ndarray(i + 1)?))).collect::<Result<_>>()?;
    let factory = Module::new(AotFactory { params, module_name: a.str(1)?.to_string(), model: OnceCell::new() });
    Module::import(&factory, a.module(0)?)?;
    Ok(factory.into())
}
