//! AOT executor artefacts in the tool: found by their factory's entry in the library's module
//! blob, then run as the VM's programs are (`vm.rs`): inputs in, one call, outputs out. What the
//! VM's commands need of them is here: the executor their factory makes, its inputs, a run.

use crate::request_model::{Engine, VmModel};
use crate::ModelArgs;
use std::path::{Path, PathBuf};
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::{ArgsBuilder, RetValue};
use tvm_runtime::tensor::NDArray;
use tvm_runtime::vm::objects::AdtObj;
use tvm_runtime::{Error, Result};

/// The factory's type key as a module blob holds it (a dmlc string).
const BLOB_MARK: &[u8] = b"\x12\0\0\0\0\0\0\0AotExecutorFactory";

fn holds_aot(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.windows(BLOB_MARK.len()).any(|w| w == BLOB_MARK))
}

/// The AOT model the arguments name, if they name one.
pub fn detect(args: &ModelArgs) -> Result<Option<VmModel>> {
    let Some(spec) = args.model.clone().or_else(|| args.lib.clone()) else { return Ok(None) };
    let lib: PathBuf = if spec.is_dir() {
        match crate::artefacts::library(&spec) {
            Ok(lib) if holds_aot(&lib) => lib,
            _ => return Ok(None),
        }
    } else if spec.is_file() && holds_aot(&spec) {
        spec.clone()
    } else {
        return Ok(None);
    };
    let dir = if spec.is_dir() { spec.clone() } else { spec.parent().unwrap_or(Path::new(".")).to_path_buf() };
    let lib_name = lib.to_string_lossy().into_owned();
    let lib_path = if lib.is_relative() && !lib_name.contains('/') { format!("./{lib_name}") } else { lib_name };
    let factory = tvm_runtime::library::load_file(&lib_path, "so")?;
    let names = match call(&factory, "list_module_names", |_| {})? {
        RetValue::Object(o) => o,
        other => return Err(Error::tvm(format!("list_module_names returned {other:?}"))),
    };
    let module_name = names
        .downcast_ref::<tvm_runtime::packed::ArrayObj>()
        .and_then(|a| a.items().first().and_then(|s| s.downcast_ref::<tvm_runtime::packed::StringObj>()))
        .map_or_else(|| "default".to_string(), |s| s.as_str().to_string());
    let device = args.device.0.unwrap_or(DLDevice::CPU);
    let mut m = VmModel {
        dir,
        label: format!("{} (AOT executor)", lib.display()),
        exe: factory,
        params: Vec::new(),
        device,
        engine: Engine::Aot(module_name),
        layouts: Vec::new(),
        output_names: Vec::new(),
    };
    let ex = executor(&m)?;
    let n = int(&ex, "get_num_inputs", |_| {})?;
    m.params = indexed_names(&ex, "get_input_name", n)?;
    m.layouts = (0..n)
        .map(|i| {
            match call(&ex, "get_input", |a| {
                a.int(i);
            })? {
                RetValue::Object(o) => {
                    let t = o.downcast::<NDArray>().map_err(|_| Error::tvm("get_input gave no array"))?;
                    Ok((t.dtype(), t.shape().to_vec()))
                }
                other => Err(Error::tvm(format!("get_input returned {other:?}"))),
            }
        })
        .collect::<Result<_>>()?;
    m.output_names = indexed_names(&ex, "get_output_name", int(&ex, "get_num_outputs", |_| {})?)?;
    Ok(Some(m))
}

/// The strings `name(i)` answers for i in 0..count (the executor's input or output names).
fn indexed_names(ex: &ObjRef<Module>, name: &str, count: i64) -> Result<Vec<String>> {
    (0..count)
        .map(|i| {
            match call(ex, name, |a| {
                a.int(i);
            })? {
                RetValue::Str(s) => Ok(s),
                other => Err(Error::tvm(format!("{name} returned {other:?}"))),
            }
        })
        .collect()
}

fn call(m: &ObjRef<Module>, name: &str, build: impl FnOnce(&mut ArgsBuilder)) -> Result<RetValue> {
    let f = Module::require_function(m, name)?;
    let mut a = ArgsBuilder::new();
    build(&mut a);
    f.call(&a.args())
}

fn int(m: &ObjRef<Module>, name: &str, build: impl FnOnce(&mut ArgsBuilder)) -> Result<i64> {
    match call(m, name, build)? {
        RetValue::Int(n) => Ok(n),
        other => Err(Error::tvm(format!("{name} returned {other:?}"))),
    }
}

/// An executor of the model, from its factory.
pub fn executor(m: &VmModel) -> Result<ObjRef<Module>> {
    let Engine::Aot(module_name) = &m.engine else { return Err(Error::internal("not an AOT model")) };
    match call(&m.exe, module_name, |a| {
        a.device(m.device);
    })? {
        RetValue::Object(o) => o.downcast::<Module>().map_err(|_| Error::tvm("the factory made no module")),
        other => Err(Error::tvm(format!("the factory returned {other:?}"))),
    }
}

/// Sets the inputs (in order), runs, and gives the outputs: one tensor, or a tuple of them.
pub fn set_and_run(ex: &ObjRef<Module>, arrays: &[ObjRef<NDArray>]) -> Result<AnyObject> {
    for (i, x) in arrays.iter().enumerate() {
        call(ex, "set_input", |a| {
            a.int(i as i64).object(x.clone().into_any());
        })?;
    }
    call(ex, "run", |_| {})?;
    let outputs = (0..int(ex, "get_num_outputs", |_| {})?)
        .map(|k| {
            match call(ex, "get_output", |a| {
                a.int(k);
            })? {
                RetValue::Object(o) => Ok(o),
                other => Err(Error::tvm(format!("get_output returned {other:?}"))),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    match <[AnyObject; 1]>::try_from(outputs) {
        Ok([one]) => Ok(one),
        Err(many) => Ok(AdtObj::new(0, many).into_any()),
    }
}

/// `inspect`: what the library's metadata says of the entry function.
pub fn show(d: &serde_json::Value, json_out: bool) -> Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(d).expect("serialisable"));
        return Ok(());
    }
    println!("model      {}", d["model"].as_str().unwrap_or(""));
    println!(
        "entry      {}___tvm_main__ (the factory's '{}')",
        d["mod_name"].as_str().unwrap_or(""),
        d["module_name"].as_str().unwrap_or("")
    );
    for (what, key) in [("input", "inputs"), ("output", "outputs"), ("workspace", "workspace_pools")] {
        for t in d[key].as_array().into_iter().flatten() {
            println!(
                "{what:<10} {}: {} {}",
                t["name"].as_str().unwrap_or(""),
                t["dtype"].as_str().unwrap_or(""),
                t["shape"]
            );
        }
    }
    let constants = d["constants"].as_array().map_or(0, Vec::len);
    println!("constants  {constants} in the constant pool (USMP), else in the library's own data");
    Ok(())
}
