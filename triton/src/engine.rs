//! One build of a model, loaded once for all the model's instances, and the runner each instance
//! makes of it. What the instances share lives in the [`Build`]: the operator library, the
//! weights (a graph build's holder executor, which every runner binds to; the factory's; a VM
//! executable's constants; an AOT model's constant pool) and the pool of activation arenas. A
//! [`Runner`] is an instance's own executor over them.

use crate::artefact::Artefact;
use crate::signature::TensorSpec;
use std::path::Path;
use std::sync::Arc;
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::executor::factory::Factory;
use tvm_runtime::executor::pool::ArenaPool;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::{ArgsBuilder, ArrayObj, RetValue, StringObj};
use tvm_runtime::tensor::{FileMap, NDArray};
use tvm_runtime::vm::objects::AdtObj;
use tvm_runtime::{Error, Result};

/// A loaded build: what it takes and gives, and what runs it.
pub struct Build {
    pub name: String,
    /// The data inputs (weights apart), in the order runners take them. A Relay VM's dtypes and
    /// shapes are unknown (`None`) unless a `.meta` records them or the config declares them.
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Whether the inputs' and outputs' shapes are the build's alone (graph and AOT builds), or
    /// whatever a run is given (a Relay VM).
    pub fixed: bool,
    /// Whether `inputs` and `outputs` were recorded (a `.meta`) rather than known from the build.
    pub recorded: bool,
    /// Something the log should say about how the build was loaded.
    pub note: Option<String>,
    engine: Engine,
}

enum Engine {
    Graph {
        lib: ObjRef<Module>,
        graph_json: String,
        factory: bool,
        holder: ObjRef<Module>,
        /// Names of the weights runners bind to the holder's (a params file loaded, not mapped).
        shared: Option<Vec<u8>>,
        /// The prepared file every runner maps (its derived weights read in place by each).
        mapped: Option<Arc<FileMap>>,
    },
    Vm {
        exe: ObjRef<Module>,
    },
    Aot {
        factory: ObjRef<Module>,
        module_name: String,
    },
}

/// An instance's executor of a build.
pub enum Runner {
    Graph(ObjRef<Module>),
    Vm(ObjRef<Module>),
    Aot(ObjRef<Module>),
}

fn call(m: &ObjRef<Module>, name: &str, build: impl FnOnce(&mut ArgsBuilder)) -> Result<RetValue> {
    let f = Module::require_function(m, name)?;
    let mut a = ArgsBuilder::new();
    build(&mut a);
    f.call(&a.args())
}

fn object(v: RetValue, what: &str) -> Result<AnyObject> {
    match v {
        RetValue::Object(o) => Ok(o),
        other => Err(Error::tvm(format!("{what} returned {other:?}"))),
    }
}

fn library(path: &Path) -> Result<ObjRef<Module>> {
    tvm_runtime::library::load_file(&path.to_string_lossy(), "so")
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path.display().to_string(), e))
}

fn graph_exec(m: &ObjRef<Module>) -> &GraphExecutor {
    m.node::<GraphExecutor>().expect("a graph build's runner is a GraphExecutor")
}

impl Build {
    /// Loads the artefact in `dir` for `device`. A graph build's params file is mapped as a
    /// prepared file when `prepare` (see `prepared.rs`), else loaded, sharing `weights_from`'s
    /// weights where names and shapes agree (the other builds of one model).
    pub fn load(
        name: &str,
        dir: &Path,
        device: DLDevice,
        weights_from: Option<&Build>,
        prepare: bool,
    ) -> Result<Build> {
        let at = |e: Error| e.context(dir.display().to_string());
        match crate::artefact::locate(dir).map_err(at)? {
            Artefact::Graph { lib, graph, params } => {
                Build::graph(name, &lib, graph.as_deref(), params.as_deref(), device, weights_from, prepare).map_err(at)
            }
            Artefact::Vm { lib, code, meta } => Build::vm(name, &lib, code.as_deref(), meta.as_deref()).map_err(at),
            Artefact::Aot { lib } => Build::aot(name, &lib, device).map_err(at),
        }
    }

