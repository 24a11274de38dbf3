//! The debug executor: incremental execution, per-node outputs and timings.

mod common;
use common::*;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::factory::Factory;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::ArgsBuilder;

/// A debug executor from the factory's `debug_create("default", cpu)`.
fn debug_executor(lib: &ObjRef<Module>) -> ObjRef<Module> {
    let debug_create = Module::get_function(lib, "debug_create", false).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.str("default").device(DLDevice::CPU);
    debug_create.call(&a.args()).unwrap().into_object::<Module>().unwrap()
}

#[test]
fn execute_node_and_node_outputs_match_a_full_run() {
    let f = Fixture::load("convnet");
    let lib = f.load_lib();
    let m = debug_executor(&lib);
    let ex = exec(&m);
    assert!(ex.is_debug());
    f.set_inputs(&m);
    let last = ex.plan().graph.nodes.len() - 1;
    // A node that was not executed last cannot be read.
    assert!(ex.node_output(last, 0).is_err());
    for node in 0..=last {
        ex.execute_node(node).unwrap();
    }
    let out = ex.node_output(last, 0).unwrap();
    assert_eq!(out.to_vec(), f.outputs[0].data, "the last node's output is the model's output");
    // Going backwards re-runs from the start.
    ex.execute_node(2).unwrap();
    assert!(ex.node_output(2, 0).is_ok() && ex.node_output(last, 0).is_err());
    let e = call(&m, "execute_node", |a| {
        a.int(999);
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.contains("node index 999 out of range"), "{e}");
    let times = ex
        .time_node(
            last,
            &tvm_runtime::time_evaluator::Settings {
                number: 2,
                repeat: 3,
                min_repeat_ms: 0.0,
                limit_zero_time_iterations: 100,
                cooldown_interval_ms: 0,
                repeats_to_cooldown: 1,
                cache_flush_bytes: 0,
            },
        )
        .unwrap();
    assert_eq!(times.len(), 3);
    assert!(times.iter().all(|&t| t > 0.0));
    // Plain executors do not answer debug functions.
    let plain = lib.node::<Factory>().unwrap().create_executor(&lib, DLDevice::CPU).unwrap();
    assert!(Module::get_function(&plain, "execute_node", false).unwrap().is_none());
}

/// The function tables the executors list are what they answer: every listed name resolves, the
/// debug ones only on a debug executor, and nothing else does.
#[test]
fn the_listed_function_names_are_the_functions() {
    use tvm_runtime::executor::{debug, functions};
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    let plain = f.executor_from_factory(&lib);
    let dbg = debug_executor(&lib);
    let has = |m: &ObjRef<Module>, name: &str| Module::get_function(m, name, false).unwrap().is_some();
    for &name in functions::NAMES {
        assert!(has(&plain, name) && has(&dbg, name), "{name}");
    }
    for &name in debug::NAMES {
        assert!(!has(&plain, name) && has(&dbg, name), "{name}");
    }
    assert!(!has(&plain, "no_such_function") && !has(&dbg, "get_output_index_of"));
}

/// `profile` reports every operator call as upstream's debug executor does: its function's name,
/// one call, the device of its output, its argument shapes, a duration that is part of the run's
/// total (and its percent of it); the total per device; the configuration. `profile_rpc` gives the
/// same report as JSON; metric collectors (PAPI) are refused by name.
#[test]
fn profile_reports_every_operator_call() {
    use tvm_runtime::graph::NodeKind;
    use tvm_runtime::profiling::{metric, Metric};
    let f = Fixture::load("convnet");
    let lib = f.load_lib();
    let m = debug_executor(&lib);
    let ex = exec(&m);
    f.set_inputs(&m);
    let report = ex.profile().unwrap();
    let plan = ex.plan();
    assert_eq!(report.calls.len(), plan.ops.len());
    let text = |c: &tvm_runtime::profiling::Metrics, k: &str| match metric(c, k) {
        Some(Metric::Str(s)) => s.clone(),
        other => panic!("{k}: {other:?}"),
    };
    let mut sum = 0.0;
    for (call, op) in report.calls.iter().zip(&plan.ops) {
        let NodeKind::Op(attrs) = &plan.graph.nodes[op.node].kind else { panic!("an operator") };
        assert_eq!(text(call, "Name"), attrs.func_name);
        assert_eq!(text(call, "Device"), "cpu0");
        assert_eq!(metric(call, "Count"), Some(&Metric::Count(1)));
        let shapes = text(call, "Argument Shapes");
        assert_eq!(shapes.matches("float32[").count(), op.args.len(), "{shapes}");
        let Some(Metric::Duration(d)) = metric(call, "Duration (us)") else { panic!("a duration") };
        sum += d;
        assert!(matches!(metric(call, "Hash"), Some(Metric::Str(h)) if h.len() == 16));
    }
    let (device, totals) = &report.device_metrics[0];
    assert_eq!((device.as_str(), report.device_metrics.len()), ("cpu0", 1));
    let Some(Metric::Duration(total)) = metric(totals, "Duration (us)") else { panic!("a total") };
    assert!(sum > 0.0 && sum <= *total, "calls {sum} us within the run's {total} us");
    assert!(metric(totals, "Percent").is_none());
    let percents: f64 = report
        .calls
        .iter()
        .filter_map(|c| match metric(c, "Percent") {
            Some(Metric::Percent(p)) => Some(*p),
            _ => None,
        })
        .sum();
    assert!((percents - sum / total * 100.0).abs() < 1e-6);
    assert_eq!(metric(&report.configuration, "Executor"), Some(&Metric::Str("Graph".into())));
    assert!(matches!(metric(&report.configuration, "Number of threads"), Some(Metric::Count(n)) if *n >= 1));
    // The model ran: its output is upstream's.
    f.check_outputs(&m, "profiled");
    // The packed functions.
    let r = call(&m, "profile", |a| {
        a.null();
    })
    .unwrap()
    .into_object::<tvm_runtime::profiling::objects::ReportObj>()
    .unwrap();
    assert_eq!(tvm_runtime::profiling::Report::from_object(&r).unwrap().calls.len(), plan.ops.len());
    let tvm_runtime::packed::RetValue::Str(json) = call(&m, "profile_rpc", |_| {}).unwrap() else {
        panic!("profile_rpc returns a string")
    };
    assert_eq!(tvm_runtime::profiling::json::from_json(&json).unwrap().calls.len(), plan.ops.len());
    let other = tvm_runtime::packed::ArrayObj::new(vec![tvm_runtime::packed::StringObj::new("x").into_any()]);
    let e = call(&m, "profile", |a| {
        a.object(other.into_any());
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("metric collector runtime.String is not available"), "{e}");
}
