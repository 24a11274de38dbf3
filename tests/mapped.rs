//! Weights mapped from a params file: used in place when aligned, never written back.

mod common;
use common::*;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::GraphExecutor;

/// The address ranges at which `path` is mapped in this process.
fn mappings_of(path: &std::path::Path) -> Vec<(usize, usize)> {
    let canon = std::fs::canonicalize(path).unwrap();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with(canon.to_str().unwrap()))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap())
        })
        .collect()
}

#[test]
fn aligned_weights_are_used_in_place_from_the_file() {
    let f = Fixture::load("lstm_seq8");
    let path = f.aligned_params_file("lstm.params");
    let lib = f.load_lib();
    let m = f.executor_without_params(&lib);
    let ex = exec(&m);
    // SAFETY: the params file is this test's own and nothing changes it while mapped.
    let (mapped, copied) = load_mapped(ex, path.to_str().unwrap()).unwrap();
    assert_eq!((mapped, copied), (4, 0));
    let maps = mappings_of(&path);
    assert!(!maps.is_empty(), "the file is not mapped");
    for name in ["i2h_weight", "i2h_bias", "h2h_weight", "h2h_bias"] {
        let i = ex.plan().input_index(name).unwrap();
        let p = ex.entry_data(ex.plan().input_entries[i]) as usize;
        assert!(maps.iter().any(|&(a, b)| (a..b).contains(&p)), "{name} at {p:#x} is not inside the mapping {maps:x?}");
    }
    let usage = ex.memory_usage();
    assert_eq!((usage.weights_owned, usage.weights_mapped), (0, (64 * 8 + 64 + 64 * 16 + 64) * 4));
    f.set_inputs(&m);
    ex.run().unwrap();
    f.check_outputs(&m, "mapped weights");

    // Another executor shares the mapped weights; a write on one never reaches the file or the other.
    let other = f.executor_without_params(&lib);
    exec(&other).share_params(ex, &f.params()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let bias = ex.plan().input_index("h2h_bias").unwrap();
    ex.set_input_bytes(bias, &[0u8; 64 * 4]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    ex.run().unwrap();
    assert_ne!(ex.output(0).unwrap().to_vec(), f.outputs[0].data, "the write had no effect");
    f.set_inputs(&other);
    exec(&other).run().unwrap();
    f.check_outputs(&other, "the other executor after a write to the first");
    drop((m, other));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn unaligned_weights_are_copied() {
    let f = Fixture::load("mlp_unbound_b1");
    let path = temp_path("mlp.params");
    std::fs::write(&path, f.params()).unwrap();
    let lib = f.load_lib();
    let m = f.executor_without_params(&lib);
    // The file maps at a page boundary: a tensor maps in place exactly when its offset in the file
    // is 64-byte aligned. This file was written without padding, so some are and some are not.
    let blob = f.params();
    let (mut aligned, mut unaligned) = (Vec::new(), Vec::new());
    for (name, rec) in tvm_runtime::params::parse(&blob).unwrap() {
        let offset = rec.data.as_ptr() as usize - blob.as_ptr() as usize;
        if offset % 64 == 0 { &mut aligned } else { &mut unaligned }.push((name.to_string(), rec.data.len()));
    }
    assert!(!unaligned.is_empty(), "the fixture has no unaligned tensor to test with");
    // SAFETY: the params file is this test's own and nothing changes it while mapped.
    let (mapped, copied) = load_mapped(exec(&m), path.to_str().unwrap()).unwrap();
    assert_eq!((mapped, copied), (aligned.len(), unaligned.len()));
    let usage = exec(&m).memory_usage();
    assert_eq!(usage.weights_mapped, aligned.iter().map(|(_, n)| n.next_multiple_of(4)).sum::<usize>(), "{usage:?}");
    assert_eq!(usage.weights_owned, unaligned.iter().map(|(_, n)| n.next_multiple_of(4)).sum::<usize>(), "{usage:?}");
    for (name, _) in &unaligned {
        let ex = exec(&m);
        let p = ex.entry_data(ex.plan().input_entries[ex.plan().input_index(name).unwrap()]) as usize;
        assert_eq!(p % 64, 0, "{name}: a copied weight lives in aligned memory of the executor's own");
    }
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "copied from a mapped file");
    // SAFETY: no such file: nothing is mapped.
    let e = load_mapped(exec(&m), "/nonexistent.params").unwrap_err().to_c_message();
    assert!(e.contains("/nonexistent.params"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// A prepared params file (`prepared_params`, `tvmrt prepare-params`): the derived weights come
/// mapped from the file, nothing is folded at load, outputs are upstream's bytes. Where its stamp
/// does not hold (another build, a stamp changed), the file loads as the plain params it also is:
/// right outputs, the derived records unused, and the report says why.
#[test]
fn prepared_params_map_the_derived_weights_where_their_stamp_holds() {
    use tvm_runtime::module::Module;
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let bytes = maker(&f, &lib).prepared_params(&f.params()).unwrap();
    let path = temp_path("mlp.prepared");
    std::fs::write(&path, &bytes).unwrap();

    let m = f.executor_without_params(&lib);
    let ex = exec(&m);
    load_mapped(ex, path.to_str().unwrap()).unwrap();
    assert_eq!(ex.prepared_params_use().as_deref(), Some("used"));
    let usage = ex.memory_usage();
    assert_eq!(usage.ops_folded, 3, "{usage:?}");
    assert!(usage.weights_derived > 0 && usage.weights_owned == 0, "{usage:?}");
    let maps = mappings_of(&path);
    let derived = derived_addresses(ex);
    assert!(!derived.is_empty());
    for p in derived {
        assert!(maps.iter().any(|&(a, b)| (a..b).contains(&p)), "a derived weight at {p:#x} is not in the file");
    }
    f.set_inputs(&m);
    ex.run().unwrap();
    f.check_outputs(&m, "prepared params");
    let tvm_runtime::packed::RetValue::Str(report) = call(&m, "get_memory_usage", |_| {}).unwrap() else {
        panic!("get_memory_usage returns a string")
    };
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["prepared_params"], "used", "{report}");

    // Made for batch 1: the batch-8 graph loads the weights and says why the rest is not used.
    let f8 = Fixture::load("mlp_unbound_b8");
    let m8 = f8.executor_without_params(&f8.load_lib());
    load_mapped(exec(&m8), path.to_str().unwrap()).unwrap();
    let why = exec(&m8).prepared_params_use().unwrap();
    assert!(why.starts_with("not used: made for another build"), "{why}");
    f8.set_inputs(&m8);
    exec(&m8).run().unwrap();
    f8.check_outputs(&m8, "a batch-1 prepared file on the batch-8 build");
    // A stamp changed by a byte: not trusted either.
    let stamp = bytes.windows(14).position(|w| w == b"tvmrt-prepared").unwrap();
    let mut bad = bytes.clone();
    bad[stamp + 22] ^= 1;
    let bad_path = temp_path("mlp.prepared.bad");
    std::fs::write(&bad_path, &bad).unwrap();
    let m2 = f.executor_without_params(&lib);
    load_mapped(exec(&m2), bad_path.to_str().unwrap()).unwrap();
    assert!(exec(&m2).prepared_params_use().unwrap().starts_with("not used:"));
    f.set_inputs(&m2);
    exec(&m2).run().unwrap();
    f.check_outputs(&m2, "a prepared file with a broken stamp");

    // Plain params still: loaded from bytes, the extra records name no input.
    let plain = Module::new(GraphExecutor::new(exec(&m).plan().clone()).unwrap());
    exec(&plain).load_params(&bytes).unwrap();
    assert_eq!(exec(&plain).prepared_params_use(), None);
    f.set_inputs(&plain);
    exec(&plain).run().unwrap();
    f.check_outputs(&plain, "prepared file loaded as plain params");
    drop((m, m2, m8));
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&bad_path).unwrap();
}

/// Executors sharing the weights of one that loaded a prepared file (how the Python package and
/// Serve run a model: a holder, and executors sharing from it) run on the file's derived weights
/// too, at the same addresses, folded: not the weight-only operators at every run, which mapped
/// weights alone would mean. A build of another batch size sharing them derives its own.
#[test]
fn sharers_of_a_prepared_holder_run_on_its_derived_weights() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let bytes = maker(&f, &lib).prepared_params(&f.params()).unwrap();
    let path = temp_path("mlp.shared.prepared");
    std::fs::write(&path, &bytes).unwrap();
    let holder = f.executor_without_params(&lib);
    load_mapped(exec(&holder), path.to_str().unwrap()).unwrap();
    let sharer = f.executor_without_params(&lib);
    exec(&sharer).share_params(exec(&holder), &bytes).unwrap();
    f.set_inputs(&sharer);
    exec(&sharer).run().unwrap();
    f.check_outputs(&sharer, "sharing a prepared holder's weights");
    let (h, s) = (exec(&holder).memory_usage(), exec(&sharer).memory_usage());
    assert_eq!((s.ops_folded, s.weights_derived), (h.ops_folded, h.weights_derived), "{s:?}");
    assert!(s.ops_folded > 0 && s.activations < h.weights_derived, "{s:?}");
    assert_eq!(
        derived_addresses(exec(&sharer)),
        derived_addresses(exec(&holder)),
        "the file's derived weights, not copies"
    );
    // Another build (batch 8) sharing the weights: not the same model, it folds from them itself.
    let f8 = Fixture::load("mlp_unbound_b8");
    let m8 = f8.executor_without_params(&f8.load_lib());
    exec(&m8).share_params(exec(&holder), &bytes).unwrap();
    f8.set_inputs(&m8);
    exec(&m8).run().unwrap();
    f8.check_outputs(&m8, "a batch-8 build sharing a prepared holder's weights");
    drop((holder, sharer, m8));
    std::fs::remove_file(&path).unwrap();
}

/// Where each entry `ex`'s layout keeps as a derived weight is, in entry order.
fn derived_addresses(ex: &GraphExecutor) -> Vec<usize> {
    let layout = ex.layout();
    (0..ex.plan().graph.num_entries())
        .filter(|&e| layout.homes[e] == tvm_runtime::executor::layout::Home::Derived)
        .map(|e| ex.entry_data(e) as usize)
        .collect()
}

/// An executor that prepares params for `f`'s graph and library.
fn maker(f: &Fixture, lib: &tvm_runtime::object::ObjRef<tvm_runtime::module::Module>) -> GraphExecutor {
    let plan = tvm_runtime::executor::plan::Plan::new(&f.graph_json(), lib.clone(), DLDevice::CPU).unwrap();
    GraphExecutor::new(plan).unwrap()
}

/// A weight changed after preparing (a bit flipped on disk, or TVM's `load_param_dict` -> edit ->
/// `save_param_dict`, which keeps every record, the stamp too): both loaders refuse the file
/// rather than answer from weights that are not the ones written, saying how to run edited
/// weights; saved as plain params (the prepared records dropped), both give the edited model.
#[test]
fn a_prepared_file_whose_weights_changed_is_refused_by_both_loaders() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let prepared = maker(&f, &lib).prepared_params(&f.params()).unwrap();
    let records = tvm_runtime::params::parse(&prepared).unwrap();
    let name = "fc1_weight";
    type Arrays = Vec<(String, tvm_runtime::object::ObjRef<tvm_runtime::tensor::NDArray>)>;
    let edited_records = |keep_prepared: bool| -> Arrays {
        records
            .iter()
            .filter(|(n, _)| !n.starts_with(tvm_runtime::params::PAD_PREFIX))
            .filter(|(n, _)| keep_prepared || !tvm_runtime::prepared_params::is_prepared_record(n))
            .map(|(n, r)| {
                let mut data = r.data.to_vec();
                if *n == name {
                    data[5] ^= 0x10;
                }
                (n.to_string(), tvm_runtime::tensor::NDArray::from_bytes(&r.shape, r.dtype, &data).unwrap())
            })
            .collect()
    };
    let save = |arrays: &Arrays| tvm_runtime::params::save(arrays.iter().map(|(n, a)| (n.as_str(), &**a)));
    let edited = save(&edited_records(true));
    let path = temp_path("mlp.prepared.edited");
    std::fs::write(&path, tvm_runtime::params::align(&edited).unwrap()).unwrap();
    let (from_bytes, from_file) = (f.executor_without_params(&lib), f.executor_without_params(&lib));
    let e = exec(&from_bytes).load_params(&edited).unwrap_err().to_string();
    assert!(e.contains("not the ones written"), "{e}");
    let e = load_mapped(exec(&from_file), path.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("not the ones written") && e.contains("save_params"), "{e}");
    // Saved as plain params: the edited model, from both loaders.
    let plain = save(&edited_records(false));
    std::fs::write(&path, tvm_runtime::params::align(&plain).unwrap()).unwrap();
    exec(&from_bytes).load_params(&plain).unwrap();
    load_mapped(exec(&from_file), path.to_str().unwrap()).unwrap();
    let outputs = |m| {
        f.set_inputs(m);
        exec(m).run().unwrap();
        exec(m).output(0).unwrap().to_vec()
    };
    let (a, b) = (outputs(&from_bytes), outputs(&from_file));
    assert_eq!(a, b, "both loaders give the edited model");
    assert_ne!(a, f.outputs[0].data, "the edit changes the output");
    std::fs::remove_file(&path).unwrap();
}

/// A file that keeps its stamp but not its derived records, or holds records whose roots the
/// executor does not keep, loads as plain params and computes what it folds.
#[test]
fn a_prepared_file_without_its_derived_records_loads_as_plain_params() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let prepared = maker(&f, &lib).prepared_params(&f.params()).unwrap();
    let kept: Vec<(String, _)> = tvm_runtime::params::parse(&prepared)
        .unwrap()
        .iter()
        .filter(|(n, _)| !n.starts_with(tvm_runtime::prepared_params::DERIVED_PREFIX))
        .filter(|(n, _)| !n.starts_with(tvm_runtime::params::PAD_PREFIX))
        .map(|(n, r)| (n.to_string(), r.to_ndarray().unwrap()))
        .collect();
    let without = tvm_runtime::params::save(kept.iter().map(|(n, a)| (n.as_str(), &**a)));
    let path = temp_path("mlp.prepared.nodrv");
    std::fs::write(&path, tvm_runtime::params::align(&without).unwrap()).unwrap();
    let m = f.executor_without_params(&lib);
    load_mapped(exec(&m), path.to_str().unwrap()).unwrap();
    assert!(exec(&m).prepared_params_use().unwrap().contains("does not hold"));
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "prepared file without its derived records");
    std::fs::remove_file(&path).unwrap();
}

