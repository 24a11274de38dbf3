//! The four commands. Each prints a human summary, or one JSON document with `--json`.

use crate::model::{exec, Model};
use crate::tensors::{self, Fill, HostTensor};
use crate::{FillKind, InputArgs, ModelArgs, ProfileArgs, RunArgs, ShareArgs, WeightFill};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;
use tvm_runtime::executor::{GraphExecutor, SlotUse};
use tvm_runtime::graph::NodeKind;
use tvm_runtime::profiling::{self, Metric, Report};
use tvm_runtime::{Error, Result};

/// mean, median, min, max, std of milliseconds.
fn stats(ms: &[f64]) -> Value {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    let median = if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"mean": mean, "median": median, "min": v.first().copied().unwrap_or(0.0),
           "max": v.last().copied().unwrap_or(0.0), "std": std, "runs": v.len()})
}

/// Milliseconds for people: microseconds below one millisecond.
fn duration(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.3} us", ms * 1e3)
    } else {
        format!("{ms:.3} ms")
    }
}

fn progress(what: &str, i: usize, n: usize) {
    if std::io::stderr().is_terminal() {
        eprint!("\r{what} {i}/{n}{}", if i == n { "\n" } else { "" });
    }
}

pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

fn memory_json(ex: &GraphExecutor) -> Value {
    let m = ex.memory_usage();
    let device = format!("{}({})", tvm_runtime::device::type_name(m.device.device_type), m.device.device_id);
    json!({"device": device, "weights_mirrored": m.weights_mirrored,
           "weights_owned": m.weights_owned, "weights_shared": m.weights_shared, "weights_mapped": m.weights_mapped,
           "weights_derived": m.weights_derived, "activations": m.activations,
           "activations_shared": m.activations_shared, "activation_arena": m.activation_arena,
           "activation_bound": m.activation_bound,
           "ops_folded": m.ops_folded, "ops_total": m.ops_total,
           "workspace": tvm_runtime::backend::workspace::pooled_bytes(),
           "prepared_params": ex.prepared_params_use(),
           "pool": m.pool.map(|p| p.to_json())})
}

/// The memory report in one line, the same words for every command.
fn memory_line(label: &str, mem: &Value) -> String {
    let device = match mem["device"].as_str() {
        Some(d) if d != "cpu(0)" => format!(" on {d} (host weights mirrored there: {} B)", mem["weights_mirrored"]),
        _ => String::new(),
    };
    format!(
        "{label} weights owned {} B, shared {} B, mapped {} B, derived {} B; activations {} B (bound {} B), pooled arenas {} B, workspace {} B{device}",
        mem["weights_owned"],
        mem["weights_shared"],
        mem["weights_mapped"],
        mem["weights_derived"],
        mem["activations"],
        mem["activation_bound"],
        mem["activations_shared"],
        mem["workspace"]
    )
}

fn folded_line(label: &str, mem: &Value) -> String {
    let how = if mem["ops_folded"] == 0 {
        "a lone executor runs every operator, as upstream; --fold runs those reading only weights once, at load"
    } else if mem["prepared_params"] == "used" {
        "they read only weights: their results mapped from the prepared file, nothing computed at load"
    } else {
        "they read only weights: run once at load"
    };
    format!("{label} {} of {} operators ({how})", mem["ops_folded"], mem["ops_total"])
}

/// Recorded inputs (name, file) and reference outputs (files).
type Recorded = (Vec<(String, std::path::PathBuf)>, Vec<std::path::PathBuf>);

/// The fixture format of this repository: `manifest.txt` naming inputs and reference outputs.
fn manifest(model: &Model) -> Option<Recorded> {
    let text = std::fs::read_to_string(model.dir.join("manifest.txt")).ok()?;
    let (mut ins, mut outs) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let tok: Vec<&str> = line.split_whitespace().collect();
        match tok.first().copied() {
            Some("input") => ins.push((tok[1].to_string(), model.dir.join(tok.last()?))),
            Some("output") => outs.push(model.dir.join(tok.last()?)),
            _ => {}
        }
    }
    Some((ins, outs))
}

fn fill_name(fill: &Fill) -> &'static str {
    match fill {
        Fill::Random(_) => "random",
        Fill::Zeros => "zeros",
        Fill::Ones => "ones",
    }
}

