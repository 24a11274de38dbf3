//! `tvmrt bench`: what a request costs on the user's own model, call by call, through the
//! executor's packed functions (what a host's `TVMFuncCall` reaches): the model's run, each input
//! set by name and by index, each output copied out, the request those make, and the same request
//! in one call (`tvmrt.run_into`, what the Python package makes). Each figure is the median of
//! timed loops after an untimed warm-up.

use crate::commands::{print_json, set_inputs};
use crate::model::{exec, Model};
use crate::BenchArgs;
use serde_json::{json, Value};
use std::time::Instant;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{ArgsBuilder, PackedFunc};
use tvm_runtime::tensor::NDArray;
use tvm_runtime::{Error, Result};

/// The median of `rounds` loops of `iters` calls of `f`, in microseconds per call, after a warm-up
/// of at least 20 ms.
fn median_us(rounds: usize, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let warm = Instant::now();
    while warm.elapsed().as_millis() < 20 {
        f()?;
    }
    let mut t = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        t.push(start.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn function(m: &ObjRef<Module>, name: &str) -> Result<ObjRef<PackedFunc>> {
    Module::get_function(m, name, false)?.ok_or_else(|| Error::internal(format!("the executor has no {name}")))
}

pub fn bench(a: &BenchArgs, json_out: bool) -> Result<()> {
    let model = Model::load(a.model.model.as_deref(), &a.model)?;
    let m = model.executor(false)?;
    let ex = exec(&m);
    set_inputs(&a.data, &a.model, &model, ex)?;
    let plan = ex.plan();
    // The data inputs as the host holds them (copies of what was set), and a host tensor per output.
    let inputs: Vec<(usize, String, ObjRef<NDArray>)> = model
        .data_inputs(ex)
        .into_iter()
        .map(|i| {
            let host = ex.input(i)?.deep_copy()?;
            Ok((i, plan.input_name(i).to_string(), host))
        })
        .collect::<Result<_>>()?;
    ex.run()?;
    let outputs: Vec<ObjRef<NDArray>> = (0..plan.num_outputs())
        .map(|k| {
            let o = ex.output(k)?;
            NDArray::empty(o.shape(), o.dtype(), tvm_runtime::dlpack::DLDevice::CPU)
        })
        .collect::<Result<_>>()?;
    let (set_input, run, get_output, run_into) = (
        function(&m, "set_input")?,
        function(&m, "run")?,
        function(&m, "get_output")?,
        function(&m, "tvmrt.run_into")?,
    );
    let iters = |us: f64| ((a.seconds * 1e6 / a.repeat as f64 / us.max(0.05)) as usize).clamp(10, 1_000_000);
    let rounds = a.repeat as usize;
    // A first estimate of the run, to size the loops.
    let probe = median_us(3, 10, || ex.run())?;
    let nothing = ArgsBuilder::new();
    let run_us = median_us(rounds, iters(probe), || run.call(&nothing.args()).map(drop))?;
    let small = iters(1.0);
    // Every call's arguments made once, as a host keeps its arrays: the loops time the calls.
    let build = |f: &dyn Fn(&mut ArgsBuilder)| {
        let mut b = ArgsBuilder::new();
        f(&mut b);
        b
    };
    let by_name: Vec<ArgsBuilder> = inputs
        .iter()
        .map(|(_, n, t)| {
            build(&|b| {
                b.str(n).object(t.clone().into_any());
            })
        })
        .collect();
    let by_index: Vec<ArgsBuilder> = inputs
        .iter()
        .map(|(i, _, t)| {
            build(&|b| {
                b.int(*i as i64).object(t.clone().into_any());
            })
        })
        .collect();
    let out_args: Vec<ArgsBuilder> = outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            build(&|b| {
                b.int(k as i64).object(o.clone().into_any());
            })
        })
        .collect();
    let fused = build(&|b| {
        b.int(inputs.len() as i64);
        for (i, _, t) in &inputs {
            b.int(*i as i64).object(t.clone().into_any());
        }
        for o in &outputs {
            b.object(o.clone().into_any());
        }
    });
    let calls = |f: &ObjRef<PackedFunc>, all: &[ArgsBuilder]| -> Result<()> {
        for b in all {
            f.call(&b.args())?;
        }
        Ok(())
    };
    let set_name = median_us(rounds, small, || calls(&set_input, &by_name))?;
    let set_index = median_us(rounds, small, || calls(&set_input, &by_index))?;
    let get = median_us(rounds, small, || calls(&get_output, &out_args))?;
    let no_args = ArgsBuilder::new();
    let request = median_us(rounds, iters(run_us), || {
        calls(&set_input, &by_index)?;
        run.call(&no_args.args())?;
        calls(&get_output, &out_args)
    })?;
    let one_call = median_us(rounds, iters(run_us), || run_into.call(&fused.args()).map(drop))?;
    let ops = plan.ops.len();
    let report = json!({
        "model": model.dir.display().to_string(), "operators": ops,
        "threads": tvm_runtime::backend::thread_pool::num_threads(),
        "us": {"run": run_us, "set_inputs_by_name": set_name, "set_inputs_by_index": set_index,
               "get_outputs": get, "request": request, "request_in_one_call": one_call},
        "overhead_us": {"request": request - run_us, "request_in_one_call": one_call - run_us},
    });
    if json_out {
        print_json(&report);
        return Ok(());
    }
    let row = |what: &str, v: &Value| println!("{what:<34} {:>10.3} us", v.as_f64().unwrap_or(0.0));
    println!(
        "model    {} ({ops} operators, {} kernel thread(s))",
        report["model"].as_str().unwrap_or(""),
        report["threads"]
    );
    row("run (the model's own)", &report["us"]["run"]);
    row(&format!("set_input x{} by name", inputs.len()), &report["us"]["set_inputs_by_name"]);
    row(&format!("set_input x{} by index", inputs.len()), &report["us"]["set_inputs_by_index"]);
    row(&format!("get_output x{} (copied out)", outputs.len()), &report["us"]["get_outputs"]);
    row("request: set, run, get", &report["us"]["request"]);
    row("request in one call (run_into)", &report["us"]["request_in_one_call"]);
    row("overhead of a request", &report["overhead_us"]["request"]);
    row("overhead in one call", &report["overhead_us"]["request_in_one_call"]);
    println!(
        "(medians of {rounds} timed loops after a warm-up; the runtime's calls, as a host's TVMFuncCall reaches them)"
    );
    Ok(())
}
