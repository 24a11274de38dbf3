//! `run`, `inspect` and `profile` of VM models: Relay VM executables (`relay.vm.compile`: an
//! `export_library` of the executable, or the split form's bytecode beside its kernel library)
//! and Relax VM executables (TVM 0.19 to 0.27), which answer the same functions. Inputs of any shape
//! the model accepts come from files (`--input NAME=FILE`, `--inputs FILE.npz`); a fixture folder's
//! recorded inputs are used when none are given, and its outputs checked.

use crate::request_model::{Engine, VmModel};
use crate::tensors::{self, HostTensor};
use crate::{InputArgs, ModelArgs, ProfileArgs, RunArgs};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::module::Module;
use tvm_runtime::object::{AnyObject, ObjRef};
use tvm_runtime::packed::{ArgsBuilder, RetValue};
use tvm_runtime::tensor::NDArray;
use tvm_runtime::vm::objects::AdtObj;
use tvm_runtime::{Error, Result};

/// The executables' type keys as module blobs hold them (dmlc strings): the Relay VM's, and the
/// Relax VM's of 0.19 and of 0.20 on.
const BLOB_MARKS: [&[u8]; 3] = [
    b"\x0c\x00\x00\x00\x00\x00\x00\x00VMExecutable",
    b"\x10\x00\x00\x00\x00\x00\x00\x00relax.Executable",
    b"\x12\x00\x00\x00\x00\x00\x00\x00relax.VMExecutable",
];
const VM_MAGIC: u64 = 0xD225_DE2F_4214_151D;

fn holds_vm(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| BLOB_MARKS.iter().any(|m| b.windows(m.len()).any(|w| w == *m)))
}

fn is_code(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() >= 8 && u64::from_le_bytes(b[..8].try_into().unwrap()) == VM_MAGIC)
}

/// The VM model the arguments name, if they name one (else the caller's graph model).
pub fn detect(args: &ModelArgs) -> Result<Option<VmModel>> {
    match detect_vm(args)? {
        Some(m) => Ok(Some(m)),
        None => crate::aot::detect(args),
    }
}

fn detect_vm(args: &ModelArgs) -> Result<Option<VmModel>> {
    let Some(spec) = args.model.clone().or_else(|| args.lib.clone()) else { return Ok(None) };
    let (dir, lib, code) = if spec.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&spec)
            .map_err(|e| Error::io(spec.display().to_string(), e))?
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        let whole = files.iter().find(|f| f.extension().is_some_and(|e| e == "so") && holds_vm(f)).cloned();
        let code = files.iter().find(|f| f.extension().is_none_or(|e| e != "so") && f.is_file() && is_code(f)).cloned();
        match (whole, code) {
            (Some(w), _) => (spec.clone(), args.lib.clone().unwrap_or(w), None),
            (None, Some(c)) => {
                let lib = match &args.lib {
                    Some(l) => l.clone(),
                    None => crate::artefacts::library(&spec)?,
                };
                (spec.clone(), lib, Some(c))
            }
            _ => return Ok(None),
        }
    } else if spec.is_file() && holds_vm(&spec) {
        (spec.parent().unwrap_or(Path::new(".")).to_path_buf(), spec.clone(), None)
    } else {
        return Ok(None);
    };
    let lib_name = lib.to_string_lossy().into_owned();
    let lib_path = if lib.is_relative() && lib.parent().is_none_or(|p| p.as_os_str().is_empty()) {
        format!("./{lib_name}")
    } else {
        lib_name
    };
    let library = tvm_runtime::library::load_file(&lib_path, "so")?;
    let exe = match &code {
        Some(c) => tvm_runtime::vm::load_executable(
            &std::fs::read(c).map_err(|e| Error::io(c.display().to_string(), e))?,
            Some(library),
        )?,
        None => library,
    };
    if let Some(e) = tvm_runtime::relax::executable_of(&exe) {
        let main = e.function("main")?;
        let params = e.image.functions[main].params.clone();
        // Inputs made up when none are given need every dtype and dimension fixed.
        let sig = tvm_runtime::relax::signature::params(&e, main);
        let layouts = sig
            .iter()
            .map(|p| Some((p.dtype?, p.shape.clone().filter(|s| s.iter().all(|&d| d >= 0))?)))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        return Ok(Some(VmModel {
            label: format!("{} (Relax VM, {})", lib.display(), e.generation.describe()),
            dir,
            exe,
            params,
            device: args.device.0.unwrap_or(DLDevice::CPU),
            engine: Engine::Vm,
            layouts,
            output_names: Vec::new(),
        }));
    }
    let e = tvm_runtime::vm::executable_of(&exe)?;
    let params = e.program.function("main")?.params.clone();
    let uses_opencl = e.program.devices.iter().any(|d| d.device.device_type == 4);
    let device =
        args.device.0.unwrap_or(if uses_opencl { DLDevice { device_type: 4, device_id: 0 } } else { DLDevice::CPU });
    let label = match &code {
        Some(c) => format!("{} (Relay VM {}: {} + {})", dir.display(), e.program.version, c.display(), lib.display()),
        None => format!("{} (Relay VM {})", lib.display(), e.program.version),
    };
    Ok(Some(VmModel {
        dir,
        label,
        exe,
        params,
        device,
        engine: Engine::Vm,
        layouts: Vec::new(),
        output_names: Vec::new(),
    }))
}

