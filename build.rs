//! Generates the C header from the sources, gives the cdylib upstream's soname, and builds the C++
//! layer (`cxx/`) that C++ hosts link to: compiled with the `cc` crate, linked whole (rustc would
//! drop symbols nothing in Rust references) and made global by a second version script.
//! `TVM_RT_CXX_OLD_ABI=1` builds it for the old std::string ABI (hosts built against manylinux
//! wheels); the default is the new one.
//! The header is written to OUT_DIR; the committed copy in include/ is checked against it by
//! tests/header.rs, and refreshed with `TVM_RT_WRITE_HEADER=1 cargo build`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=TVM_RT_WRITE_HEADER");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtvm_runtime.so");
    // TVM 0.22+ kernels import TVMFFIErrorSetRaisedFromCStrParts by name: the integration test
    // executables export it, as libtvm_runtime.so and the tool do.
    let list = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("tests/ffi_exports.list");
    println!("cargo:rustc-link-arg-tests=-Wl,--dynamic-list={}", list.display());
    build_cxx();

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

fn build_cxx() {
    println!("cargo:rerun-if-changed=cxx");
    println!("cargo:rerun-if-changed=include/tvm_runtime.h");
    println!("cargo:rerun-if-env-changed=TVM_RT_CXX_OLD_ABI");
    let old_abi = std::env::var("TVM_RT_CXX_OLD_ABI").is_ok_and(|v| v == "1");
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // Every C++ file of the layer, by area (runtime.h declares what they share).
    let mut sources: Vec<PathBuf> = std::fs::read_dir(crate_dir.join("cxx"))
        .expect("cxx/")
        .map(|e| e.expect("a cxx/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cc"))
        .collect();
    sources.sort();
    cc::Build::new()
        .cpp(true)
        .files(&sources)
        .include(crate_dir.join("include"))
        .flag("-std=c++17")
        .flag("-fvisibility=hidden")
        .define("_GLIBCXX_USE_CXX11_ABI", if old_abi { "0" } else { "1" })
        .warnings(true)
        .extra_warnings(true)
        .cargo_metadata(false)
        .compile("tvmrt_cxx");
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=tvmrt_cxx");
    // The C++ runtime: libstdc++, whose layouts the Rust side mirrors (upstream's objects, as C++
    // hosts on Linux see them). Linked dynamically, unless TVM_RT_CXX_STATIC names the folder of
    // a libstdc++.a to link in (the release wheels, built for an old glibc: a newer libstdc++.so
    // than the oldest systems carry would be asked for otherwise).
    println!("cargo:rerun-if-env-changed=TVM_RT_CXX_STATIC");
    match std::env::var("TVM_RT_CXX_STATIC") {
        Ok(dir) if !dir.is_empty() => {
            println!("cargo:rerun-if-changed=cxx/static");
            cc::Build::new()
                .cpp(true)
                .file(crate_dir.join("cxx/static/glibc_compat.cc"))
                .cargo_metadata(false)
                .compile("tvmrt_glibc_compat");
            println!("cargo:rustc-link-lib=static:+whole-archive=tvmrt_glibc_compat");
            // Bundled for the crates linking this one (the tool), and named once more at the end
            // of the library's own link line: an archive only answers what precedes it.
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-lib=static=stdc++");
            println!("cargo:rustc-cdylib-link-arg={dir}/libstdc++.a");
        }
        _ => println!("cargo:rustc-link-lib=dylib=stdc++"),
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", crate_dir.join("cxx/exports.map").display());
    println!("cargo:rustc-env=TVM_RT_CXX_ABI={}", if old_abi { "old" } else { "new" });
}