    fn graph(
        name: &str,
        lib_path: &Path,
        graph: Option<&Path>,
        params: Option<&Path>,
        device: DLDevice,
        weights_from: Option<&Build>,
        prepare: bool,
    ) -> Result<Build> {
        let lib = library(lib_path)?;
        let factory = lib.node::<Factory>();
        let graph_json = match (factory, graph) {
            (Some(f), None) => f.graph_json().to_string(),
            (_, Some(g)) => String::from_utf8(read(g)?).map_err(|_| Error::value("the graph JSON is not UTF-8"))?,
            (None, None) => {
                return Err(Error::value(format!(
                    "{}: the library embeds no graph and no graph.json is beside it",
                    lib_path.display()
                )))
            }
        };
        let from_factory = factory.is_some() && graph.is_none();
        let holder = match factory {
            Some(f) if from_factory => f.create_executor(&lib, device)?,
            _ => {
                let ex = GraphExecutor::new(tvm_runtime::executor::plan::Plan::new(&graph_json, lib.clone(), device)?)?;
                if let Some(f) = factory {
                    ex.bind_params(f.params())?;
                }
                Module::new(ex)
            }
        };
        let ex = graph_exec(&holder);
        let (mut shared, mut note, mut mapped) = (None, None, None);
        if let Some(p) = params {
            let bytes = read(p)?;
            let names = tvm_runtime::params::parse_names(&bytes)?;
            let unknown: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| ex.plan().input_index(n).is_none() && !n.starts_with(tvm_runtime::params::PAD_PREFIX))
                .filter(|n| !tvm_runtime::prepared_params::is_prepared_record(n))
                .collect();
            if !unknown.is_empty() {
                return Err(Error::key(format!(
                    "{} holds {} weight(s) the graph has no input for: {}",
                    p.display(),
                    unknown.len(),
                    unknown.join(", ")
                )));
            }
            let blob = crate::artefact::names_blob(&names);
            let other = weights_from.and_then(|b| match &b.engine {
                Engine::Graph { holder, .. } => Some(holder),
                _ => None,
            });
            if prepare {
                let path = crate::prepared::file_for(lib_path, &graph_json, &bytes, || {
                    let plan = tvm_runtime::executor::plan::Plan::new(&graph_json, lib.clone(), device)?;
                    GraphExecutor::new(plan)?.prepared_params(&bytes)
                })?;
                let map = crate::prepared::map(&path)?;
                note = crate::prepared::load(ex, &map)?
                    .map(|why| format!("{}: its prepared weights are not used ({why})", path.display()));
                mapped = Some(map);
            } else {
                if other.is_none_or(|o| ex.share_params(graph_exec(o), &blob).is_err()) {
                    // Another build of the model holds these weights: bound to them; else loaded.
                    ex.load_params(&bytes)?;
                }
                shared = Some(blob);
            }
        }
        let plan = ex.plan();
        let inputs = (0..plan.num_inputs())
            .filter(|&i| !ex.is_param(plan.input_name(i)))
            .map(|i| {
                let e = &plan.graph.entries[plan.input_entries[i]];
                TensorSpec::new(plan.input_name(i), e.dtype, e.shape.to_vec())
            })
            .collect();
        let outputs = (0..plan.num_outputs())
            .map(|k| {
                let e = &plan.graph.entries[plan.output_entries[k]];
                TensorSpec::new(format!("output_{k}"), e.dtype, e.shape.to_vec())
            })
            .collect();
        Ok(Build {
            name: name.to_string(),
            inputs,
            outputs,
            fixed: true,
            recorded: false,
            note,
            engine: Engine::Graph { lib, graph_json, factory: from_factory, holder, shared, mapped },
        })
    }

    fn vm(name: &str, lib_path: &Path, code: Option<&Path>, meta: Option<&Path>) -> Result<Build> {
        let lib = library(lib_path)?;
        let exe = match code {
            Some(c) => tvm_runtime::vm::load_executable(&read(c)?, Some(lib))?,
            None => lib,
        };
        // Both VMs' executables describe their functions (a Relax one also each input's dtype
        // and shape, read off the function's own checks).
        let text = match call(&exe, "tvmrt.describe", |_| {})? {
            RetValue::Str(s) => s,
            other => return Err(Error::tvm(format!("tvmrt.describe returned {other:?}"))),
        };
        let described: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::tvm(e.to_string()))?;
        let main = described["functions"]
            .as_array()
            .and_then(|fs| fs.iter().find(|f| f["name"] == "main"))
            .ok_or_else(|| Error::value("the executable has no function 'main'"))?;
        let params: Vec<String> = main["params"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let mut build = Build {
            name: name.to_string(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            fixed: false,
            recorded: false,
            note: None,
            engine: Engine::Vm { exe },
        };
        match (meta, typed_inputs(main)) {
            (Some(m), _) => {
                let (inputs, outputs) = read_meta(m)?;
                let names: Vec<&str> = inputs.iter().map(|t| t.name.as_str()).collect();
                if names != params.iter().map(String::as_str).collect::<Vec<_>>() {
                    return Err(Error::value(format!(
                        "{} records inputs {names:?}, the executable takes {params:?}",
                        m.display()
                    )));
                }
                (build.inputs, build.outputs, build.recorded) = (inputs, outputs, true);
            }
            (None, Some(inputs)) => {
                build.outputs = build.probe_outputs(&inputs)?;
                (build.inputs, build.recorded) = (inputs, true);
            }
            // Names alone: the config gives the dtypes and shapes.
            (None, None) => {
                build.inputs =
                    params.iter().map(|p| TensorSpec::new(p.as_str(), DLDataType::F32, Vec::new())).collect();
            }
        }
        Ok(build)
    }

    /// The outputs of a model whose inputs are described, from three runs: on zeros with each open
    /// input dimension 1, then 2, then on ones at 2 (values any index input takes). An output
    /// dimension that differs between them is open (-1): one that follows the batch, or the data
    /// (a shape no run shows to vary is taken as fixed: declare such outputs in the config).
    fn probe_outputs(&self, inputs: &[TensorSpec]) -> Result<Vec<TensorSpec>> {
        let runner = self.runner(DLDevice::CPU, None)?;
        let run_at = |open: i64, ones: bool| -> Result<Vec<ObjRef<NDArray>>> {
            let arrays = inputs
                .iter()
                .map(|t| {
                    let shape: Vec<i64> = t.shape.iter().map(|&d| if d < 0 { open } else { d }).collect();
                    let zero = NDArray::empty(&shape, t.dtype, DLDevice::CPU)?;
                    if !ones {
                        return Ok(zero);
                    }
                    let one = one_of(t.dtype)?;
                    NDArray::from_bytes(&shape, t.dtype, &one.repeat(zero.raw().nbytes()? / one.len()))
                })
                .collect::<Result<Vec<_>>>()?;
            runner.run(&arrays)
        };
        let runs = [run_at(1, false)?, run_at(2, false)?, run_at(2, true)?];
        if runs.iter().any(|r| r.len() != runs[0].len()) {
            return Err(Error::value("the model gives a different number of outputs for different inputs"));
        }
        Ok((0..runs[0].len())
            .map(|k| {
                let first = &runs[0][k];
                let shape = (0..first.shape().len())
                    .map(|d| {
                        let same = runs
                            .iter()
                            .all(|r| r[k].shape().len() == first.shape().len() && r[k].shape()[d] == first.shape()[d]);
                        if same {
                            first.shape()[d]
                        } else {
                            -1
                        }
                    })
                    .collect();
                TensorSpec::new(format!("output_{k}"), first.dtype(), shape)
            })
            .collect())
    }

    fn aot(name: &str, lib_path: &Path, device: DLDevice) -> Result<Build> {
        let factory = library(lib_path)?;
        let names = object(call(&factory, "list_module_names", |_| {})?, "list_module_names")?;
        let module_name = names
            .downcast_ref::<ArrayObj>()
            .and_then(|a| a.items().first().and_then(|s| s.downcast_ref::<StringObj>()).map(|s| s.as_str().to_string()))
            .unwrap_or_else(|| "default".to_string());
        let mut build = Build {
            name: name.to_string(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            fixed: true,
            recorded: false,
            note: None,
            engine: Engine::Aot { factory, module_name },
        };
        let Runner::Aot(ex) = build.runner(device, None)? else { unreachable!("an AOT build makes AOT runners") };
        let count = |f: &str| match call(&ex, f, |_| {}) {
            Ok(RetValue::Int(n)) => Ok(n),
            other => Err(Error::tvm(format!("{f} returned {other:?}"))),
        };
        let tensor = |f: &str, i: i64| -> Result<ObjRef<NDArray>> {
            object(
                call(&ex, f, |a| {
                    a.int(i);
                })?,
                f,
            )?
            .downcast::<NDArray>()
            .map_err(|_| Error::tvm(format!("{f} gave no array")))
        };
        let name = |f: &str, i: i64| match call(&ex, f, |a| {
            a.int(i);
        })? {
            RetValue::Str(s) => Ok(s),
            other => Err(Error::tvm(format!("{f} returned {other:?}"))),
        };
        for i in 0..count("get_num_inputs")? {
            let t = tensor("get_input", i)?;
            build.inputs.push(TensorSpec::new(name("get_input_name", i)?, t.dtype(), t.shape().to_vec()));
        }
        for k in 0..count("get_num_outputs")? {
            let t = tensor("get_output", k)?;
            // The metadata's name, as every other face gives it.
            build.outputs.push(TensorSpec::new(name("get_output_name", k)?, t.dtype(), t.shape().to_vec()));
        }
        Ok(build)
    }

    /// Whether it runs on graph executors (whose activations come from the model's arena pool).
    pub fn is_graph(&self) -> bool {
        matches!(self.engine, Engine::Graph { .. })
    }

    /// The kind of artefact, as logs and messages name it.
    pub fn kind(&self) -> &'static str {
        match self.engine {
            Engine::Graph { .. } => "graph executor",
            Engine::Vm { .. } => "VM",
            Engine::Aot { .. } => "AOT executor",
        }
    }

    /// A new runner on `device`, bound to the build's weights; a graph runner draws its
    /// activations from `pool`.
    pub fn runner(&self, device: DLDevice, pool: Option<&Arc<ArenaPool>>) -> Result<Runner> {
        match &self.engine {
            Engine::Graph { lib, graph_json, factory, holder, shared, mapped } => {
                let m = match lib.node::<Factory>() {
                    Some(f) if *factory => f.create_executor(lib, device)?,
                    f => {
                        let plan = tvm_runtime::executor::plan::Plan::new(graph_json, lib.clone(), device)?;
                        let ex = GraphExecutor::new(plan)?;
                        if let Some(f) = f {
                            ex.bind_params(f.params())?;
                        }
                        Module::new(ex)
                    }
                };
                let ex = graph_exec(&m);
                ex.set_strict_inputs(true);
                if let Some(map) = mapped {
                    crate::prepared::load(ex, map)?;
                } else if let Some(names) = shared {
                    ex.share_params(graph_exec(holder), names)?;
                }
                if let Some(pool) = pool {
                    ex.join_pool(pool)?;
                }
                Ok(Runner::Graph(m))
            }
            Engine::Vm { exe } => {
                // The Relay VM's and the Relax VM's executables both make their VM so.
                let vm = object(call(exe, "vm_load_executable", |_| {})?, "vm_load_executable")?
                    .downcast::<Module>()
                    .map_err(|_| Error::tvm("vm_load_executable made no module"))?;
                call(&vm, "init", |a| {
                    a.int(i64::from(device.device_type)).int(i64::from(device.device_id)).int(2);
                    if device.device_type != 1 {
                        a.int(1).int(0).int(2);
                    }
                })?;
                Ok(Runner::Vm(vm))
            }
            Engine::Aot { factory, module_name } => {
                let m = object(
                    call(factory, module_name, |a| {
                        a.device(device);
                    })?,
                    "the AOT factory",
                )?;
                Ok(Runner::Aot(m.downcast::<Module>().map_err(|_| Error::tvm("the AOT factory made no module"))?))
            }
        }
    }
}