/// Sets every input that is not a weight already: from files, the fixture's recorded inputs, or a
/// fill. Returns one report per input set, saying where its values came from. A model with no
/// source of weights at all (no weights in its library, no params file) is an error unless
/// `--fill-weights` asks for made-up ones: running on them silently would print meaningless results.
pub fn set_inputs(data: &InputArgs, margs: &ModelArgs, model: &Model, ex: &GraphExecutor) -> Result<Vec<Value>> {
    let mut given: Vec<HostTensor> = Vec::new();
    if let Some(npz) = &data.inputs {
        given.extend(tensors::read_npz(&npz.to_string_lossy())?);
    }
    let plan = ex.plan();
    for (name, file) in &data.input {
        let like = plan.input_index(name).map(|i| {
            let e = &plan.graph.entries[plan.input_entries[i]];
            (e.dtype, &e.shape[..])
        });
        given.push(tensors::read_tensor_file(name, &file.to_string_lossy(), like)?);
    }
    let unknown: Vec<&str> = given.iter().map(|t| t.name.as_str()).filter(|n| plan.input_index(n).is_none()).collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = (0..plan.num_inputs()).map(|i| plan.input_name(i)).collect();
        return Err(Error::key(format!(
            "the model has no input named '{}' (its inputs: {})",
            unknown.join("', '"),
            names.join(", ")
        )));
    }
    let recorded = if given.is_empty() && data.fill.is_none() { manifest(model).map(|m| m.0) } else { None };
    let open = model.data_inputs(ex);
    let is_given = |name: &str| {
        given.iter().any(|t| t.name == name) || recorded.as_ref().is_some_and(|r| r.iter().any(|(n, _)| n == name))
    };
    // Without any source of weights, which inputs are data is unknown: those given, or else the
    // first input (Relay puts data before weights); the rest are weights without values.
    let weightless = !model.has_weight_source() && open.len() > 1;
    let data_inputs: Vec<usize> = if weightless {
        let named: Vec<usize> = open.iter().copied().filter(|&i| is_given(plan.input_name(i))).collect();
        if named.is_empty() {
            open[..1].to_vec()
        } else {
            named
        }
    } else {
        open.clone()
    };
    let missing: Vec<usize> = open.iter().copied().filter(|i| !data_inputs.contains(i)).collect();
    let weight_fill = match (missing.is_empty(), margs.fill_weights) {
        (true, _) => None,
        (false, Some(WeightFill::Random)) => Some(Fill::Random(data.seed)),
        (false, Some(WeightFill::Zeros)) => Some(Fill::Zeros),
        (false, None) => {
            let list: Vec<String> = missing
                .iter()
                .map(|&i| {
                    let e = &plan.graph.entries[plan.input_entries[i]];
                    format!("{} {}{:?}", plan.input_name(i), e.dtype, e.shape)
                })
                .collect();
            return Err(Error::value(format!(
                "{} has no weights: its library carries none and no params file was found (looked for {}; \
                 --params names one). Inputs without values: {}. Pass --fill-weights random|zeros to run on made-up weights",
                model.dir.display(),
                crate::artefacts::params_looked_for(&model.dir),
                list.join(", ")
            )));
        }
    };
    let mut report = Vec::new();
    let mut saved = Vec::new();
    for i in open {
        let name = plan.input_name(i);
        let e = &plan.graph.entries[plan.input_entries[i]];
        let (bytes, source, weight) = if let Some(t) = given.iter().find(|t| t.name == name) {
            if t.shape != *e.shape {
                return Err(Error::value(format!(
                    "input '{name}' is {} {:?}, the file holds {} {:?}",
                    e.dtype, e.shape, t.dtype, t.shape
                )));
            }
            if t.dtype != e.dtype && !data.cast {
                return Err(Error::type_err(format!(
                    "input '{name}' is {} {:?}, the file holds {}: cast it (numpy: x.astype(\"{}\")) or pass --cast",
                    e.dtype, e.shape, t.dtype, e.dtype
                )));
            }
            if t.dtype != e.dtype {
                (tensors::cast(t, e.dtype)?.data, "file, cast", false)
            } else {
                (t.data.clone(), "file", false)
            }
        } else if let Some(path) = recorded.as_ref().and_then(|r| r.iter().find(|(n, _)| n == name)).map(|(_, p)| p) {
            (std::fs::read(path).map_err(|err| Error::io(path.display().to_string(), err))?, "recorded", false)
        } else {
            // A weight without values has its fill by now (else the error above).
            let weight = missing.contains(&i);
            let fill = match weight_fill {
                Some(fill) if weight => fill,
                _ => tensors::fill_of(data.fill.unwrap_or(FillKind::Random), data.seed),
            };
            (tensors::filled(name, e.dtype, &e.shape, fill)?.data, fill_name(&fill), weight)
        };
        ex.set_input_bytes(i, &bytes)?;
        if data.save_inputs.is_some() && !weight {
            saved.push(HostTensor { name: name.to_string(), dtype: e.dtype, shape: e.shape.to_vec(), data: bytes });
        }
        report.push(json!({"name": name, "dtype": e.dtype.to_string(), "shape": e.shape.to_vec(), "source": source,
                           "weight": weight}));
    }
    if let Some(path) = &data.save_inputs {
        tensors::write_npz(&path.to_string_lossy(), &saved)?;
    }
    Ok(report)
}

