//! The map of where `unsafe` lives, in the crate's documentation (`src/lib.rs`), is kept true by
//! this test rather than by memory: every file it names has unsafe code, and no other file does.

mod common;

use common::sources::rust_files;
use std::collections::BTreeSet;
use std::path::Path;

/// Whether the file has unsafe code: an unsafe block, function, impl or trait (not an
/// `unsafe extern "C" fn(...)` pointer type, not comments).
fn has_unsafe_code(text: &str) -> bool {
    text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")).any(|line| {
        let mut rest = line;
        while let Some(at) = rest.find("unsafe") {
            let before = rest[..at].chars().last();
            let after = rest[at + "unsafe".len()..].trim_start();
            rest = &rest[at + "unsafe".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || after.starts_with('_') {
                continue;
            }
            if after.starts_with('{')
                || after.starts_with("fn ")
                || after.starts_with("impl")
                || after.starts_with("trait")
            {
                return true;
            }
            // `unsafe extern "C" fn name(` defines a function; `unsafe extern "C" fn(` is a type.
            if let Some(f) = after.strip_prefix("extern \"C\" fn") {
                if !f.trim_start().starts_with('(') {
                    return true;
                }
            }
        }
        false
    })
}

#[test]
fn the_unsafe_map_in_lib_rs_names_exactly_the_files_with_unsafe_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let section = lib.split("//! ## Where `unsafe` lives").nth(1).expect("the map's heading in src/lib.rs");
    let section = section.split("//! The formats").next().unwrap();
    let named: Vec<&str> = section.split('`').skip(1).step_by(2).filter(|t| t.starts_with("src/")).collect();
    assert!(!named.is_empty());

    let files = rust_files(&root.join("src"));
    let rel = |p: &Path| p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
    let covered = |f: &str| named.iter().any(|n| if n.ends_with('/') { f.starts_with(n) } else { f == *n });
    let with_unsafe: BTreeSet<String> =
        files.iter().filter(|p| has_unsafe_code(&std::fs::read_to_string(p).unwrap())).map(|p| rel(p)).collect();
    let unlisted: Vec<&String> = with_unsafe.iter().filter(|f| !covered(f)).collect();
    assert!(unlisted.is_empty(), "unsafe code in files the map in src/lib.rs does not name: {unlisted:?}");
    let stale: Vec<&&str> = named
        .iter()
        .filter(|n| !with_unsafe.iter().any(|f| if n.ends_with('/') { f.starts_with(**n) } else { f == **n }))
        .collect();
    assert!(stale.is_empty(), "the map in src/lib.rs names files without unsafe code: {stale:?}");
}

#[test]
fn the_scanner_tells_unsafe_code_from_words_and_types() {
    assert!(has_unsafe_code("    let x = unsafe { *p };"));
    assert!(has_unsafe_code("pub unsafe fn f() {}"));
    assert!(has_unsafe_code("unsafe impl Send for T {}"));
    assert!(has_unsafe_code("pub unsafe extern \"C\" fn TVMFuncFree(f: *mut c_void) -> i32 {"));
    assert!(!has_unsafe_code("    pub deleter: Option<unsafe extern \"C\" fn(*mut T)>,"));
    assert!(!has_unsafe_code("// SAFETY: unsafe { is in a comment"));
    assert!(!has_unsafe_code("#![forbid(unsafe_code)]"));
    assert!(!has_unsafe_code("let s = \"not_unsafe_at_all\";"));
}
