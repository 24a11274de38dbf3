//! The tool exports the runtime's C API from its executable (tvmrt/dynamic.list): model
//! libraries built as system libraries call it by name. A linker without `--dynamic-list` (zig's,
//! which builds the release wheels: TVMRT_EXPORT_DYNAMIC=all) exports every symbol instead.
fn main() {
    let list = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("dynamic.list");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=TVMRT_EXPORT_DYNAMIC");
    if std::env::var("TVMRT_EXPORT_DYNAMIC").is_ok_and(|v| v == "all") {
        println!("cargo:rustc-link-arg-bins=-rdynamic");
    } else {
        println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={}", list.display());
    }
}
