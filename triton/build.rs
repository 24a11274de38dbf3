//! The backend's test executables export the one tvm-ffi name TVM 0.22+ model libraries import
//! directly (the runtime defines it), as the backend's own library does: the tests load those
//! libraries into the test process itself.
fn main() {
    let list = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../tests/ffi_exports.list");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rustc-link-arg-tests=-Wl,--dynamic-list={}", list.display());
}
