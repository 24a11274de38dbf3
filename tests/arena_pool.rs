//! Executors drawing their activations from a pool of arenas: outputs byte-equal to upstream's
//! under threads over every variant, the state a host observes kept per executor, waits that end
//! in a result or an error, and the default pool an upstream host reaches without new calls.

mod common;

use common::*;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::pool::ArenaPool;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{registry, ArgsBuilder, RetValue};

/// The default pool is process-wide: tests that make executors take turns with the one that sets it.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` executors of each variant (MLP at batch 1 and 8 sharing one set of weights, the LSTM at
/// sequence lengths 8 and 16), each with its fixture.
fn variants(n: usize) -> Vec<(Fixture, ObjRef<Module>, ObjRef<Module>)> {
    let mut out = Vec::new();
    for (first, other) in
        [("mlp_unbound_b1", "mlp_unbound_b8"), ("lstm_seq8", "lstm_seq8"), ("lstm_seq16", "lstm_seq16")]
    {
        let (f, g) = (Fixture::load(first), Fixture::load(other));
        let (lf, lg) = (f.load_lib(), g.load_lib());
        let owner = f.executor_from_create(&lf);
        for k in 0..n {
            let m = if k == 0 { owner.clone() } else { g.executor_without_params(&lg) };
            if k > 0 {
                exec(&m).share_params(exec(&owner), &g.params()).unwrap();
            }
            let (fx, lib) =
                if k == 0 { (Fixture::load(first), lf.clone()) } else { (Fixture::load(other), lg.clone()) };
            out.push((fx, lib, m));
        }
    }
    out
}

fn text(v: RetValue) -> String {
    match v {
        RetValue::Str(s) => s,
        _ => panic!("a string was returned"),
    }
}

fn set_pool(capacity: i64) {
    let f = registry::get("tvmrt.executor.SetArenaPool").unwrap();
    let mut a = ArgsBuilder::new();
    a.int(capacity);
    f.call(&a.args()).unwrap();
}

#[test]
fn pooled_executors_give_upstreams_outputs_under_four_threads() {
    let _serial = serial();
    let all = variants(2);
    let pool = ArenaPool::new(DLDevice::CPU, 2).unwrap();
    for (_, _, m) in &all {
        exec(m).join_pool(&pool).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..4usize {
            let all = &all;
            s.spawn(move || {
                let mut state = t as u64 * 7919 + 1;
                for i in 0..60 {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let (f, _, m) = &all[(state >> 33) as usize % all.len()];
                    // Each run checks its own outputs under the executor's lock held by nobody else:
                    // an executor used by two threads at once would only interleave the same inputs.
                    f.set_inputs(m);
                    exec(m).run().unwrap();
                    f.check_outputs(m, &format!("thread {t}, run {i}"));
                }
            });
        }
    });
    let u = pool.usage();
    assert!(u.arenas <= 2 && u.stats.peak_lent <= 2, "{u:?}");
    assert_eq!(u.stats.leases, 240, "{u:?}");
    let largest = all.iter().map(|(_, _, m)| exec(m).layout().arena_bytes).max().unwrap();
    assert_eq!(u.arena_bytes, largest, "arenas are sized for the largest member");
    // Each executor holds its inputs and outputs, the pool its arenas once.
    for (_, _, m) in &all {
        let mu = exec(m).memory_usage();
        assert_eq!(mu.activations_shared, u.bytes(), "{mu:?}");
        assert!(mu.pool.is_some());
    }
}

#[test]
fn what_a_host_observes_stays_each_executors_own() {
    let _serial = serial();
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let (a, b) = (f.executor_from_create(&lib), f.executor_from_create(&lib));
    exec(&a).share_activations(exec(&b)).unwrap();
    // Inputs set before a run survive the other's runs.
    f.set_inputs(&a);
    for _ in 0..3 {
        let zeros = vec![0u8; f.inputs[0].data.len()];
        exec(&b).set_input_bytes(exec(&b).plan().input_index(&f.inputs[0].name).unwrap(), &zeros).unwrap();
        exec(&b).run().unwrap();
    }
    exec(&a).run().unwrap();
    f.check_outputs(&a, "inputs set before the other ran");
    // Outputs, and views of them, stay readable until this executor's next run.
    let view = exec(&a).output(0).unwrap();
    let before = view.to_vec();
    exec(&b).run().unwrap();
    assert_eq!(view.to_vec(), before, "a view of an output after another executor ran");
    f.check_outputs(&a, "outputs after the other ran");
    // The zero inputs gave b other outputs (the check above would notice a mix-up).
    assert_ne!(exec(&b).output(0).unwrap().to_vec(), before);
}

#[test]
fn a_lone_executor_in_a_pool_holds_what_it_held_alone() {
    let _serial = serial();
    let f = Fixture::load("lstm_seq16");
    let lib = f.load_lib();
    let (alone, pooled) = (f.executor_from_create(&lib), f.executor_from_create(&lib));
    let pool = ArenaPool::new(DLDevice::CPU, 4).unwrap();
    exec(&pooled).join_pool(&pool).unwrap();
    for m in [&alone, &pooled] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "lone");
    }
    let (ua, up) = (exec(&alone).memory_usage(), exec(&pooled).memory_usage());
    assert_eq!(pool.usage().arenas, 1, "one run at a time makes one arena");
    assert_eq!(ua.activations, up.activations + up.activations_shared, "{ua:?} {up:?}");
    assert_eq!(up.activations_shared, ua.activation_arena);
}