fn call(m: &ObjRef<Module>, name: &str, build: impl FnOnce(&mut ArgsBuilder)) -> Result<RetValue> {
    let f = Module::require_function(m, name)?;
    let mut a = ArgsBuilder::new();
    build(&mut a);
    f.call(&a.args())
}

impl VmModel {
    pub fn vm(&self, debug: bool) -> Result<ObjRef<Module>> {
        if let Engine::Aot(_) = self.engine {
            if debug {
                return Err(Error::value(
                    "an AOT executor runs the whole model in one compiled call: there is nothing to profile per operator",
                ));
            }
            return crate::aot::executor(self);
        }
        let vm = if tvm_runtime::relax::executable_of(&self.exe).is_some() {
            let load = if debug { "vm_profiler_load_executable" } else { "vm_load_executable" };
            call(&self.exe, load, |_| {})?.into_object::<Module>()?
        } else {
            tvm_runtime::vm::VirtualMachine::create(&self.exe, debug)?
        };
        call(&vm, "init", |a| {
            a.int(i64::from(self.device.device_type)).int(i64::from(self.device.device_id)).int(2);
            if self.device.device_type != 1 {
                a.int(1).int(0).int(2);
            }
        })?;
        Ok(vm)
    }

    /// The inputs: from files, else the folder's recorded ones (a fixture's manifest, case 0).
    fn inputs(&self, data: &InputArgs) -> Result<(Vec<HostTensor>, Option<Vec<PathBuf>>)> {
        let mut given: Vec<HostTensor> = Vec::new();
        if let Some(npz) = &data.inputs {
            given.extend(tensors::read_npz(&npz.to_string_lossy())?);
        }
        for (name, file) in &data.input {
            // A VM executable records no input layouts: a raw file says its own (FILE@DTYPE[SHAPE]).
            given.push(tensors::read_tensor_file(name, &file.to_string_lossy(), None)?);
        }
        if given.is_empty() {
            if let Some(recorded) = self.recorded() {
                return Ok(recorded);
            }
            if self.layouts.len() == self.params.len() && !self.params.is_empty() {
                // Shapes the model records: made-up values, as for a graph model.
                let fill = tensors::fill_of(data.fill.unwrap_or(crate::FillKind::Random), data.seed);
                let made = self
                    .params
                    .iter()
                    .zip(&self.layouts)
                    .map(|(name, (dtype, shape))| tensors::filled(name, *dtype, shape, fill))
                    .collect::<Result<Vec<_>>>()?;
                return Ok((made, None));
            }
            return Err(Error::value(format!(
                "a VM model takes inputs of any shape it accepts: give each of {} with --input NAME=FILE.npy or \
                 --inputs FILE.npz",
                self.params.join(", ")
            )));
        }
        // A name the model does not have first: a misspelt input is the likelier mistake than a
        // missing one, and its message names both.
        if let Some(extra) = given.iter().find(|t| !self.params.contains(&t.name)) {
            return Err(Error::key(format!(
                "no input named '{}' (the inputs: {})",
                extra.name,
                self.params.join(", ")
            )));
        }
        let mut ordered = Vec::new();
        for p in &self.params {
            let t = given.iter().find(|t| &t.name == p).ok_or_else(|| {
                Error::key(format!("no value for input '{p}' (the inputs: {})", self.params.join(", ")))
            })?;
            ordered.push(t.clone());
        }
        Ok((ordered, None))
    }

