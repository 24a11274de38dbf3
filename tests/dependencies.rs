//! The runtime library depends on nothing only the command-line tool needs: hosts that link
//! `libtvm_runtime.so` carry no argument parser or archive code.

#[test]
fn the_runtime_crate_has_no_cli_only_dependency() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    let names: Vec<&str> =
        deps.lines().filter_map(|l| l.split('=').next()).map(str::trim).filter(|n| !n.is_empty()).collect();
    assert_eq!(names, ["libc", "libloading", "once_cell", "serde_json", "thiserror"]);
}
