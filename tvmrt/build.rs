//! The tool exports the runtime's C API from its executable (tvmrt/dynamic.list): model
//! libraries built as system libraries call it by name.
fn main() {
    let list = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("dynamic.list");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={}", list.display());
}
