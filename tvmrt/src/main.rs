//! `tvmrt`: run, profile, inspect and share TVM-compiled graph-executor models with this runtime.
//! `tvmrt --help` and `tvmrt COMMAND --help` describe every option.

mod aot;
mod artefacts;
mod bench;
mod bundled;
mod commands;
mod model;
mod request_model;
mod rpc_server;
mod tensors;
mod vm;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tvmrt",
    version,
    about = "Run, profile, inspect and share TVM models: graph-executor builds (lib.so, graph.json, params) and Relay VM executables",
    after_help = "MODEL is a folder with a library (lib.so, deploy_lib.so, mod.so or its one .so; plus graph.json and a params file \
                  for builds with unbound params: params.bin, params, deploy_param.params or its one file of TVM's params format) \
                  or a lib.so; --lib, --graph and --params name the artefacts one by one. Without MODEL and \
                  --lib, run, profile and inspect use the bundled MLP."
)]
struct Cli {
    /// Print one JSON document on stdout, errors included
    #[arg(long, global = true)]
    json: bool,
    /// Threads the kernels run on (default: TVM_NUM_THREADS, else the physical cores)
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// A runtime plug-in to load first (a vendor's library registering module types, loaders and
    /// functions; repeatable). TVMRT_PLUGINS (paths separated by ':') names more
    #[arg(long = "plugin", global = true, value_name = "PATH")]
    plugins: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model: set inputs, run, show outputs, time repeated runs
    Run(RunArgs),
    /// Profile the model as TVM's debug executor does: upstream's report table (--json: its JSON,
    /// which TVM's `Report.from_json` reads; --csv: its CSV), optionally a Chrome / Perfetto trace
    Profile(ProfileArgs),
    /// Show inputs (weights marked), outputs, operators, the storage plan and memory
    Inspect(ModelArgs),
    /// What a request costs on this model, call by call: the run, setting inputs, copying outputs
    /// out, the request they make, and the same in one call
    Bench(BenchArgs),
    /// Make K executors sharing one copy of the weights and report their memory
    Share(ShareArgs),
    /// Rewrite a params file so every tensor can be mapped and used in place (--map-params)
    AlignParams {
        /// The params file to read
        #[arg(value_name = "IN")]
        input: PathBuf,
        /// Where to write the aligned file
        #[arg(value_name = "OUT")]
        output: PathBuf,
    },
    /// Write the model's weights with what its weight-only operators derive from them, stamped
    /// with the graph, the library and the weights: `run MODEL --params OUT --map-params` (and
    /// `load_params_from_file` in a host) then compute nothing at load
    #[command(
        after_help = "The weights come from --params, else the model folder's params file, else the weights the library \
                            carries. A prepared file serves the build it was made for: another build of the model \
                            (another batch size or sequence length) loads it as the plain params it also is and \
                            derives its own weights (its report says so), and a file whose weights were edited since \
                            is loaded the same way. Prepare one file per build that should load with nothing \
                            computed. Upstream's runtime loads a prepared file as plain params."
    )]
    PrepareParams(PrepareArgs),
    /// Serve TVM's RPC on this runtime, as upstream's `tvm_rpc server`: hosts with TVM upload,
    /// run, time and profile models here (`tvm.rpc.connect`, a tracker, `tvmc --rpc-key`)
    #[command(after_help = "Whoever can connect can run code on this machine (a client uploads and loads \
                            libraries): listen on 127.0.0.1 or a trusted network. One session at a time, each in \
                            a process of its own with a work directory of its own (removed after); paths the \
                            client names cannot leave it.")]
    RpcServer(RpcServerArgs),
}