#[test]
fn an_executor_dropped_while_another_waits() {
    let _serial = serial();
    let f1 = Fixture::load("mlp_unbound_b1");
    let f8 = Fixture::load("mlp_unbound_b8");
    let (l1, l8) = (f1.load_lib(), f8.load_lib());
    let small = f1.executor_from_create(&l1);
    let big = f8.executor_without_params(&l8);
    exec(&big).share_params(exec(&small), &f8.params()).unwrap();
    let pool = ArenaPool::new(DLDevice::CPU, 1).unwrap();
    exec(&small).join_pool(&pool).unwrap();
    exec(&big).join_pool(&pool).unwrap();
    let big_arena = exec(&big).layout().arena_bytes;
    assert_eq!(pool.usage().arena_bytes, big_arena);
    let holder = pool.join(0);
    let lease = holder.lease().unwrap();
    f1.set_inputs(&small);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| exec(&small).run());
        std::thread::sleep(Duration::from_millis(30));
        // The largest member goes while a run waits: the arena it sized goes when given back.
        drop(big);
        assert!(pool.usage().arena_bytes < big_arena);
        drop(lease);
        waiter.join().unwrap().unwrap();
    });
    f1.check_outputs(&small, "after the largest member left");
    assert_eq!(pool.usage().arena_bytes, exec(&small).layout().arena_bytes);
    assert_eq!(pool.usage().bytes(), pool.usage().arena_bytes, "the old arena was dropped, a new one made");
    // The last members leave: the pool holds nothing.
    drop((small, holder));
    assert_eq!(pool.usage().bytes(), 0);
}

#[test]
fn pools_refuse_other_devices_and_debug_executors() {
    let _serial = serial();
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let m = f.executor_from_create(&lib);
    let on_gpu = ArenaPool::new(DLDevice { device_type: 4, device_id: 0 }, 1).unwrap();
    let e = exec(&m).join_pool(&on_gpu).unwrap_err().to_c_message();
    assert!(e.contains("only executors on the pool's device"), "{e}");
    // Refused and unchanged: it runs on its own arena still.
    assert!(exec(&m).pool().is_none());
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "after a refused join");

    let create = registry::get("tvm.graph_executor_debug.create").unwrap();
    let mut a = ArgsBuilder::new();
    a.str(&f.graph_json()).object(lib.clone().into_any()).int(1).int(0);
    let debug = create.call(&a.args()).unwrap().into_object::<Module>().unwrap();
    let e = call(&m, "share_activations", |a| {
        a.object(debug.clone().into_any());
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.contains("debug executor keeps its own"), "{e}");
    assert!(exec(&m).pool().is_none(), "a failed share changes neither");
}

/// An upstream host reaches the pool with the calls it makes already: a default capacity set
/// once (`TVM_RT_ARENA_POOL` or `tvmrt.executor.SetArenaPool`) and every executor made after,
/// by any route, draws from its device's pool.
#[test]
fn the_default_pool_takes_executors_made_by_any_route() {
    let _serial = serial();
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    set_pool(2);
    let made = [f.executor_from_create(&lib), f.executor_from_factory(&lib), f.executor_without_params(&lib)];
    set_pool(0);
    let after = f.executor_from_create(&lib);
    assert!(exec(&after).pool().is_none(), "executors made with no default capacity keep their arenas");
    let pool = exec(&made[0]).pool().expect("made while the default was set");
    for m in &made {
        assert!(Arc::ptr_eq(&exec(m).pool().unwrap(), &pool));
    }
    exec(&made[2]).load_params(&f.params()).unwrap();
    for m in &made {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "default pool");
    }
    assert_eq!(pool.usage().capacity, 2);
    let json = text(call(&made[0], "get_memory_usage", |_| {}).unwrap());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["pool"]["capacity"], 2, "{json}");
    assert_eq!(v["pool"]["members"], 3, "{json}");
    assert_eq!(v["activations_shared"], v["pool"]["bytes"], "{json}");

    // The explicit form: a pool object executors join by its function or theirs.
    let mk = registry::get("tvmrt.executor.ArenaPool").unwrap();
    let mut a = ArgsBuilder::new();
    a.int(1).int(0).int(1);
    let p = mk.call(&a.args()).unwrap().into_object::<Module>().unwrap();
    call(&after, "join_arena_pool", |a| {
        a.object(p.clone().into_any());
    })
    .unwrap();
    let join = Module::get_function(&p, "join", false).unwrap().unwrap();
    let mut a = ArgsBuilder::new();
    a.object(made[0].clone().into_any());
    join.call(&a.args()).unwrap();
    let usage = Module::get_function(&p, "get_usage", false).unwrap().unwrap();
    let u: serde_json::Value = serde_json::from_str(&text(usage.call(&ArgsBuilder::new().args()).unwrap())).unwrap();
    assert_eq!((u["capacity"].as_u64(), u["members"].as_u64()), (Some(1), Some(2)), "{u}");
    let e = call(&after, "join_arena_pool", |a| {
        a.object(lib.clone().into_any());
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.contains("not an ArenaPool"), "{e}");
}