/// The library digest is that of the code loaded: after the library file is replaced by renaming
/// another build over it (an atomic redeploy), the running process still uses params prepared for
/// what it runs, and a new load of the path sees the new build.
#[test]
fn the_library_digest_is_that_of_the_code_loaded() {
    let f = Fixture::load("mlp_unbound_b1");
    let dir = temp_path("redeploy");
    std::fs::create_dir_all(&dir).unwrap();
    let lib_path = dir.join("lib.so");
    std::fs::copy(f.dir.join("lib.so"), &lib_path).unwrap();
    let lib = tvm_runtime::library::load_file(lib_path.to_str().unwrap(), "so").unwrap();
    let prepared = maker(&f, &lib).prepared_params(&f.params()).unwrap();
    let params_path = dir.join("prepared.params");
    std::fs::write(&params_path, &prepared).unwrap();
    // Redeploy: another build renamed over the path.
    let staged = dir.join("lib.so.new");
    std::fs::copy(fixtures_dir().join("mlp_unbound_b8/lib.so"), &staged).unwrap();
    std::fs::rename(&staged, &lib_path).unwrap();
    let m = f.executor_without_params(&lib);
    load_mapped(exec(&m), params_path.to_str().unwrap()).unwrap();
    assert_eq!(exec(&m).prepared_params_use().as_deref(), Some("used"), "the code that runs is what it was made for");
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "after a redeploy");
    let new_lib = tvm_runtime::library::load_file(lib_path.to_str().unwrap(), "so").unwrap();
    let plan = tvm_runtime::executor::plan::Plan::new(&f.graph_json(), new_lib, DLDevice::CPU);
    let ex = GraphExecutor::new(plan.unwrap()).unwrap();
    load_mapped(&ex, params_path.to_str().unwrap()).unwrap();
    assert!(ex.prepared_params_use().unwrap().starts_with("not used: made for another build"));
    drop(m);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A mapped params file written in place (`cp new.params served.params`) is refused before the
