//! The committed C header must be what cbindgen generates from the current sources.

#[test]
fn committed_header_matches_the_sources() {
    let generated = std::fs::read_to_string(env!("TVM_RT_GENERATED_HEADER")).unwrap();
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/tvm_runtime.h")).unwrap();
    assert!(
        generated == committed,
        "include/tvm_runtime.h is stale: regenerate it with `TVM_RT_WRITE_HEADER=1 cargo build`"
    );
}
