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
