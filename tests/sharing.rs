//! Weight sharing: one copy of the weights across executors, factories and batch sizes.

mod common;
use common::*;
use tvm_runtime::tensor::NDArray;

fn weight_ptr(m: &tvm_runtime::object::ObjRef<tvm_runtime::module::Module>, name: &str) -> *const u8 {
    let ex = exec(m);
    let i = ex.plan().input_index(name).unwrap();
    // Read the pointer the operators use, without taking a private copy.
    ex.entry_data(ex.plan().input_entries[i])
}

#[test]
fn executors_of_one_factory_share_its_weights() {
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    let a = f.executor_from_factory(&lib);
    let b = f.executor_from_factory(&lib);
    for name in ["p0", "p1", "p2"] {
        assert_eq!(weight_ptr(&a, name), weight_ptr(&b, name), "{name} is not shared");
    }
    let (ua, ub) = (exec(&a).memory_usage(), exec(&b).memory_usage());
    assert_eq!(ua.weights_owned, ub.weights_owned);
    assert!(ua.weights_shared > 400_000, "{ua:?}");
    for m in [&a, &b] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "shared factory weights");
    }
}

#[test]
fn writing_a_shared_weight_copies_it_first() {
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    let a = f.executor_from_factory(&lib);
    let b = f.executor_from_factory(&lib);
    let before = weight_ptr(&b, "p1");
    let ex = exec(&a);
    let p1 = ex.plan().input_index("p1").unwrap();
    let zeros = NDArray::empty(&[1, 128], "float32".parse().unwrap(), tvm_runtime::dlpack::DLDevice::CPU).unwrap();
    ex.set_input(p1, zeros.raw()).unwrap();
    assert_ne!(weight_ptr(&a, "p1"), before, "the write went to shared memory");
    assert_eq!(weight_ptr(&b, "p1"), before);
    f.set_inputs(&b);
    exec(&b).run().unwrap();
    f.check_outputs(&b, "other executor after a write");
}

/// Batch 1 and batch 8 builds of one MLP (unbound params): the batch-8 executor takes the
/// batch-1 executor's weights, and both still match upstream.
#[test]
fn share_params_across_batch_sizes() {
    let f1 = Fixture::load("mlp_unbound_b1");
    let f8 = Fixture::load("mlp_unbound_b8");
    let (lib1, lib8) = (f1.load_lib(), f8.load_lib());
    let m1 = f1.executor_from_create(&lib1);
    let m8 = f8.executor_without_params(&lib8);
    exec(&m8).share_params(exec(&m1), &f8.params()).unwrap();
    for name in ["fc1_weight", "fc1_bias", "fc2_weight", "fc3_bias"] {
        assert_eq!(weight_ptr(&m1, name), weight_ptr(&m8, name), "{name}");
    }
    let usage = exec(&m8).memory_usage();
    assert_eq!(usage.weights_owned, 0, "{usage:?}");
    // The source may go first: the weights live on.
    drop(m1);
    drop(lib1);
    f8.set_inputs(&m8);
    exec(&m8).run().unwrap();
    f8.check_outputs(&m8, "batch 8 on batch 1's weights");
}

/// Reshaped biases are `__nop` nodes aliasing the parameter's storage: upstream's share_params
/// left them pointing at never-written memory.
#[test]
fn share_params_covers_nop_aliases() {
    let f = Fixture::load("lstm_seq8");
    let lib = f.load_lib();
    let src = f.executor_from_create(&lib);
    let m = f.executor_without_params(&lib);
    call(&m, "share_params", |a| {
        a.object(src.clone().into_any());
        let _ = a;
    })
    .unwrap_err();
    exec(&m).share_params(exec(&src), &f.params()).unwrap();
    assert_eq!(exec(&m).memory_usage().weights_owned, 0);
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "lstm with shared weights");

    // Across sequence lengths, too.
    let f16 = Fixture::load("lstm_seq16");
    let lib16 = f16.load_lib();
    let m16 = f16.executor_without_params(&lib16);
    exec(&m16).share_params(exec(&src), &f16.params()).unwrap();
    drop(src);
    drop(m);
    f16.set_inputs(&m16);
    exec(&m16).run().unwrap();
    f16.check_outputs(&m16, "seq 16 on seq 8's weights");
}