impl Runner {
    /// Runs on `inputs` (in the build's input order) and gives the outputs (a VM's tuple flattened).
    pub fn run(&self, inputs: &[ObjRef<NDArray>]) -> Result<Vec<ObjRef<NDArray>>> {
        match self {
            Runner::Graph(m) => {
                let ex = graph_exec(m);
                let plan = ex.plan().clone();
                let data: Vec<usize> = (0..plan.num_inputs()).filter(|&i| !ex.is_param(plan.input_name(i))).collect();
                for (&i, x) in data.iter().zip(inputs) {
                    ex.set_input(i, x.raw())?;
                }
                ex.run()?;
                (0..plan.num_outputs()).map(|k| ex.output(k)).collect()
            }
            Runner::Vm(vm) => {
                call(vm, "set_input", |a| {
                    a.str("main");
                    for x in inputs {
                        a.object(x.clone().into_any());
                    }
                })?;
                let result = object(
                    call(vm, "invoke", |a| {
                        a.str("main");
                    })?,
                    "the VM",
                )?;
                let mut out = Vec::new();
                flatten(result, &mut out)?;
                Ok(out)
            }
            Runner::Aot(ex) => {
                for (i, x) in inputs.iter().enumerate() {
                    call(ex, "set_input", |a| {
                        a.int(i as i64).object(x.clone().into_any());
                    })?;
                }
                call(ex, "run", |_| {})?;
                let n = match call(ex, "get_num_outputs", |_| {})? {
                    RetValue::Int(n) => n,
                    other => return Err(Error::tvm(format!("get_num_outputs returned {other:?}"))),
                };
                (0..n)
                    .map(|k| {
                        object(
                            call(ex, "get_output", |a| {
                                a.int(k);
                            })?,
                            "get_output",
                        )?
                        .downcast::<NDArray>()
                        .map_err(|_| Error::tvm("get_output gave no array"))
                    })
                    .collect()
            }
        }
    }
}

