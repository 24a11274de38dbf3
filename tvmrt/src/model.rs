//! Finding a model's artefacts, making executors of it, and knowing where its weights come from.

use crate::ModelArgs;
use std::path::{Path, PathBuf};
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::factory::Factory;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::tensor::FileMap;
use tvm_runtime::{Error, Result};

pub struct Model {
    pub name: String,
    pub dir: PathBuf,
    /// Whether this is the bundled MLP (no MODEL given).
    pub bundled: bool,
    pub lib: ObjRef<Module>,
    pub graph_json: String,
    /// Weights from a params file (unbound builds); `None` when the factory carries them.
    pub params: Option<Vec<u8>>,
    pub params_path: Option<PathBuf>,
    pub map_params: bool,
    /// Fold the operators that read only weights: `--fold` (always), `--no-fold` (never), else
    /// the library's default.
    pub fold: Option<bool>,
    /// Where executors run (`--device`).
    pub device: DLDevice,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path.display().to_string(), e))
}

/// A params file, its header checked against its length before the rest is read (a count no file
/// of that size holds is refused at once, however large the file).
fn read_params(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |e| Error::io(path.display().to_string(), e);
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut head = Vec::with_capacity(24);
    (&mut f).take(24).read_to_end(&mut head).map_err(io)?;
    tvm_runtime::params::check_header(&head, len).map_err(|e| e.context(path.display().to_string()))?;
    f.read_to_end(&mut head).map_err(io)?;
    Ok(head)
}

/// A path as `dlopen` should see it: a bare file name would make it search the library path
/// instead of the working directory, so name the working directory explicitly.
fn for_dlopen(path: &Path) -> PathBuf {
    if path.is_relative() && path.parent().is_none_or(|p| p.as_os_str().is_empty()) {
        Path::new(".").join(path)
    } else {
        path.to_path_buf()
    }
}

impl Model {
    /// MODEL is a folder (its artefacts found by [`crate::artefacts`]) or a library file; without
    /// MODEL and `--lib`, the bundled MLP.
    pub fn load(spec: Option<&Path>, args: &ModelArgs) -> Result<Model> {
        let (spec, bundled) = match (spec, &args.lib) {
            (Some(s), _) => (s.to_path_buf(), false),
            (None, Some(lib)) => (lib.clone(), false),
            (None, None) => (crate::bundled::dir()?, true),
        };
        let (dir, lib_path) = if spec.is_dir() {
            let lib = match &args.lib {
                Some(l) => l.clone(),
                None => crate::artefacts::library(&spec)?,
            };
            (spec.clone(), lib)
        } else {
            let parent = spec.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            (parent.to_path_buf(), args.lib.clone().unwrap_or(spec.clone()))
        };
        if !lib_path.is_file() {
            return Err(Error::value(format!("no operator library at {}", lib_path.display())));
        }
        let lib = tvm_runtime::library::load_file(&for_dlopen(&lib_path).to_string_lossy(), "so")?;
        let factory = lib.node::<Factory>();
        let graph_json = match (factory, &args.graph) {
            (Some(f), None) => f.graph_json().to_string(),
            _ => {
                let path = match &args.graph {
                    Some(g) => g.clone(),
                    None => crate::artefacts::graph(&dir).unwrap_or_else(|| dir.join("graph.json")),
                };
                if !path.is_file() {
                    return Err(Error::value(format!(
                        "{} has no graph: the library embeds none and {} does not exist (--graph names one)",
                        lib_path.display(),
                        path.display()
                    )));
                }
                String::from_utf8(read(&path)?).map_err(|_| Error::value("graph JSON is not UTF-8"))?
            }
        };
        let has_weights = factory.is_some_and(|f| !f.params().is_empty());
        let params_path = match &args.params {
            Some(p) => Some(p.clone()),
            None if !has_weights => crate::artefacts::params(&dir)?,
            None => None,
        };
        let params = params_path.as_deref().map(read_params).transpose()?;
        let name = dir.file_name().and_then(|s| s.to_str()).unwrap_or("model").to_string();
        let device = args.device.0.unwrap_or_else(|| built_for(&lib));
        Ok(Model {
            name,
            dir,
            bundled,
            lib,
            graph_json,
            params,
            params_path,
            map_params: args.map_params,
            fold: if args.fold {
                Some(true)
            } else if args.no_fold {
                Some(false)
            } else {
                None
            },
            device,
        })
    }

