//! Finding a model's artefacts and making executors of it.

use std::path::{Path, PathBuf};
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::factory::Factory;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::{Error, Result};

pub const BUNDLED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mlp_b1");

/// Explicit artefact paths (`--lib`, `--graph`, `--params`) override what the folder holds.
#[derive(Default, Clone)]
pub struct Paths {
    pub lib: Option<PathBuf>,
    pub graph: Option<PathBuf>,
    pub params: Option<PathBuf>,
}

pub struct Model {
    pub name: String,
    pub dir: PathBuf,
    pub lib: ObjRef<Module>,
    pub graph_json: String,
    /// Weights from a params file (unbound builds); `None` when the factory carries them.
    pub params: Option<Vec<u8>>,
    pub params_path: Option<PathBuf>,
    /// Map the params file instead of reading it (`--map-params`).
    pub map_params: bool,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path.display().to_string(), e))
}

impl Model {
    /// MODEL is a folder with `lib.so` (and maybe `graph.json`, `params.bin`) or a `lib.so`.
    pub fn load(spec: Option<&str>, paths: &Paths, map_params: bool) -> Result<Model> {
        let spec = PathBuf::from(spec.unwrap_or(BUNDLED));
        let (dir, lib_path) = if spec.is_dir() {
            (spec.clone(), paths.lib.clone().unwrap_or_else(|| spec.join("lib.so")))
        } else {
            (spec.parent().unwrap_or(Path::new(".")).to_path_buf(), paths.lib.clone().unwrap_or(spec.clone()))
        };
        if !lib_path.exists() {
            return Err(Error::value(format!("no operator library at {}", lib_path.display())));
        }
        let lib = tvm_runtime::library::load_file(&lib_path.to_string_lossy(), "so")?;
        let factory = lib.node::<Factory>();
        let graph_path = paths.graph.clone().unwrap_or_else(|| dir.join("graph.json"));
        let graph_json = match (factory, &paths.graph) {
            (Some(f), None) => f.graph_json().to_string(),
            _ => String::from_utf8(read(&graph_path)?).map_err(|_| Error::value("graph JSON is not UTF-8"))?,
        };
        let has_weights = factory.is_some_and(|f| !f.params().is_empty());
        let params_path = paths.params.clone().unwrap_or_else(|| dir.join("params.bin"));
        let params = if paths.params.is_some() || (!has_weights && params_path.exists()) {
            Some(read(&params_path)?)
        } else {
            None
        };
        let name = dir.file_name().and_then(|s| s.to_str()).unwrap_or("model").to_string();
        let params_path = params.as_ref().map(|_| params_path);
        Ok(Model { name, dir, lib, graph_json, params, params_path, map_params })
    }

    /// A new executor: from the factory when the library has one and no graph was given, else
    /// from the graph; then the params file, if any.
    pub fn executor(&self, debug: bool) -> Result<ObjRef<Module>> {
        let plan = match self.lib.node::<Factory>() {
            Some(f) if f.graph_json() == self.graph_json && !debug => f.create_executor(&self.lib, DLDevice::CPU)?,
            _ => {
                let plan = tvm_runtime::executor::plan::Plan::new(&self.graph_json, self.lib.clone(), DLDevice::CPU)?;
                let ex = if debug { GraphExecutor::new_debug(plan)? } else { GraphExecutor::new(plan)? };
                if let Some(f) = self.lib.node::<Factory>() {
                    for param in f.params() {
                        ex.bind_param(param)?;
                    }
                }
                Module::new(ex)
            }
        };
        match (&self.params, &self.params_path) {
            (Some(_), Some(path)) if self.map_params => {
                // SAFETY: the CLI maps the params file for the length of one command; changing the
                // file meanwhile is outside what it promises (see `--map-params` in --help).
                unsafe { exec(&plan).load_params_from_file(&path.to_string_lossy()) }?;
            }
            (Some(p), _) => exec(&plan).load_params(p)?,
            _ => {}
        }
        Ok(plan)
    }

    /// The inputs that are not weights, in input order.
    pub fn data_inputs(&self, ex: &GraphExecutor) -> Vec<usize> {
        let params = ex.lock().param_names.clone();
        let plan = ex.plan();
        (0..plan.num_inputs()).filter(|&i| !params.contains(plan.input_name(i))).collect()
    }
}

pub fn exec(m: &ObjRef<Module>) -> &GraphExecutor {
    m.node::<GraphExecutor>().expect("an executor")
}