fn flatten(o: AnyObject, out: &mut Vec<ObjRef<NDArray>>) -> Result<()> {
    // The Relay VM's tuples are ADTs, the Relax VM's arrays.
    if let Some(adt) = o.downcast_ref::<AdtObj>() {
        for f in adt.fields() {
            flatten(f.clone(), out)?;
        }
        return Ok(());
    }
    if let Some(arr) = o.downcast_ref::<ArrayObj>() {
        for f in arr.items() {
            flatten(f.clone(), out)?;
        }
        return Ok(());
    }
    out.push(o.downcast::<NDArray>().map_err(|_| Error::tvm("the VM returned something other than tensors"))?);
    Ok(())
}

/// The bytes of one element of value 1 in `dtype` (booleans, integers, floats of 16, 32, 64 bits).
fn one_of(dtype: DLDataType) -> Result<Vec<u8>> {
    use tvm_runtime::dlpack::{kDLBool, kDLFloat, kDLInt, kDLUInt};
    let bytes = match (dtype.code, dtype.bits) {
        (c, 1 | 8) if c == kDLUInt || c == kDLInt || c == kDLBool => vec![1u8],
        (c, 16 | 32 | 64) if c == kDLUInt || c == kDLInt => {
            let mut b = vec![0u8; dtype.bits as usize / 8];
            b[0] = 1;
            b
        }
        (c, 16) if c == kDLFloat => 0x3c00u16.to_le_bytes().to_vec(),
        (c, 32) if c == kDLFloat => 1f32.to_le_bytes().to_vec(),
        (c, 64) if c == kDLFloat => 1f64.to_le_bytes().to_vec(),
        _ => return Err(Error::value(format!("no probe value for {dtype:?}: declare the outputs in the config"))),
    };
    Ok(bytes.repeat(usize::from(dtype.lanes.max(1))))
}