    /// A new executor: from the factory when the library has one and no graph was given, else
    /// from the graph; then the params file, if any. Names in the params file that are not inputs
    /// of the graph are an error: a mismatch would otherwise leave weights unset.
    pub fn executor(&self, debug: bool) -> Result<ObjRef<Module>> {
        let m = self.bound_executor(debug).map_err(name_the_flag)?;
        if let Some(fold) = self.fold {
            exec(&m).set_fold_weights(fold)?;
        }
        Ok(m)
    }

    fn bound_executor(&self, debug: bool) -> Result<ObjRef<Module>> {
        let m = match self.lib.node::<Factory>() {
            Some(f) if f.graph_json() == self.graph_json && !debug => f.create_executor(&self.lib, self.device)?,
            _ => {
                let plan = tvm_runtime::executor::plan::Plan::new(&self.graph_json, self.lib.clone(), self.device)?;
                let ex = if debug { GraphExecutor::new_debug(plan)? } else { GraphExecutor::new(plan)? };
                if let Some(f) = self.lib.node::<Factory>() {
                    ex.bind_params(f.params())?;
                }
                Module::new(ex)
            }
        };
        let (Some(params), Some(path)) = (&self.params, &self.params_path) else { return Ok(m) };
        let ex = exec(&m);
        let unknown: Vec<&str> = tvm_runtime::params::parse(params)?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|n| {
                ex.plan().input_index(n).is_none()
                    && !n.starts_with(tvm_runtime::params::PAD_PREFIX)
                    && !tvm_runtime::prepared_params::is_prepared_record(n)
            })
            .collect();
        if !unknown.is_empty() {
            return Err(Error::key(format!(
                "{} holds {} weight(s) the graph has no input for: {}",
                path.display(),
                unknown.len(),
                unknown.join(", ")
            )));
        }
        if self.map_params {
            // SAFETY: the CLI maps the params file for the length of one command; changing the file
            // meanwhile is outside what it promises (`--map-params` in --help says so).
            let (mapped, copied) = ex.load_params_mapped(&unsafe { FileMap::open(&path.to_string_lossy()) }?)?;
            if copied > 0 {
                return Err(Error::value(format!(
                    "--map-params: {copied} of {} weights in {} cannot be used in place (not 64-byte aligned in \
                     the file) and would be copied; run `tvmrt align-params {} ALIGNED.params` and map that file",
                    mapped + copied,
                    path.display(),
                    path.display()
                )));
            }
            if let Some(why) = ex.prepared_params_use().and_then(|u| u.strip_prefix("not used: ").map(str::to_string)) {
                eprintln!(
                    "note: {}: its prepared derived weights are not used ({why}); the weights load as plain params",
                    path.display()
                );
            }
        } else {
            ex.load_params(params)?;
        }
        Ok(m)
    }

    /// The inputs that are not weights, in input order.
    pub fn data_inputs(&self, ex: &GraphExecutor) -> Vec<usize> {
        let plan = ex.plan();
        (0..plan.num_inputs()).filter(|&i| !ex.is_param(plan.input_name(i))).collect()
    }

    /// Whether anything gives this model weights: the library's factory or a params file.
    pub fn has_weight_source(&self) -> bool {
        self.params.is_some() || self.lib.node::<Factory>().is_some_and(|f| !f.params().is_empty())
    }
}

/// The device a model's library was built for: OpenCL device 0 when it has OpenCL kernels (its
/// CPU operators, if any, run on the CPU beside it), else the CPU.
pub fn built_for(lib: &ObjRef<Module>) -> DLDevice {
    fn has_opencl(m: &ObjRef<Module>, depth: usize) -> bool {
        m.type_key() == "opencl" || (depth < 8 && m.imports().iter().any(|i| has_opencl(i, depth + 1)))
    }
    if has_opencl(lib, 0) {
        DLDevice { device_type: 4, device_id: 0 }
    } else {
        DLDevice::CPU
    }
}

/// An error about the device a model runs on, in the command line's words.
fn name_the_flag(e: Error) -> Error {
    let text = e.to_string();
    match text.split_once(": create the executor on that device") {
        Some((what, rest)) => {
            Error::new(e.kind(), format!("{what}{rest}: run it there with --device (or --device auto)"))
        }
        None => e,
    }
}

pub fn exec(m: &ObjRef<Module>) -> &GraphExecutor {
    m.node::<GraphExecutor>().expect("an executor")
}