/// next run, with a message that says how to replace one; replaced by renaming, the mapping stays
/// valid and runs go on.
#[test]
fn a_mapped_file_written_in_place_is_refused_before_a_run() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let aligned = tvm_runtime::params::align(&f.params()).unwrap();
    let path = temp_path("mlp.served.params");
    std::fs::write(&path, &aligned).unwrap();
    let m = f.executor_without_params(&lib);
    let (mapped, _) = load_mapped(exec(&m), path.to_str().unwrap()).unwrap();
    assert!(mapped > 0);
    f.set_inputs(&m);
    exec(&m).run().unwrap();
    f.check_outputs(&m, "mapped");
    // Replaced by renaming: the mapping is of the old file, which stays as it was.
    let staged = temp_path("mlp.staged.params");
    std::fs::write(&staged, &aligned).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    exec(&m).run().unwrap();
    f.check_outputs(&m, "after a rename over the file");
    // Written in place (same size, other bytes): refused.
    let m2 = f.executor_without_params(&lib);
    load_mapped(exec(&m2), path.to_str().unwrap()).unwrap();
    f.set_inputs(&m2);
    exec(&m2).run().unwrap();
    let mut other = aligned.clone();
    let last = other.len() - 1;
    other[last] ^= 0xff;
    std::thread::sleep(std::time::Duration::from_millis(10));
    std::fs::write(&path, &other).unwrap();
    let e = exec(&m2).run().unwrap_err().to_string();
    assert!(e.contains("was written since it was mapped") && e.contains("renaming"), "{e}");
    // Loading the file again clears it.
    load_mapped(exec(&m2), path.to_str().unwrap()).unwrap();
    exec(&m2).run().unwrap();
    drop((m, m2));
    std::fs::remove_file(&path).unwrap();
}