/// What `rpc-server` listens on and registers with.
#[derive(Args)]
pub struct RpcServerArgs {
    /// The address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The first port to try
    #[arg(long, default_value_t = 9090)]
    pub port: u16,
    /// The end of the port range (exclusive)
    #[arg(long, default_value_t = 9199)]
    pub port_end: u16,
    /// The key clients (and the tracker) ask for
    #[arg(long, default_value = "")]
    pub key: String,
    /// Register with the RPC tracker at HOST:PORT
    #[arg(long, value_name = "HOST:PORT")]
    pub tracker: Option<String>,
    /// The address the tracker hands clients (default: the one it sees)
    #[arg(long, value_name = "ADDR")]
    pub custom_addr: Option<String>,
    /// Where sessions keep their files (default: a folder in the temporary directory)
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<std::path::PathBuf>,
    /// Print nothing per session
    #[arg(long)]
    pub silent: bool,
}

/// What `bench` measures.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: InputArgs,
    /// Timed loops per figure (the median is reported)
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// About how long each figure's loops take, in seconds
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
}

/// What `prepare-params` reads and writes.
#[derive(Args)]
pub struct PrepareArgs {
    /// Model folder or lib.so
    #[arg(value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// The operator library (default: MODEL/lib.so, deploy_lib.so, mod.so, or its one .so)
    #[arg(long, value_name = "FILE")]
    pub lib: Option<PathBuf>,
    /// The graph JSON (default: the library's own, else MODEL/graph.json)
    #[arg(long, value_name = "FILE")]
    pub graph: Option<PathBuf>,
    /// The params file (default: the weights the library carries, else the folder's params file)
    #[arg(long, value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// The device the derived weights are computed on: auto (the one the model was built for),
    /// cpu, or opencl[:ID]
    #[arg(long, value_name = "DEVICE", default_value = "auto", value_parser = parse_device)]
    pub device: DeviceArg,
    /// Where to write the prepared params file (written whole or not at all)
    #[arg(long, value_name = "OUT")]
    pub out: PathBuf,
}

impl PrepareArgs {
    pub fn model_args(&self) -> ModelArgs {
        ModelArgs {
            model: self.model.clone(),
            lib: self.lib.clone(),
            graph: self.graph.clone(),
            params: self.params.clone(),
            device: self.device,
            ..ModelArgs::default()
        }
    }
}

/// Where a model comes from.
#[derive(Args, Clone, Default)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("source").args(["model", "lib"]).multiple(true)))]
pub struct ModelArgs {
    /// Model folder or lib.so
    #[arg(value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// The operator library (default: MODEL/lib.so, deploy_lib.so, mod.so, or its one .so)
    #[arg(long, value_name = "FILE")]
    pub lib: Option<PathBuf>,
    /// The graph JSON (default: the library's own, else MODEL/graph.json)
    #[arg(long, value_name = "FILE", requires = "source")]
    pub graph: Option<PathBuf>,
    /// The params file (default: the folder's params file when the library carries no weights)
    #[arg(long, value_name = "FILE", requires = "source")]
    pub params: Option<PathBuf>,
    /// Map the params file and use its weights in place; every tensor must be 64-byte aligned in
    /// the file (see align-params). A file written while mapped is refused before the next run
    /// (replace one by renaming a new file over it)
    #[arg(long)]
    pub map_params: bool,
    /// Make up the weights the model has no values for (each fill is printed), instead of failing
    #[arg(long, value_enum, value_name = "HOW")]
    pub fill_weights: Option<WeightFill>,
    /// Run every operator at every run, as upstream does, even where the weights are shared
    /// (also TVM_RT_FOLD_WEIGHTS=0)
    #[arg(long, conflicts_with = "fold")]
    pub no_fold: bool,
    /// Run the operators that read only weights once at load even for a lone executor (faster
    /// runs; holds the derived weights beside the weights; also TVM_RT_FOLD_WEIGHTS=1). By
    /// default they fold once a second executor shares the weights
    #[arg(long)]
    pub fold: bool,
    /// The device to run on: auto (the one the model was built for: OpenCL for models built
    /// for it), cpu, or opencl[:ID]
    #[arg(long, value_name = "DEVICE", default_value = "auto", value_parser = parse_device)]
    pub device: DeviceArg,
}

/// A device as the command line names it: a device, or the one the model was built for.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceArg(pub Option<tvm_runtime::dlpack::DLDevice>);