#[test]
fn share_params_refuses_mismatches_by_name() {
    let conv = Fixture::load("convnet");
    let mlp = Fixture::load("mlp_unbound_b1");
    let (lc, lm) = (conv.load_lib(), mlp.load_lib());
    let m = mlp.executor_from_create(&lm);
    let c = conv.executor_from_factory(&lc);
    // convnet's inputs are p0.. and data; the MLP's params name fc*_: nothing in common but 'data'.
    let blob = tvm_runtime::params::save([(
        "data",
        &*NDArray::empty(&[1, 1, 28, 28], "float32".parse().unwrap(), tvm_runtime::dlpack::DLDevice::CPU).unwrap(),
    )]);
    let e = exec(&m).share_params(exec(&c), &blob).unwrap_err().to_c_message();
    assert!(e.contains("parameter 'data'") && e.contains("[1, 1, 28, 28]") && e.contains("[1, 3, 16, 16]"), "{e}");
    let e = exec(&m).share_params(exec(&c), &mlp.params()).unwrap_err().to_c_message();
    assert!(e.contains("parameter 'fc1_weight'") && e.contains("not an input"), "{e}");
    // Not an executor at all.
    let e = call(&m, "share_params", |a| {
        a.object(lm.clone().into_any());
        a.str("x");
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.contains("not a GraphExecutor"), "{e}");
}

/// Batch 1 and batch 8 used in turn: one copy of the weights and one activation arena (a pool of
/// one).
#[test]
fn batch_variants_share_weights_and_one_activation_arena() {
    let f1 = Fixture::load("mlp_unbound_b1");
    let f8 = Fixture::load("mlp_unbound_b8");
    let (lib1, lib8) = (f1.load_lib(), f8.load_lib());
    let m1 = f1.executor_from_create(&lib1);
    let m8 = f8.executor_without_params(&lib8);
    exec(&m8).share_params(exec(&m1), &f8.params()).unwrap();
    let own8 = exec(&m8).memory_usage().activation_arena;
    call(&m8, "share_activations", |a| {
        a.object(m1.clone().into_any());
    })
    .unwrap();
    let (u1, u8_) = (exec(&m1).memory_usage(), exec(&m8).memory_usage());
    // Each keeps only its outputs to itself (a host may hold views of them).
    let outputs = |m: &tvm_runtime::object::ObjRef<tvm_runtime::module::Module>| exec(m).plan().output_region_bytes;
    assert_eq!((u1.activations, u8_.activations), (outputs(&m1), outputs(&m8)), "{u1:?} {u8_:?}");
    // Arenas are made for runs: none yet.
    assert_eq!((u1.activations_shared, u8_.activations_shared), (0, 0), "{u1:?}");
    for round in 0..2 {
        for (f, m) in [(&f1, &m1), (&f8, &m8)] {
            f.set_inputs(m);
            exec(m).run().unwrap();
            f.check_outputs(m, &format!("shared arena, round {round}"));
        }
    }
    let (u1, u8_) = (exec(&m1).memory_usage(), exec(&m8).memory_usage());
    assert_eq!(u1.activations_shared, u8_.activations_shared);
    assert!(u8_.activations_shared >= own8 && u8_.activations_shared < own8 + 64 * 16, "{u8_:?} vs {own8}");

    // While one holder runs, the other's run waits for it (and fails after the pool's timeout,
    // leaving the executor usable).
    let pool = exec(&m1).pool().unwrap();
    assert_eq!(pool.usage().capacity, 1);
    let holder = pool.join(0);
    let running = holder.lease().unwrap();
    pool.set_timeout(std::time::Duration::from_millis(30));
    f8.set_inputs(&m8);
    let e = exec(&m8).run().unwrap_err().to_c_message();
    assert!(e.contains("no activation arena came free"), "{e}");
    pool.set_timeout(std::time::Duration::from_secs(30));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| exec(&m8).run());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the run waits while the arena is lent");
        drop(running);
        waiter.join().unwrap().unwrap();
    });
    f8.check_outputs(&m8, "after the arena came back");
    assert_eq!(pool.usage().stats.timeouts, 1);

    // A third executor joining with a bigger graph grows the arena; the others follow.
    let m8b = f8.executor_without_params(&lib8);
    exec(&m8b).share_params(exec(&m1), &f8.params()).unwrap();
    exec(&m8b).share_activations(exec(&m8)).unwrap();
    for (f, m) in [(&f1, &m1), (&f8, &m8b), (&f8, &m8)] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, "three holders");
    }
}

#[test]
fn executors_sharing_weights_run_concurrently() {
    let f = Fixture::load("convnet");
    let lib = f.load_lib();
    let execs: Vec<_> = (0..4).map(|_| f.executor_from_factory(&lib)).collect();
    std::thread::scope(|s| {
        for m in &execs {
            s.spawn(|| {
                for _ in 0..25 {
                    f.set_inputs(m);
                    exec(m).run().unwrap();
                    f.check_outputs(m, "concurrent");
                }
            });
        }
    });
}

/// Viewing a weight (which makes it private) and sharing from the executor lay its activations
/// out again; a view of an output the host holds still shows the last result and every later one,
/// at the same address, as with upstream's static storage.
#[test]
fn output_views_survive_a_new_layout() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let a = f.executor_from_create(&lib);
    exec(&a).set_fold_weights(true).unwrap();
    f.set_inputs(&a);
    exec(&a).run().unwrap();
    let held = exec(&a).output(0).unwrap();
    let first = held.to_vec();
    assert_eq!(first, f.outputs[0].data);
    let folded_before = exec(&a).memory_usage().ops_folded;
    let _weight = exec(&a).input(1).unwrap();
    assert!(exec(&a).memory_usage().ops_folded < folded_before, "a private weight is not folded from");
    let b = f.executor_from_create(&lib);
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    assert_eq!(exec(&a).memory_usage().ops_folded, folded_before, "a shared weight is folded from again");
    let now = exec(&a).output(0).unwrap();
    assert_eq!(now.data_ptr(), held.data_ptr());
    assert_eq!(now.to_vec(), first);
    exec(&a).set_input_bytes(0, &vec![0u8; f.inputs[0].data.len()]).unwrap();
    exec(&a).run().unwrap();
    assert_ne!(held.to_vec(), first);
    assert_eq!(held.to_vec(), exec(&a).output(0).unwrap().to_vec());
}