    /// A fixture's first recorded case (scripts/make_vm_fixtures.py's manifest) and its outputs.
    fn recorded(&self) -> Option<(Vec<HostTensor>, Option<Vec<PathBuf>>)> {
        let text = std::fs::read_to_string(self.dir.join("manifest.txt")).ok()?;
        let (mut ins, mut outs, mut cases) = (Vec::new(), Vec::new(), 0);
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.first().copied() {
                Some("case") => {
                    cases += 1;
                    if cases > 1 {
                        break;
                    }
                }
                Some("input") => {
                    let nd: usize = w.get(3)?.parse().ok()?;
                    let shape = w[4..4 + nd].iter().map(|d| d.parse().ok()).collect::<Option<Vec<i64>>>()?;
                    let dtype = w[2].parse().ok()?;
                    let data = std::fs::read(self.dir.join(w.get(4 + nd)?)).ok()?;
                    ins.push(HostTensor { name: w[1].to_string(), dtype, shape, data });
                }
                Some("output") => outs.push(self.dir.join(w.last()?)),
                _ => {}
            }
        }
        (ins.len() == self.params.len()).then_some((ins, Some(outs)))
    }
}

fn set_and_invoke(vm: &ObjRef<Module>, inputs: &[HostTensor]) -> Result<AnyObject> {
    let arrays = inputs.iter().map(|t| NDArray::from_bytes(&t.shape, t.dtype, &t.data)).collect::<Result<Vec<_>>>()?;
    if vm.type_key() == "AotExecutor" {
        return crate::aot::set_and_run(vm, &arrays);
    }
    call(vm, "set_input", |a| {
        a.str("main");
        for x in &arrays {
            a.object(x.clone().into_any());
        }
    })?;
    match call(vm, "invoke", |a| {
        a.str("main");
    })? {
        RetValue::Object(o) => Ok(o),
        other => Err(Error::tvm(format!("the VM returned {other:?}"))),
    }
}

/// The result's tensors in order (tuples flattened) and its nesting, as `(t(tt))`.
fn flatten(o: &AnyObject, out: &mut Vec<HostTensor>) -> String {
    if let Some(adt) = o.downcast_ref::<AdtObj>() {
        return format!("({})", adt.fields().iter().map(|f| flatten(f, out)).collect::<String>());
    }
    // A Relax VM's tuples are arrays.
    if let Some(arr) = o.downcast_ref::<tvm_runtime::packed::ArrayObj>() {
        return format!("({})", arr.items().iter().map(|f| flatten(f, out)).collect::<String>());
    }
    if let Some(t) = o.downcast_ref::<NDArray>() {
        out.push(HostTensor {
            name: format!("output_{}", out.len()),
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            data: t.to_vec(),
        });
    }
    "t".into()
}

/// The inputs as reports, saying where their values came from.
fn input_json(inputs: &[HostTensor], recorded: bool, data: &InputArgs) -> Vec<Value> {
    let source = if recorded {
        "recorded"
    } else if data.inputs.is_some() || !data.input.is_empty() {
        "file"
    } else {
        match data.fill.unwrap_or(crate::FillKind::Random) {
            crate::FillKind::Random => "random",
            crate::FillKind::Zeros => "zeros",
            crate::FillKind::Ones => "ones",
        }
    };
    inputs
        .iter()
        .map(|t| json!({"name": t.name, "dtype": t.dtype.to_string(), "shape": t.shape, "source": source}))
        .collect()
}