fn parse_device(s: &str) -> Result<DeviceArg, String> {
    if s == "auto" {
        return Ok(DeviceArg(None));
    }
    let (kind, id) = s.split_once(':').unwrap_or((s, "0"));
    let device_type = match kind {
        "cpu" => 1,
        "opencl" | "cl" => 4,
        _ => return Err(format!("unknown device '{kind}' (auto, cpu or opencl[:ID])")),
    };
    let device_id = id.parse().map_err(|_| format!("device id '{id}' is not a number"))?;
    Ok(DeviceArg(Some(tvm_runtime::dlpack::DLDevice { device_type, device_id })))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFill {
    Random,
    Zeros,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillKind {
    Random,
    Zeros,
    Ones,
}

/// Where input data comes from.
#[derive(Args, Clone, Default)]
pub struct InputArgs {
    /// Inputs from an .npz archive (array names are input names)
    #[arg(long, value_name = "FILE.npz")]
    pub inputs: Option<PathBuf>,
    /// One input from a file: an .npy, or raw little-endian bytes in C order read as the input's
    /// dtype and shape, or as a layout written after the name (FILE@float32[1,3,224,224])
    #[arg(long, value_name = "NAME=FILE", value_parser = parse_named_file)]
    pub input: Vec<(String, PathBuf)>,
    /// Fill the data inputs not given by file (default: the recorded inputs of a fixture, else random)
    #[arg(long, value_enum, value_name = "HOW")]
    pub fill: Option<FillKind>,
    /// Seed of the random fills
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the inputs used to an .npz archive (to edit them, or to pass them back with --inputs)
    #[arg(long, value_name = "FILE.npz")]
    pub save_inputs: Option<PathBuf>,
    /// Convert input files of another numeric dtype to the input's (float64 to float32, int64 to
    /// int32, ...), instead of refusing them
    #[arg(long)]
    pub cast: bool,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: InputArgs,
    /// Write the outputs to an .npz archive
    #[arg(long, value_name = "FILE.npz")]
    pub outputs: Option<PathBuf>,
    /// Timed repeats (each the mean of --number runs)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Runs per timed repeat
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub number: u32,
    /// Compare the outputs with the arrays of an .npz (output_0, output_1, ... or in order), or the
    /// first output with an .npy or a raw file (read as that output's dtype and shape, or as
    /// FILE@DTYPE[SHAPE]): a summary of the largest differences; exit status 3 when any is outside
    /// the tolerance
    #[arg(long, value_name = "REF")]
    pub expect: Option<PathBuf>,
    /// Relative tolerance of --expect (|got - want| <= atol + rtol * |want|, as numpy's allclose)
    #[arg(long, default_value_t = 1e-5, requires = "expect")]
    pub rtol: f64,
    /// Absolute tolerance of --expect
    #[arg(long, default_value_t = 1e-8, requires = "expect")]
    pub atol: f64,
    /// Print each output's N largest values with their indices (the classes of a classifier)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub print_top: Option<u32>,
    /// Print every value of every output (the default shows the first six)
    #[arg(long)]
    pub print_full: bool,
}

impl RunArgs {
    fn expect_label(&self) -> String {
        self.expect.as_ref().map_or_else(String::new, |p| p.display().to_string())
    }
}

#[derive(Args)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub data: InputArgs,
    /// Profiled runs (after three warm-up runs); the report is of the run whose total is their
    /// median
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// One row per operator call in execution order, as upstream's table(sort=False,
    /// aggregate=False), instead of calls of one function aggregated, longest first
    #[arg(long)]
    pub in_order: bool,
    /// Write the report as upstream's CSV (`report.csv()`)
    #[arg(long, value_name = "FILE.csv")]
    pub csv: Option<PathBuf>,
    /// Write a Chrome / Perfetto trace of the reported run
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Only the N functions that took longest (the totals stay the whole run's)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub top: Option<u32>,
    /// Argument shapes in full (by default long ones are shortened to fit a terminal)
    #[arg(long)]
    pub wide: bool,
}

#[derive(Args)]
pub struct ShareArgs {
    /// Models whose executors share weights (round robin, e.g. the batch-1 and batch-8 builds)
    #[arg(value_name = "MODEL", required = true)]
    pub models: Vec<PathBuf>,
    /// Executors to make
    #[arg(short = 'n', long = "executors", value_name = "K", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub executors: u32,
    /// Map each params file and use its weights in place (see run --help)
    #[arg(long)]
    pub map_params: bool,
    /// The device the executors run on: auto (the one the models were built for), cpu, or
    /// opencl[:ID]
    #[arg(long, value_name = "DEVICE", default_value = "auto", value_parser = parse_device)]
    pub device: DeviceArg,
    /// Draw the executors' activations from one pool of at most C arenas (as many as runs in
    /// flight), instead of an arena each
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(1..))]
    pub pool: Option<u32>,
}

