//! Weights mapped from a params file: used in place when aligned, never written back.

mod common;
use common::*;

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
    let (mapped, copied) = unsafe { ex.load_params_from_file(path.to_str().unwrap()) }.unwrap();
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
    let (mapped, copied) = unsafe { exec(&m).load_params_from_file(path.to_str().unwrap()) }.unwrap();
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
    let e = unsafe { exec(&m).load_params_from_file("/nonexistent.params") }.unwrap_err().to_c_message();
    assert!(e.contains("/nonexistent.params"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// A prepared params file (`prepared_params`, `tvmrt prepare-params`): the derived weights come
/// mapped from the file, nothing is folded at load, outputs are upstream's bytes; a file made for
/// another graph is refused; the file still loads as plain params (upstream's loader skips the
/// extra records, and so does ours from bytes).
#[test]
fn prepared_params_map_the_derived_weights_and_are_refused_elsewhere() {
    use tvm_runtime::executor::GraphExecutor;
    use tvm_runtime::module::Module;
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let maker = GraphExecutor::new(
        tvm_runtime::executor::plan::Plan::new(&f.graph_json(), lib.clone(), tvm_runtime::dlpack::DLDevice::CPU)
            .unwrap(),
    )
    .unwrap();
    let bytes = maker.prepared_params(&f.params()).unwrap();
    let path = temp_path("mlp.prepared");
    std::fs::write(&path, &bytes).unwrap();

    let m = f.executor_without_params(&lib);
    let ex = exec(&m);
    // SAFETY: the file is this test's own and nothing changes it while mapped.
    unsafe { ex.load_params_from_file(path.to_str().unwrap()) }.unwrap();
    let usage = ex.memory_usage();
    assert_eq!(usage.ops_folded, 3, "{usage:?}");
    assert!(usage.weights_derived > 0 && usage.weights_owned == 0, "{usage:?}");
    let maps = mappings_of(&path);
    let layout = ex.layout();
    let derived: Vec<usize> = (0..ex.plan().graph.num_entries())
        .filter(|&e| layout.homes[e] == tvm_runtime::executor::layout::Home::Derived)
        .map(|e| ex.entry_data(e) as usize)
        .collect();
    assert!(!derived.is_empty());
    for p in derived {
        assert!(maps.iter().any(|&(a, b)| (a..b).contains(&p)), "a derived weight at {p:#x} is not in the file");
    }
    f.set_inputs(&m);
    ex.run().unwrap();
    f.check_outputs(&m, "prepared params");

    // Made for batch 1: the batch-8 graph refuses it, saying why.
    let f8 = Fixture::load("mlp_unbound_b8");
    let m8 = f8.executor_without_params(&f8.load_lib());
    // SAFETY: as above.
    let e = unsafe { exec(&m8).load_params_from_file(path.to_str().unwrap()) }.unwrap_err();
    assert!(e.to_string().contains("made for another build"), "{e}");
    // A stamp changed by a byte: refused too.
    let stamp = bytes.windows(14).position(|w| w == b"tvmrt-prepared").unwrap();
    let mut bad = bytes.clone();
    bad[stamp + 22] ^= 1;
    let bad_path = temp_path("mlp.prepared.bad");
    std::fs::write(&bad_path, &bad).unwrap();
    let m2 = f.executor_without_params(&lib);
    // SAFETY: as above.
    assert!(unsafe { exec(&m2).load_params_from_file(bad_path.to_str().unwrap()) }.is_err());

    // Plain params still: loaded from bytes, the extra records name no input.
    let plain = Module::new(GraphExecutor::new(exec(&m).plan().clone()).unwrap());
    exec(&plain).load_params(&bytes).unwrap();
    f.set_inputs(&plain);
    exec(&plain).run().unwrap();
    f.check_outputs(&plain, "prepared file loaded as plain params");
    drop((m, m2, m8));
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&bad_path).unwrap();
}