/// A function's inputs as its description gives them, when it gives every one's dtype and shape
/// (a Relax executable's, from its checks; -1 along a symbolic dimension).
fn typed_inputs(function: &serde_json::Value) -> Option<Vec<TensorSpec>> {
    function["inputs"]
        .as_array()?
        .iter()
        .map(|i| {
            let dtype = tvm_runtime::dtype::parse(i["dtype"].as_str()?).ok()?;
            let shape = i["shape"].as_array()?.iter().map(serde_json::Value::as_i64).collect::<Option<Vec<_>>>()?;
            Some(TensorSpec::new(i["name"].as_str()?, dtype, shape))
        })
        .collect()
}

/// The inputs and outputs a DLR-style `.meta` lists (`{"Model": {"Inputs": [{"name", "dtype",
/// "shape"}], "Outputs": [...]}}`, -1 or null along an open axis).
fn read_meta(path: &Path) -> Result<(Vec<TensorSpec>, Vec<TensorSpec>)> {
    let bad = |why: String| Error::value(format!("{}: not a model .meta ({why})", path.display()));
    let doc: serde_json::Value = serde_json::from_slice(&read(path)?).map_err(|e| bad(e.to_string()))?;
    let model = doc.get("Model").unwrap_or(&doc);
    let infos = |key: &str, default: &str| -> Result<Vec<TensorSpec>> {
        let Some(list) = model.get(key) else { return Ok(Vec::new()) };
        let list = list.as_array().ok_or_else(|| bad(format!("{key} is not a list")))?;
        list.iter()
            .enumerate()
            .map(|(k, t)| {
                let name = t.get("name").and_then(|n| n.as_str()).map_or(format!("{default}_{k}"), str::to_string);
                let dtype = t.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad(format!("{name}: no dtype")))?;
                let shape = t
                    .get("shape")
                    .and_then(|s| s.as_array())
                    .ok_or_else(|| bad(format!("{name}: no shape")))?
                    .iter()
                    .map(|d| if d.is_null() { Some(-1) } else { d.as_i64() })
                    .collect::<Option<Vec<i64>>>()
                    .ok_or_else(|| bad(format!("{name}: a dimension that is not a number")))?;
                Ok(TensorSpec::new(name, dtype.parse()?, shape))
            })
            .collect()
    };
    Ok((infos("Inputs", "input")?, infos("Outputs", "output")?))
}