fn parse_named_file(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => Ok((name.to_string(), file.into())),
        _ => Err(format!("expected NAME=FILE (an .npy, or raw bytes: FILE@DTYPE[SHAPE]), got '{s}'")),
    }
}

/// Exit codes: 0 success; 1 a failure while running (a kernel, a device, the runtime); 2 the
/// user's mistake (the command line, or a model, file, name, shape, dtype or device that does not
/// fit); 3 `run --expect` found outputs outside the tolerance.
const EXIT_FAILURE: u8 = 1;
const EXIT_MISTAKE: u8 = 2;
const EXIT_DIFFERS: u8 = 3;

/// Whether an error is about what the user asked (a file that is not there, a name, a shape, a
/// dtype, a device that does not fit) rather than a failure while running.
fn is_users_mistake(e: &tvm_runtime::Error) -> bool {
    use tvm_runtime::error::ErrorKind::*;
    e.is_io() || matches!(e.kind(), ValueError | TypeError | KeyError | IndexError | AttributeError)
}

/// An error as `--json` prints it: on stdout, with its kind.
fn json_error(kind: &str, message: &str) -> String {
    serde_json::to_string_pretty(&json!({"error": {"kind": kind, "message": message}})).expect("serialisable")
}

fn main() -> ExitCode {
    // Like other command-line tools: stop quietly when the reader of our output goes away.
    // SAFETY: restoring the default disposition of SIGPIPE at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let json_wanted = std::env::args().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: on stdout, success.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if json_wanted => {
            let text = e.render().to_string();
            println!("{}", json_error("UsageError", text.trim_end()));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    if let Some(n) = cli.threads {
        // Before the runtime's thread pool first reads it (at init, one thread).
        std::env::set_var("TVM_NUM_THREADS", n.to_string());
    }
    tvm_runtime::init();
    let json = cli.json;
    let plugins = cli.plugins.iter().try_for_each(|p| tvm_runtime::library::load_plugin(p));
    let result = plugins.and_then(|()| match cli.command {
        Command::Run(a) => commands::run(&a, json),
        Command::Profile(a) => commands::profile(&a, json).map(|()| true),
        Command::Inspect(a) => commands::inspect(&a, json).map(|()| true),
        Command::Bench(a) => bench::bench(&a, json).map(|()| true),
        Command::Share(a) => commands::share(&a, json).map(|()| true),
        Command::AlignParams { input, output } => commands::align_params(&input, &output, json).map(|()| true),
        Command::PrepareParams(a) => commands::prepare_params(&a, json).map(|()| true),
        Command::RpcServer(a) => rpc_server::run(&a).map(|()| true),
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        // `run --expect`: outputs outside the tolerance (the summary said which).
        Ok(false) => ExitCode::from(EXIT_DIFFERS),
        Err(e) => {
            let mistake = is_users_mistake(&e);
            if json {
                // The runtime's own kind of failure (the C API reports upstream's class instead).
                println!("{}", json_error(&e.kind().to_string(), &e.to_string()));
            } else if mistake {
                eprintln!("error: {e}");
            } else {
                eprintln!("error: {e} (a failure while running, not the command line's: {})", e.kind());
            }
            ExitCode::from(if mistake { EXIT_MISTAKE } else { EXIT_FAILURE })
        }
    }
}