/// What a model is called in reports.
fn model_label(model: &Model) -> String {
    if model.bundled {
        "bundled MLP (tests/fixtures/mlp_b1, built by TVM 0.16)".to_string()
    } else {
        model.dir.display().to_string()
    }
}

/// Fails now, not after the timing runs, when an output file cannot be written.
/// Fails early when `path` could not be written, without creating or changing it (a command that
/// fails later leaves nothing behind).
fn check_writable(path: &Path) -> Result<()> {
    let io = |e| Error::io(path.display().to_string(), e);
    if path.exists() {
        return std::fs::OpenOptions::new().append(true).open(path).map(drop).map_err(io);
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let probe = path.with_file_name(format!(".{name}.{}.probe", std::process::id()));
    std::fs::File::create(&probe).map_err(io)?;
    std::fs::remove_file(&probe).map_err(io)
}

/// Fails early, before a model loads and runs, when a file to read later is not there.
pub fn check_readable(path: Option<&Path>) -> Result<()> {
    let Some(p) = path else { return Ok(()) };
    let s = p.to_string_lossy();
    // A raw file's layout may follow its name (FILE@DTYPE[SHAPE]).
    let file = if p.exists() { s.as_ref() } else { s.rsplit_once('@').map_or(s.as_ref(), |(f, _)| f) };
    std::fs::metadata(file).map(|_| ()).map_err(|e| Error::io(file.to_string(), e))
}

/// Runs the model; `Ok(false)` when `--expect` found outputs outside the tolerance.
pub fn run(a: &RunArgs, json_out: bool) -> Result<bool> {
    if let Some(m) = crate::vm::detect(&a.model)? {
        return crate::vm::run(&m, a, json_out);
    }
    for path in [&a.outputs, &a.data.save_inputs].into_iter().flatten() {
        check_writable(path)?;
    }
    check_readable(a.expect.as_deref())?;
    let t0 = Instant::now();
    let model = Model::load(a.model.model.as_deref(), &a.model)?;
    let m = model.executor(false)?;
    let ex = exec(&m);
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let inputs = set_inputs(&a.data, &a.model, &model, ex)?;
    ex.run()?;
    // Recorded outputs only apply to the recorded inputs.
    let recorded = !inputs.is_empty() && inputs.iter().all(|i| i["source"] == "recorded");
    let reference = manifest(&model).map(|m| m.1).filter(|_| recorded);
    let outputs: Vec<HostTensor> = (0..ex.plan().num_outputs())
        .map(|k| {
            let a = ex.output(k)?;
            Ok(HostTensor {
                name: format!("output_{k}"),
                dtype: a.dtype(),
                shape: a.shape().to_vec(),
                data: a.to_vec(),
            })
        })
        .collect::<Result<_>>()?;
    let (repeat, number) = (a.repeat as usize, a.number as usize);
    // Warm up first, as TVM's time evaluator discards its first call: one untimed repeat, and for
    // at least 2 ms (caches, the pool's workers, the CPU's clock), so the first timed repeat is
    // not the cold one.
    let warm = Instant::now();
    let mut runs = 0;
    while runs < number || warm.elapsed().as_secs_f64() < 2e-3 {
        ex.run()?;
        ex.plan().sync()?;
        runs += 1;
    }
    let mut times = Vec::with_capacity(repeat);
    for r in 0..repeat {
        let start = Instant::now();
        for _ in 0..number {
            ex.run()?;
        }
        ex.plan().sync()?;
        times.push(start.elapsed().as_secs_f64() * 1e3 / number as f64);
        progress("timing", r + 1, repeat);
    }
    if let Some(path) = &a.outputs {
        tensors::write_npz(&path.to_string_lossy(), &outputs)?;
    }
    let shown = if a.print_full { usize::MAX } else { 6 };
    let outs: Vec<Value> = outputs
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let matches = reference
                .as_ref()
                .and_then(|r| r.get(k))
                .and_then(|p| std::fs::read(p).ok())
                .map(|want| want == t.data);
            let top = a
                .print_top
                .map(|n| tensors::top(t, n as usize))
                .transpose()?
                .map(|v| v.into_iter().map(|(i, x)| json!([i, x])).collect::<Vec<_>>());
            Ok(json!({"name": t.name, "dtype": t.dtype.to_string(), "shape": t.shape,
                   "preview": tensors::preview(t, shown), "matches_reference": matches, "top": top}))
        })
        .collect::<Result<_>>()?;
    // `--expect`: each output against the array of its name (output_k), else the k-th; a single
    // array (.npy, raw) is the first output's.
    let expected = tensors::expected_of(a, outputs.first())?;
    let expect = match &expected {
        None => None,
        Some((want, first_only)) => {
            let mut results = Vec::new();
            for (k, t) in outputs.iter().enumerate().take(if *first_only { 1 } else { usize::MAX }) {
                let w = want.iter().find(|w| w.name == t.name).or_else(|| want.get(k)).ok_or_else(|| {
                    Error::key(format!("{} has no array for {} (nor a {}-th one)", a.expect_label(), t.name, k + 1))
                })?;
                results.push(tensors::compare(t, w, a.rtol, a.atol)?);
            }
            Some(results)
        }
    };
    let all_ok = expect.as_ref().is_none_or(|r| r.iter().all(|c| c["ok"] == true));
    let report = json!({
        "model": model_label(&model), "threads": tvm_runtime::backend::thread_pool::num_threads(),
        "load_ms": load_ms, "inputs": inputs, "outputs": outs, "outputs_file": a.outputs,
        "inputs_file": a.data.save_inputs, "run_ms": stats(&times), "number": number, "memory": memory_json(ex),
        "expect": expect.as_ref().map(|r| json!({"file": a.expect, "rtol": a.rtol, "atol": a.atol, "ok": all_ok,
                                                  "outputs": r}))});
    if json_out {
        print_json(&report);
        return Ok(all_ok);
    }
    println!("model    {}", report["model"].as_str().unwrap_or_default());
    println!("threads  {}", report["threads"]);
    println!("load     {load_ms:.2} ms (library, graph, weights)");
    for i in &inputs {
        let (what, how) = if i["weight"] == true { ("weight  ", "made up: ") } else { ("input   ", "") };
        println!(
            "{what} {}: {} {} ({how}{})",
            i["name"].as_str().unwrap_or(""),
            i["dtype"].as_str().unwrap_or(""),
            i["shape"],
            i["source"].as_str().unwrap_or("")
        );
    }
    for out in &outs {
        let check = match out["matches_reference"].as_bool() {
            Some(true) => " matches the reference",
            Some(false) => " DIFFERS from the reference",
            None => "",
        };
        let preview: Vec<String> = out["preview"].as_array().unwrap().iter().map(tensors::show).collect();
        let more = !a.print_full && out["preview"].as_array().unwrap().len() == 6;
        println!(
            "output   {}: {} {} [{}{}]{check}",
            out["name"].as_str().unwrap(),
            out["dtype"].as_str().unwrap(),
            out["shape"],
            preview.join(", "),
            if more { ", ..." } else { "" }
        );
        if let Some(top) = out["top"].as_array() {
            let items: Vec<String> = top.iter().map(|p| format!("[{}] {}", p[0], tensors::show(&p[1]))).collect();
            println!("top {:<4} {}: {}", top.len(), out["name"].as_str().unwrap(), items.join(", "));
        }
    }
    for c in expect.iter().flatten() {
        let name = c["name"].as_str().unwrap_or("");
        if let Some(why) = c["why"].as_str() {
            println!("expect   {name}: DIFFERS ({why})");
            continue;
        }
        println!(
            "expect   {name}: {} (largest |diff| {:.3e} at [{}], largest relative {:.3e}; {} of {} outside)",
            if c["ok"] == true { "within tolerance" } else { "DIFFERS" },
            c["max_abs_diff"].as_f64().unwrap_or(0.0),
            c["at"],
            c["max_rel_diff"].as_f64().unwrap_or(0.0),
            c["outside"],
            c["values"]
        );
    }
    if expect.is_some() {
        let differ = expect.iter().flatten().filter(|c| c["ok"] != true).count();
        println!(
            "expect   {} (rtol {}, atol {}, {})",
            if differ == 0 {
                "every output within tolerance".to_string()
            } else {
                format!("{differ} output(s) DIFFER")
            },
            a.rtol,
            a.atol,
            a.expect_label()
        );
    }
    if let Some(p) = &a.data.save_inputs {
        println!("saved    inputs to {}", p.display());
    }
    if let Some(p) = &a.outputs {
        println!("saved    outputs to {}", p.display());
    }
    let s = &report["run_ms"];
    let t = |k: &str| duration(s[k].as_f64().unwrap_or(0.0));
    println!(
        "run      mean {}, median {}, min {}, max {}, std {} ({repeat} repeats of {number} runs)",
        t("mean"),
        t("median"),
        t("min"),
        t("max"),
        t("std"),
    );
    println!("{}", memory_line("memory  ", &report["memory"]));
    println!("{}", folded_line("folded  ", &report["memory"]));
    Ok(all_ok)
}