pub fn run(m: &VmModel, a: &RunArgs, json_out: bool) -> Result<bool> {
    let t0 = Instant::now();
    let vm = m.vm(false)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let (inputs, reference) = m.inputs(&a.data)?;
    let mut outputs = Vec::new();
    let structure = flatten(&set_and_invoke(&vm, &inputs)?, &mut outputs);
    for (t, name) in outputs.iter_mut().zip(&m.output_names) {
        t.name.clone_from(name);
    }
    let (repeat, number) = (a.repeat as usize, a.number as usize);
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 2e-3 {
        set_and_invoke(&vm, &inputs)?;
    }
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let start = Instant::now();
        for _ in 0..number {
            set_and_invoke(&vm, &inputs)?;
        }
        times.push(start.elapsed().as_secs_f64() * 1e3 / number as f64);
    }
    if let Some(path) = &a.outputs {
        tensors::write_npz(&path.to_string_lossy(), &outputs)?;
    }
    let expected = tensors::expected_of(a, outputs.first())?;
    let mut all_ok = true;
    let outs: Vec<Value> = outputs
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let expected = expected.as_ref().filter(|(_, first_only)| k == 0 || !first_only).map(|(w, _)| w);
            let matches =
                reference.as_ref().and_then(|r| r.get(k)).and_then(|p| std::fs::read(p).ok()).map(|w| w == t.data);
            let expect = match &expected {
                Some(want) => {
                    let w = want.iter().find(|w| w.name == t.name).or_else(|| want.get(k));
                    let c = match w {
                        Some(w) => tensors::compare(t, w, a.rtol, a.atol)?,
                        None => json!({"ok": false, "why": "no reference array"}),
                    };
                    all_ok &= c["ok"] == true;
                    Some(c)
                }
                None => None,
            };
            Ok(json!({"name": t.name, "dtype": t.dtype.to_string(), "shape": t.shape,
                      "preview": tensors::preview(t, if a.print_full { usize::MAX } else { 6 }),
                      "matches_reference": matches, "expect": expect}))
        })
        .collect::<Result<_>>()?;
    let mem: Value = match call(&m.exe, "tvmrt.memory_usage", |_| {})? {
        RetValue::Str(s) => serde_json::from_str(&s).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let relax = tvm_runtime::relax::executable_of(&m.exe).is_some();
    let executor = match m.engine {
        Engine::Aot(_) => "AOT",
        Engine::Vm if relax => "Relax VM",
        Engine::Vm => "Relay VM",
    };
    let report = json!({"model": m.label, "executor": executor, "load_ms": load_ms,
        "inputs": input_json(&inputs, reference.is_some(), &a.data), "structure": structure, "outputs": outs,
        "run_ms": {"mean": mean, "median": sorted[sorted.len() / 2], "min": sorted[0], "max": sorted[sorted.len() - 1],
                   "repeats": repeat, "runs": number},
        "memory": mem});
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
        return Ok(all_ok);
    }
    println!("model    {}", m.label);
    println!("load     {load_ms:.2} ms ({} of the model)", if executor == "AOT" { "an executor" } else { "a VM" });
    for i in report["inputs"].as_array().unwrap() {
        println!(
            "input    {}: {} {} ({})",
            i["name"].as_str().unwrap(),
            i["dtype"].as_str().unwrap(),
            i["shape"],
            i["source"].as_str().unwrap()
        );
    }
    println!("result   {structure} (t: a tensor, (..): a tuple), flattened below");
    for o in &outs {
        let check = match o["matches_reference"].as_bool() {
            Some(true) => " matches the reference",
            Some(false) => " DIFFERS from the reference",
            None => "",
        };
        let preview: Vec<String> = o["preview"].as_array().unwrap().iter().map(tensors::show).collect();
        println!(
            "output   {}: {} {} [{}]{check}",
            o["name"].as_str().unwrap(),
            o["dtype"].as_str().unwrap(),
            o["shape"],
            preview.join(", ")
        );
        if let Some(c) = o.get("expect").filter(|c| !c.is_null()) {
            println!(
                "expect   {}: {}",
                o["name"].as_str().unwrap(),
                if c["ok"] == true { "within tolerance" } else { "DIFFERS" }
            );
        }
    }
    println!(
        "run      mean {:.3} ms, median {:.3} ms, min {:.3} ms ({repeat} repeats of {number} runs, inputs set each run)",
        mean,
        sorted[sorted.len() / 2],
        sorted[0]
    );
    if let Engine::Aot(_) = m.engine {
        println!(
            "memory   constant pool {} B (one for every executor of the model); per executor: inputs {} B, outputs {} B, \
             workspace pools {} B",
            mem["constant_pool"],
            mem["per_executor"]["inputs"],
            mem["per_executor"]["outputs"],
            mem["per_executor"]["workspace_pools"]
        );
        return Ok(all_ok);
    }
    println!(
        "memory   constants {} B (device copies {} B), storage pools {}",
        mem["constants"],
        mem["constants_on_devices"],
        mem["pools"]
            .as_array()
            .map(|p| p
                .iter()
                .map(|p| format!("{}: {} B", p["device"].as_str().unwrap_or(""), p["bytes"]))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    Ok(all_ok)
}

pub fn inspect(m: &VmModel, json_out: bool) -> Result<()> {
    let RetValue::Str(text) = call(&m.exe, "tvmrt.describe", |_| {})? else { return Err(Error::tvm("no description")) };
    let mut d: Value = serde_json::from_str(&text).map_err(|e| Error::tvm(format!("description: {e}")))?;
    d["model"] = json!(m.label);
    if let Engine::Aot(module_name) = &m.engine {
        d["module_name"] = json!(module_name);
        return crate::aot::show(&d, json_out);
    }
    // The dynamic dimensions a recorded folder shows: those that differ between its cases.
    if json_out {
        println!("{}", serde_json::to_string_pretty(&d).expect("serialisable"));
        return Ok(());
    }
    println!("model      {}", m.label);
    println!(
        "bytecode   {} (compiled by TVM {})",
        d["bytecode"].as_str().unwrap_or(""),
        d["version"].as_str().unwrap_or("")
    );
    for f in d["functions"].as_array().unwrap() {
        let params: Vec<&str> = f["params"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        println!(
            "function   {}({}): {} instructions, {} registers",
            f["name"].as_str().unwrap(),
            params.join(", "),
            f["instructions"],
            f["registers"]
        );
    }
    println!("constants  {} ({} B)", d["constants"], d["constant_bytes"]);
    println!("kernels    {}", d["primitives"].as_array().map_or(0, Vec::len));
    for (i, dev) in d["devices"].as_array().unwrap().iter().enumerate() {
        println!(
            "device     {i}: type {} id {}{}",
            dev["device_type"],
            dev["device_id"],
            if i as u64 == d["host_device"].as_u64().unwrap_or(0) { " (host)" } else { "" }
        );
    }
    // A Relax executable's own checks say its parameters' dtypes and shapes (-1: symbolic).
    let described: Vec<&Value> = d["functions"][0]["inputs"].as_array().map(|v| v.iter().collect()).unwrap_or_default();
    if described.is_empty() {
        println!("inputs     any shape the model accepts: the executable records no parameter types");
    }
    for i in described {
        println!(
            "input      {}: {} {} (-1: any size)",
            i["name"].as_str().unwrap_or(""),
            i["dtype"].as_str().unwrap_or("?"),
            i["shape"]
        );
    }
    Ok(())
}

pub fn profile(m: &VmModel, a: &ProfileArgs, json_out: bool) -> Result<()> {
    let vm = m.vm(true)?;
    let (inputs, _) = m.inputs(&a.data)?;
    let arrays = inputs.iter().map(|t| NDArray::from_bytes(&t.shape, t.dtype, &t.data)).collect::<Result<Vec<_>>>()?;
    call(&vm, "set_input", |b| {
        b.str("main");
        for x in &arrays {
            b.object(x.clone().into_any());
        }
    })?;
    let RetValue::Str(text) = call(&vm, "profile_rpc", |b| {
        b.str("main");
    })?
    else {
        return Err(Error::tvm("no report"));
    };
    if json_out {
        println!("{text}");
        return Ok(());
    }
    let report = tvm_runtime::profiling::json::from_json(&text)?;
    if let Some(path) = &a.csv {
        std::fs::write(path, tvm_runtime::profiling::format::csv(&report))
            .map_err(|e| Error::io(path.display().to_string(), e))?;
    }
    print!("{}", tvm_runtime::profiling::format::table(&report, !a.in_order, !a.in_order, true)?);
    Ok(())
}