/// One prepared file for two builds of the same weights (batch 1 and 8): prepared for one, then
/// for the other over it; each build's executor maps the one file and uses its own derived
/// weights, the weights held once in it.
#[test]
fn one_prepared_file_serves_several_builds() {
    let (f1, f8) = (Fixture::load("mlp_unbound_b1"), Fixture::load("mlp_unbound_b8"));
    let (lib1, lib8) = (f1.load_lib(), f8.load_lib());
    let one = maker(&f1, &lib1).prepared_params(&f1.params()).unwrap();
    let both = maker(&f8, &lib8).prepared_params(&one).unwrap();
    let records = tvm_runtime::params::parse(&both).unwrap();
    let stamp = tvm_runtime::prepared_params::verified_stamp(&records).unwrap().unwrap();
    assert_eq!(stamp.builds.len(), 2);
    let weights = records.iter().filter(|(n, _)| tvm_runtime::prepared_params::is_weight_record(n)).count();
    assert_eq!(weights, tvm_runtime::params::parse(&f1.params()).unwrap().len(), "the weights once");
    let path = temp_path("mlp.prepared.both");
    std::fs::write(&path, &both).unwrap();
    for (f, lib) in [(&f1, &lib1), (&f8, &lib8)] {
        let m = f.executor_without_params(lib);
        load_mapped(exec(&m), path.to_str().unwrap()).unwrap();
        assert_eq!(exec(&m).prepared_params_use().as_deref(), Some("used"), "{}", f.name);
        let usage = exec(&m).memory_usage();
        assert!(usage.ops_folded > 0 && usage.weights_owned == 0, "{}: {usage:?}", f.name);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "one prepared file for both builds");
    }
    std::fs::remove_file(&path).unwrap();
}
