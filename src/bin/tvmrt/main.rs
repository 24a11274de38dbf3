//! `tvmrt`: run, profile, inspect and share TVM-compiled graph-executor models with this runtime.
//!
//! ```text
//! tvmrt run     [MODEL] [--inputs F.npz] [--input NAME=F.npy]... [--fill random|zeros|ones] [--seed N]
//!               [--outputs F.npz] [--repeat N] [--number N] [--json]
//! tvmrt profile [MODEL] [--repeat N] [--trace F.json] [--json]
//! tvmrt inspect [MODEL] [--json]
//! tvmrt share   MODEL [MODEL...] [-n K] [--json]
//! tvmrt align-params IN OUT
//! ```
//! MODEL is a folder holding `lib.so` (plus `graph.json` / `params.bin` for unbound builds) or a
//! `lib.so`; `--lib`, `--graph`, `--params` name the artefacts one by one. Without MODEL, the bundled
//! MLP runs.

mod commands;
mod model;
mod tensors;

use std::process::ExitCode;
use tvm_runtime::{Error, Result};

const USAGE: &str = "usage:
  tvmrt run     [MODEL] [--inputs F.npz] [--input NAME=F.npy]... [--fill random|zeros|ones] [--seed N]
                [--outputs F.npz] [--repeat N] [--number N] [--json]
  tvmrt profile [MODEL] [--repeat N] [--trace F.json] [--json]
  tvmrt inspect [MODEL] [--json]
  tvmrt share   MODEL [MODEL...] [-n K] [--json]
  tvmrt align-params IN.params OUT.params   (rewrite so every tensor can be mapped in place)
Options for any MODEL: --map-params maps the params file (aligned weights used in place).
MODEL: a folder with lib.so (and graph.json, params.bin for unbound builds) or a lib.so;
       --lib, --graph, --params give the artefacts one by one. Default: the bundled MLP.";

/// Parsed command line, shared by all commands.
#[derive(Default)]
pub struct Options {
    pub command: String,
    pub models: Vec<String>,
    pub paths: model::Paths,
    pub inputs_npz: Option<String>,
    pub inputs: Vec<(String, String)>,
    pub fill: Option<tensors::Fill>,
    pub seed: u64,
    pub outputs: Option<String>,
    pub repeat: usize,
    pub number: usize,
    pub trace: Option<String>,
    pub executors: usize,
    pub json: bool,
    pub map_params: bool,
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T> {
    v.parse().map_err(|_| Error::value(format!("{flag} takes a number, got '{v}'")))
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options { repeat: 0, number: 1, executors: 2, ..Default::default() };
    let mut it = args.iter();
    o.command = match it.next().map(String::as_str) {
        Some(c @ ("run" | "profile" | "inspect" | "share" | "align-params")) => c.to_string(),
        Some("-h" | "--help" | "help") | None => return Err(Error::value(USAGE)),
        Some(other) => return Err(Error::value(format!("unknown command '{other}'\n{USAGE}"))),
    };
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| Error::value(format!("{a} needs a value")));
        match a.as_str() {
            "--json" => o.json = true,
            "--map-params" => o.map_params = true,
            "--lib" => o.paths.lib = Some(value()?.into()),
            "--graph" => o.paths.graph = Some(value()?.into()),
            "--params" => o.paths.params = Some(value()?.into()),
            "--inputs" => o.inputs_npz = Some(value()?),
            "--input" => {
                let v = value()?;
                let (name, file) =
                    v.split_once('=').ok_or_else(|| Error::value(format!("--input takes NAME=FILE.npy, got '{v}'")))?;
                o.inputs.push((name.to_string(), file.to_string()));
            }
            "--fill" => {
                o.fill = Some(match value()?.as_str() {
                    "random" => tensors::Fill::Random(0),
                    "zeros" => tensors::Fill::Zeros,
                    "ones" => tensors::Fill::Ones,
                    other => return Err(Error::value(format!("--fill takes random, zeros or ones, got '{other}'"))),
                })
            }
            "--seed" => o.seed = number("--seed", &value()?)?,
            "--outputs" => o.outputs = Some(value()?),
            "--repeat" => o.repeat = number("--repeat", &value()?)?,
            "--number" => o.number = number::<usize>("--number", &value()?)?.max(1),
            "--trace" => o.trace = Some(value()?),
            "-n" => o.executors = number::<usize>("-n", &value()?)?.max(1),
            s if s.starts_with('-') => return Err(Error::value(format!("unknown option {s}\n{USAGE}"))),
            model => o.models.push(model.to_string()),
        }
    }
    if let Some(tensors::Fill::Random(_)) = o.fill {
        o.fill = Some(tensors::Fill::Random(o.seed));
    }
    Ok(o)
}

fn main() -> ExitCode {
    // Like other command-line tools: stop quietly when the reader of our output goes away.
    // SAFETY: restoring the default disposition of SIGPIPE at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    tvm_runtime::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse(&args).and_then(|o| match o.command.as_str() {
        "run" => commands::run(&o),
        "profile" => commands::profile(&o),
        "inspect" => commands::inspect(&o),
        "align-params" => commands::align_params(&o),
        _ => commands::share(&o),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_c_message();
            if msg.starts_with("ValueError: usage:") {
                eprintln!("{}", msg.trim_start_matches("ValueError: "));
                return ExitCode::from(2);
            }
            eprintln!("tvmrt: {msg}");
            ExitCode::FAILURE
        }
    }
}