fn arg_desc(ex: &GraphExecutor, node: usize) -> (Vec<String>, String) {
    let plan = ex.plan();
    let g = &plan.graph;
    let op = plan.ops.iter().find(|op| op.node == node).expect("an operator node");
    let shapes = op.args.iter().map(|&eid| format!("{}{:?}", g.entries[eid].dtype, g.entries[eid].shape)).collect();
    let func = match &g.nodes[node].kind {
        NodeKind::Op(a) => a.func_name.clone(),
        NodeKind::Input => String::new(),
    };
    (shapes, func)
}

pub fn profile(a: &ProfileArgs, json_out: bool) -> Result<()> {
    if let Some(m) = crate::vm::detect(&a.model)? {
        return crate::vm::profile(&m, a, json_out);
    }
    for path in [&a.trace, &a.csv].into_iter().flatten() {
        check_writable(path)?;
    }
    let model = Model::load(a.model.model.as_deref(), &a.model)?;
    let m = model.executor(false)?;
    let ex = exec(&m);
    set_inputs(&a.data, &a.model, &model, ex)?;
    // Upstream's profile: three warm-up runs, then profiled runs; with --repeat N, the report of
    // the run whose total is the median of N (one real run, not a mix of runs).
    for _ in 0..3 {
        ex.run()?;
    }
    let mut runs = Vec::with_capacity(a.repeat as usize);
    for r in 0..a.repeat as usize {
        runs.push(ex.profiled_run()?);
        progress("profiling run", r + 1, a.repeat as usize);
    }
    let total = |report: &Report| match report
        .device_metrics
        .first()
        .and_then(|(_, m)| profiling::metric(m, "Duration (us)"))
    {
        Some(Metric::Duration(d)) => *d,
        _ => 0.0,
    };
    runs.sort_by(|x, y| total(&x.0).total_cmp(&total(&y.0)));
    let (full, timeline) = runs.swap_remove(runs.len() / 2);
    // The table to show: the N longest functions, argument shapes shortened (the JSON, the CSV
    // and the trace keep everything).
    let report = shown_report(&full, a.top.map(|n| n as usize), a.wide);
    if let Some(path) = &a.trace {
        let events: Vec<Value> = timeline
            .iter()
            .zip(&full.calls)
            .map(|((node, start), call)| {
                let text = |k: &str| match profiling::metric(call, k) {
                    Some(Metric::Str(s)) => s.clone(),
                    _ => String::new(),
                };
                let dur = match profiling::metric(call, "Duration (us)") {
                    Some(Metric::Duration(d)) => *d,
                    _ => 0.0,
                };
                json!({"name": text("Name"), "cat": "operator", "ph": "X", "pid": 1, "tid": 1,
                       "ts": *start as f64 / 1e3, "dur": dur,
                       "args": {"node": node, "arguments": text("Argument Shapes"), "device": text("Device")}})
            })
            .collect();
        let trace = json!({"traceEvents": events, "displayTimeUnit": "ms",
                           "otherData": {"model": model_label(&model), "runtime": "tvm-runtime-rs"}});
        tvm_runtime::files::write_whole(path, serde_json::to_string(&trace).expect("serialisable").as_bytes())?;
    }
    if let Some(path) = &a.csv {
        tvm_runtime::files::write_whole(path, profiling::format::csv(&full).as_bytes())?;
    }
    if json_out {
        // Upstream's report JSON: `Report.from_json` in TVM's Python reads it.
        println!("{}", profiling::json::to_json(&full));
        return Ok(());
    }
    print!("{}", profiling::format::table(&report, !a.in_order, !a.in_order, true)?);
    let notes: Vec<String> = [
        a.trace.as_ref().map(|p| format!("trace written to {} (chrome://tracing, Perfetto)", p.display())),
        a.csv.as_ref().map(|p| format!("CSV written to {}", p.display())),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !notes.is_empty() {
        println!();
        notes.iter().for_each(|n| println!("{n}"));
    }
    Ok(())
}

/// Argument shapes longer than this are shortened in the table (unless --wide).
const SHAPES_SHOWN: usize = 48;

/// The report as the table shows it: the calls of the `top` functions that took longest in all
/// (every call when `None`), argument shapes cut to [`SHAPES_SHOWN`] characters unless `wide`.
fn shown_report(full: &Report, top: Option<usize>, wide: bool) -> Report {
    let mut report = full.clone();
    if let Some(n) = top {
        let mut totals: Vec<(String, f64)> = Vec::new();
        for call in &report.calls {
            let name = match profiling::metric(call, "Name") {
                Some(Metric::Str(s)) => s.clone(),
                _ => continue,
            };
            let d = match profiling::metric(call, "Duration (us)") {
                Some(Metric::Duration(d)) => *d,
                _ => 0.0,
            };
            match totals.iter_mut().find(|(k, _)| *k == name) {
                Some((_, t)) => *t += d,
                None => totals.push((name, d)),
            }
        }
        totals.sort_by(|a, b| b.1.total_cmp(&a.1));
        totals.truncate(n);
        report.calls.retain(|call| {
            matches!(profiling::metric(call, "Name"), Some(Metric::Str(s)) if totals.iter().any(|(k, _)| k == s))
        });
    }
    if !wide {
        for call in &mut report.calls {
            for (key, value) in call.iter_mut() {
                if let (true, Metric::Str(s)) = (key == "Argument Shapes", &mut *value) {
                    if s.chars().count() > SHAPES_SHOWN {
                        *s = format!("{}...", s.chars().take(SHAPES_SHOWN - 3).collect::<String>());
                    }
                }
            }
        }
    }
    report
}

pub fn inspect(a: &ModelArgs, json_out: bool) -> Result<()> {
    if let Some(m) = crate::vm::detect(a)? {
        return crate::vm::inspect(&m, json_out);
    }
    let model = Model::load(a.model.as_deref(), a)?;
    let m = model.executor(false)?;
    let ex = exec(&m);
    let plan = ex.plan();
    let g = &plan.graph;
    // Memory as `run` reports it: with the inputs set (to zeros), so their buffers count.
    for i in model.data_inputs(ex) {
        ex.set_input_bytes(i, &vec![0u8; plan.entry_bytes[plan.input_entries[i]]])?;
    }
    let inputs: Vec<Value> = (0..plan.num_inputs())
        .map(|i| {
            let e = &g.entries[plan.input_entries[i]];
            json!({"name": plan.input_name(i), "dtype": e.dtype.to_string(), "shape": e.shape.to_vec(),
                   "weight": ex.is_param(plan.input_name(i)), "storage_id": e.storage_id})
        })
        .collect();
    let outputs: Vec<Value> = (0..plan.num_outputs())
        .map(|k| {
            let e = &g.entries[plan.output_entries[k]];
            json!({"index": k, "node": plan.output_name(k), "dtype": e.dtype.to_string(), "shape": e.shape.to_vec()})
        })
        .collect();
    let folded = ex.folded_ops();
    let ops: Vec<Value> = plan
        .ops
        .iter()
        .zip(&folded)
        .map(|(op, &folded)| {
            let (shapes, func) = arg_desc(ex, op.node);
            json!({"node": op.node, "name": g.nodes[op.node].name, "function": func, "arguments": shapes,
                   "folded": folded})
        })
        .collect();
    // What each slot of the graph's storage plan holds here, in the memory report's words.
    let slots: Vec<Value> = plan
        .storage
        .slots
        .iter()
        .zip(ex.slot_uses())
        .enumerate()
        .map(|(sid, (s, used))| {
            let entries: Vec<usize> = (0..g.num_entries()).filter(|&e| g.entries[e].storage_id == sid).collect();
            let holds = match used {
                SlotUse::Input => "input",
                SlotUse::Weight => "weight",
                SlotUse::Derived => "derived",
                SlotUse::Activation => "activation",
                SlotUse::Both => "activation+derived",
            };
            // A texture slot is an image: its scope and extent (width x height pixels).
            let image = s.texture.map(|t| {
                json!({"scope": t.texture.scope(), "width": t.extent.width, "height": t.extent.height,
                       "channels": t.extent.channels})
            });
            json!({"storage_id": sid, "bytes": s.bytes, "holds": holds, "entries": entries, "image": image})
        })
        .collect();
    let mem = memory_json(ex);
    let report = json!({"model": model_label(&model), "inputs": inputs, "outputs": outputs,
                        "operators": ops, "storage": slots, "memory": mem});
    if json_out {
        print_json(&report);
        return Ok(());
    }
    println!("model      {}", model_label(&model));
    for i in &inputs {
        println!(
            "input      {} {} {}{}",
            i["name"].as_str().unwrap(),
            i["dtype"].as_str().unwrap(),
            i["shape"],
            if i["weight"].as_bool() == Some(true) { " (weight)" } else { "" }
        );
    }
    for out in &outputs {
        println!(
            "output     {}: {} {} {}",
            out["index"],
            out["node"].as_str().unwrap(),
            out["dtype"].as_str().unwrap(),
            out["shape"]
        );
    }
    for op in &ops {
        println!(
            "operator   node {:>3} {} ({}){}",
            op["node"],
            op["function"].as_str().unwrap(),
            op["arguments"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join(", "),
            if op["folded"] == true { " folded: runs once, at load" } else { "" }
        );
    }
    for s in &slots {
        let image = match &s["image"] {
            Value::Null => String::new(),
            i => format!(" in {} ({} x {} pixels)", i["scope"].as_str().unwrap_or(""), i["width"], i["height"]),
        };
        println!(
            "storage    {:>3}: {:>10} B {:<18} entries {}{image}",
            s["storage_id"].as_u64().unwrap_or(0),
            s["bytes"].as_u64().unwrap_or(0),
            s["holds"].as_str().unwrap_or(""),
            s["entries"]
        );
    }
    println!("{}", memory_line("memory    ", &mem));
    println!("{}", folded_line("folded    ", &mem));
    Ok(())
}

pub fn share(a: &ShareArgs, json_out: bool) -> Result<()> {
    let margs = ModelArgs { map_params: a.map_params, device: a.device, ..Default::default() };
    let models = a.models.iter().map(|s| Model::load(Some(s), &margs)).collect::<Result<Vec<_>>>()?;
    let executors = a.executors as usize;
    let device = models[0].device;
    let pool = a.pool.map(|c| tvm_runtime::executor::pool::ArenaPool::new(device, c as usize)).transpose()?;
    let mut execs = Vec::new();
    for k in 0..executors {
        let model = &models[k % models.len()];
        let m = model.executor(false)?;
        if let Some(first) = execs.first() {
            let (_, src): &(usize, tvm_runtime::object::ObjRef<tvm_runtime::module::Module>) = first;
            let blob = match &model.params {
                Some(p) => p.clone(),
                None => {
                    let f = model.lib.node::<tvm_runtime::executor::factory::Factory>();
                    let items = f
                        .map_or(&[][..], |f| f.params())
                        .iter()
                        .map(|p| Ok((p.name.as_str(), p.to_ndarray()?)))
                        .collect::<Result<Vec<_>>>()?;
                    tvm_runtime::params::save(items.iter().map(|(n, a)| (*n, &**a)))
                }
            };
            if k >= models.len() || !std::ptr::eq(model, &models[0]) {
                exec(&m)
                    .share_params(exec(src), &blob)
                    .map_err(|e| e.context(format!("executor {k} ({})", model.name)))?;
            }
        }
        if let Some(pool) = &pool {
            exec(&m).join_pool(pool).map_err(|e| e.context(format!("executor {k} ({})", model.name)))?;
        }
        let data = InputArgs { fill: Some(FillKind::Random), ..Default::default() };
        set_inputs(&data, &margs, model, exec(&m))?;
        exec(&m).run()?;
        execs.push((k % models.len(), m));
        progress("executors", k + 1, executors);
    }
    let rows: Vec<Value> = execs
        .iter()
        .enumerate()
        .map(|(k, (mi, m))| json!({"executor": k, "model": models[*mi].name, "memory": memory_json(exec(m))}))
        .collect();
    let get = |r: &Value, key: &str| r["memory"][key].as_u64().unwrap_or(0);
    // Shared weights, and weights derived from them (equal bytes are held once), count once.
    let once = |key: &str| rows.iter().map(|r| get(r, key)).max().unwrap_or(0);
    // A pool's arenas count once too: as many as runs were in flight (one here), at most its
    // capacity, each of the largest member's arena.
    let usage = pool.as_ref().map(|p| p.usage());
    let shared_total: u64 = rows.iter().map(|r| get(r, "weights_owned") + get(r, "activations")).sum::<u64>()
        + once("weights_shared")
        + once("weights_derived")
        + usage.map_or(0, |u| u.bytes() as u64);
    let own_arenas: u64 = rows.iter().map(|r| get(r, "activation_arena")).sum();
    let unshared_total: u64 = rows
        .iter()
        .map(|r| get(r, "weights_owned") + get(r, "weights_shared") + get(r, "weights_derived") + get(r, "activations"))
        .sum::<u64>()
        + if usage.is_some() { own_arenas } else { 0 };
    let report = json!({"executors": rows, "total_bytes": shared_total, "unshared_total_bytes": unshared_total,
                        "pool": usage.map(|u| u.to_json())});
    if json_out {
        print_json(&report);
        return Ok(());
    }
    for r in &rows {
        println!(
            "executor {:>2} {:<24} weights owned {:>8} B  shared {:>8} B  derived {:>8} B  activations {:>8} B",
            r["executor"],
            r["model"].as_str().unwrap(),
            get(r, "weights_owned"),
            get(r, "weights_shared"),
            get(r, "weights_derived"),
            get(r, "activations")
        );
    }
    if let Some(u) = usage {
        println!(
            "pool     {} of at most {} arenas of {} B for {} executors: {} B now, at most {} B with {} runs in flight (an arena each: {own_arenas} B)",
            u.arenas,
            u.capacity,
            u.arena_bytes,
            u.members,
            u.bytes(),
            u.capacity * u.arena_bytes,
            u.capacity
        );
    }
    let what = if usage.is_some() { "weights and arena" } else { "weights" };
    println!("total    {shared_total} B with sharing; {unshared_total} B if every executor kept its own {what}");
    Ok(())
}

pub fn prepare_params(args: &crate::PrepareArgs, json_out: bool) -> Result<()> {
    let out = &args.out;
    check_writable(out)?;
    let model = Model::load(args.model.as_deref(), &args.model_args())?;
    // The weights: the params file, else those the library carries.
    let from_library;
    let params = match (&model.params, model.lib.node::<tvm_runtime::executor::factory::Factory>()) {
        (Some(p), _) => p,
        (None, Some(f)) if !f.params().is_empty() => {
            let arrays =
                f.params().iter().map(|p| Ok((p.name.as_str(), p.to_ndarray()?))).collect::<Result<Vec<_>>>()?;
            from_library = tvm_runtime::params::save(arrays.iter().map(|(n, a)| (*n, &**a)));
            &from_library
        }
        _ => return Err(Error::value("this model has no weights to prepare: give --params")),
    };
    let plan = tvm_runtime::executor::plan::Plan::new(&model.graph_json, model.lib.clone(), model.device)?;
    let ex = GraphExecutor::new(plan)?;
    let bytes = ex.prepared_params(params)?;
    tvm_runtime::files::write_whole(out, &bytes)?;
    let m = ex.memory_usage();
    let report = json!({"output": out, "output_bytes": bytes.len(), "ops_folded": m.ops_folded,
                        "weights_derived": m.weights_derived});
    if json_out {
        print_json(&report);
    } else {
        println!(
            "wrote {}: the weights and {} B derived by {} weight-only operators, stamped for this graph, library and \
             weights ({} bytes; load it with --params {} --map-params)",
            out.display(),
            m.weights_derived,
            m.ops_folded,
            bytes.len(),
            out.display()
        );
    }
    Ok(())
}

/// Writes `bytes` to `path` whole or not at all: to a temporary name beside it, renamed over it
/// once complete (a failure leaves no partial file, and a reader never sees one).
pub fn align_params(input: &Path, output: &Path, json_out: bool) -> Result<()> {
    let bytes = std::fs::read(input).map_err(|e| Error::io(input.display().to_string(), e))?;
    // Derived records that cannot be verified against the weights beside them are dropped.
    let (aligned, dropped) = tvm_runtime::prepared_params::align(&bytes)?;
    tvm_runtime::files::write_whole(output, &aligned)?;
    if let Some(why) = &dropped {
        eprintln!("note: {}: its prepared derived weights are dropped: {why}", input.display());
    }
    let tensors = tvm_runtime::params::parse(&aligned)?
        .iter()
        .filter(|(n, _)| !n.starts_with(tvm_runtime::params::PAD_PREFIX))
        .count();
    let report = json!({"input": input, "output": output, "tensors": tensors, "input_bytes": bytes.len(),
                        "output_bytes": aligned.len(), "derived_dropped": dropped});
    if json_out {
        print_json(&report);
    } else {
        println!(
            "wrote {}: {tensors} tensors, each 64-byte aligned ({} -> {} bytes)",
            output.display(),
            bytes.len(),
            aligned.len()
        );
    }
    Ok(())
}
