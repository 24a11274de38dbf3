//! Replays the fixture seeds and a fixed set of mutations through every untrusted-input reader and
//! on through the executor: errors are fine, a panic or a broken invariant fails the test (and
//! prints the input's length and first bytes).

use tvm_runtime::fuzzing::{Corpus, Target};

fn run(target: Target, iterations: u64) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let corpus = Corpus::load(target, &dir);
    assert!(corpus.seeds.len() >= 3, "{}: only {} seeds", target.name(), corpus.seeds.len());
    match corpus.campaign(iterations, 7) {
        Ok((_, accepted)) => assert!(accepted > 0, "{}: no mutated input was accepted", target.name()),
        Err(input) => panic!(
            "{}: reader panicked on {} bytes: {:02x?}",
            target.name(),
            input.len(),
            &input[..input.len().min(64)]
        ),
    }
}

#[test]
fn params_reader() {
    run(Target::Params, 3000);
}

#[test]
fn graph_reader() {
    run(Target::Graph, 3000);
}

#[test]
fn module_blob_reader() {
    run(Target::Blob, 3000);
}

#[test]
fn rpc_handshake_reader() {
    run(Target::Handshake, 3000);
}

#[test]
fn rpc_tracker_replies() {
    run(Target::Tracker, 3000);
}

#[test]
fn rpc_archive_reader() {
    run(Target::Tar, 3000);
}

#[test]
fn vm_bytecode_reader() {
    run(Target::Vm, 3000);
}
