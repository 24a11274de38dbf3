//! Generates the C header from the sources and gives the cdylib upstream's soname.
//! The header is written to OUT_DIR; the committed copy in include/ is checked against it by
//! tests/header.rs, and refreshed with `TVM_RT_WRITE_HEADER=1 cargo build`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=TVM_RT_WRITE_HEADER");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtvm_runtime.so");

    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("tvm_runtime.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate() {
        Ok(bindings) => {
            bindings.write_to_file(&out);
            if std::env::var_os("TVM_RT_WRITE_HEADER").is_some() {
                bindings.write_to_file(crate_dir.join("include/tvm_runtime.h"));
            }
        }
        Err(e) => panic!("cbindgen failed: {e}"),
    }
    println!("cargo:rustc-env=TVM_RT_GENERATED_HEADER={}", out.display());
}
