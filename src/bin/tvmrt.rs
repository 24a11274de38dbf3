//! `tvmrt`: run a TVM-compiled graph-executor model with this runtime.
//!
//!   tvmrt run [MODEL] [--repeat N] [--seed S]
//!
//! MODEL is a folder holding `lib.so` (from `export_library`) and optionally `params.bin` (for
//! models built with unbound params) and `manifest.txt` (inputs and reference outputs, as the
//! fixture script writes them); or a `lib.so` path. Without MODEL the bundled MLP fixture runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::factory::Factory;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::{Error, Result};

const BUNDLED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mlp_b1");

struct Options {
    model: PathBuf,
    repeat: usize,
    seed: u64,
}

fn usage() -> &'static str {
    "usage: tvmrt run [MODEL_DIR | lib.so] [--repeat N] [--seed S]"
}

fn parse_args() -> Result<Options> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("run") => {}
        Some("-h" | "--help") | None => return Err(Error::value(usage())),
        Some(other) => return Err(Error::value(format!("unknown command '{other}'\n{}", usage()))),
    }
    let mut o = Options { model: PathBuf::from(BUNDLED), repeat: 10, seed: 0 };
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| Error::value(format!("{name} needs a value")));
        match a.as_str() {
            "--repeat" => o.repeat = value("--repeat")?.parse().map_err(|_| Error::value("--repeat takes a number"))?,
            "--seed" => o.seed = value("--seed")?.parse().map_err(|_| Error::value("--seed takes a number"))?,
            s if s.starts_with("--") => return Err(Error::value(format!("unknown option {s}\n{}", usage()))),
            path => o.model = PathBuf::from(path),
        }
    }
    Ok(o)
}

/// xorshift: reproducible fill without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

struct Manifest {
    inputs: Vec<(String, PathBuf)>,
    outputs: Vec<PathBuf>,
}

fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join("manifest.txt")).ok()?;
    let mut m = Manifest { inputs: vec![], outputs: vec![] };
    for line in text.lines() {
        let tok: Vec<&str> = line.split_whitespace().collect();
        match tok.first().copied() {
            Some("input") => m.inputs.push((tok[1].to_string(), dir.join(tok.last()?))),
            Some("output") => m.outputs.push(dir.join(tok.last()?)),
            _ => {}
        }
    }
    Some(m)
}

fn summarize(bytes: &[u8], dtype: &str) -> String {
    let vals: Vec<f64> = match dtype {
        "float32" => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        "float64" => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
        "int32" => bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        "int64" => bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        "int8" => bytes.iter().map(|&b| b as i8 as f64).collect(),
        "uint8" | "bool" => bytes.iter().map(|&b| b as f64).collect(),
        _ => return format!("{} bytes", bytes.len()),
    };
    let head: Vec<String> = vals.iter().take(6).map(|v| format!("{v:.6}")).collect();
    let ell = if vals.len() > 6 { ", ..." } else { "" };
    format!("[{}{ell}]", head.join(", "))
}

fn run(o: &Options) -> Result<()> {
    let (dir, lib_path) = if o.model.is_dir() {
        (o.model.clone(), o.model.join("lib.so"))
    } else {
        (o.model.parent().unwrap_or(Path::new(".")).to_path_buf(), o.model.clone())
    };
    let t0 = Instant::now();
    let lib = tvm_runtime::library::load_file(&lib_path.to_string_lossy(), "")?;
    let m: ObjRef<Module> = match lib.node::<Factory>() {
        Some(f) => f.create_executor(&lib, DLDevice::CPU)?,
        None => {
            let json = std::fs::read_to_string(dir.join("graph.json"))
                .map_err(|e| Error::Io { path: "graph.json".into(), source: e })?;
            GraphExecutor::create(&json, lib.clone(), DLDevice::CPU)?
        }
    };
    let ex = m.node::<GraphExecutor>().expect("executor");
    let params = dir.join("params.bin");
    let has_weights = lib.node::<Factory>().is_some_and(|f| !f.params().is_empty());
    if !has_weights && params.exists() {
        let bytes = std::fs::read(&params).map_err(|e| Error::Io { path: params.display().to_string(), source: e })?;
        ex.load_params(&bytes)?;
    }
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let plan = ex.plan().clone();
    let manifest = read_manifest(&dir);
    println!("model    {}", lib_path.display());
    println!("threads  {}", tvm_runtime::backend::thread_pool::num_threads());
    println!("load     {load_ms:.2} ms (library, graph, weights)");
    let mut rng = Rng(o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut shown_inputs = 0;
    for i in 0..plan.num_inputs() {
        let name = plan.input_name(i);
        let e = &plan.graph.entries[plan.input_entries[i]];
        let from_manifest = manifest.as_ref().and_then(|m| m.inputs.iter().find(|(n, _)| n == name));
        let bytes = match from_manifest {
            Some((_, path)) => {
                std::fs::read(path).map_err(|e| Error::Io { path: path.display().to_string(), source: e })?
            }
            None if ex.lock().param_names.contains(name) || has_weights => continue,
            None => {
                let n = tvm_runtime::dtype::tensor_bytes(&e.shape, e.dtype)?;
                (0..n).map(|_| (rng.next() % 7) as u8).collect()
            }
        };
        ex.set_input_bytes(i, &bytes)?;
        println!(
            "input    {name}: {} {:?} ({})",
            e.dtype,
            e.shape,
            if from_manifest.is_some() { "from manifest" } else { "random" }
        );
        shown_inputs += 1;
    }
    if shown_inputs == 0 {
        println!("input    (none)");
    }
    ex.run()?;
    let mut times = Vec::with_capacity(o.repeat);
    for _ in 0..o.repeat {
        let t = Instant::now();
        ex.run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for k in 0..plan.num_outputs() {
        let out = ex.output(k)?;
        let bytes = out.to_vec();
        let dtype = out.dtype().to_string();
        let check = match manifest.as_ref().and_then(|m| m.outputs.get(k)) {
            Some(p) => match std::fs::read(p) {
                Ok(want) if want == bytes => " matches the reference",
                Ok(_) => " DIFFERS from the reference",
                Err(_) => "",
            },
            None => "",
        };
        println!("output   {k}: {dtype} {:?} {}{check}", out.shape(), summarize(&bytes, &dtype));
    }
    if !times.is_empty() {
        times.sort_by(|a, b| a.total_cmp(b));
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "run      mean {mean:.4} ms, median {:.4} ms, min {:.4} ms, max {:.4} ms over {} runs",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            times.len()
        );
    }
    let mu = ex.memory_usage();
    println!(
        "memory   weights owned {} B, weights shared {} B, activations {} B, workspace {} B",
        mu.weights_owned,
        mu.weights_shared,
        mu.activations,
        tvm_runtime::backend::workspace::pooled_bytes()
    );
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tvmrt: {}", e.to_c_message());
            ExitCode::FAILURE
        }
    }
}
