//! The files of `src/` (and of the tool's and the Triton backend's `src/`) import each other
//! without cycles, at the finest grain: each file is a
//! module; an import is any `crate::...` or `super::...` path in its code (unit tests aside),
//! resolved to the deepest file it names. The order of the top-level modules is
//! docs/ARCHITECTURE.md's, checked by `tests/layers.rs`.

mod common;

use common::sources::{circle, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("executor::plan") -> source text, for every file under `src/`.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Unit tests (at the end of a file) may reach anywhere.
        let code =
            match text.find("#[cfg(test)]\nmod tests").or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests")) {
                Some(at) => text[..at].to_string(),
                None => text,
            };
        out.insert(parts.join("::"), code);
    }
    out
}

/// The paths after `prefix` in `code` (`crate::a::b::Name` gives "a::b::Name"), with `{a, b}`
/// groups expanded one level.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        let path = path.trim_end_matches(':').to_string();
        if let Some(group) = rest[path.len()..].strip_prefix("::{") {
            for item in group.split('}').next().unwrap().split(',') {
                let item = item.trim().split("::").next().unwrap().split(' ').next().unwrap();
                if !item.is_empty() && item != "self" {
                    out.push(if path.is_empty() { item.to_string() } else { format!("{path}::{item}") });
                }
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

/// The import edges among the files of the crate whose sources are `src` (its root file `root`).
fn edges_of(src: &Path, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|k| parts[..k].join("::")).find(|m| mods.contains_key(m))
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, code) in &mods {
        if name == root {
            continue;
        }
        let is_dir_module = src.join(name.replace("::", "/")).join("mod.rs").exists();
        let parent: Vec<&str> = name.split("::").collect();
        let base = if is_dir_module { &parent[..parent.len() - 1] } else { &parent[..parent.len().saturating_sub(1)] };
        let mut targets: Vec<String> = paths_after(code, "crate::");
        targets.extend(paths_after(code, "super::").into_iter().map(|p| {
            let mut b: Vec<&str> = base.to_vec();
            if is_dir_module {
                b = parent[..parent.len().saturating_sub(1)].to_vec();
            }
            b.push(&p);
            b.join("::")
        }));
        for t in targets {
            if let Some(t) = resolve(&t) {
                let related = t == *name || t.starts_with(&format!("{name}::")) || name.starts_with(&format!("{t}::"));
                if !related && t != root {
                    edges.entry(name.clone()).or_default().insert(t);
                }
            }
        }
    }
    edges
}

#[test]
fn src_modules_import_each_other_without_cycles() {
    let edges = edges_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), "lib");
    if let Some(cycle) = circle(&edges) {
        panic!("an import cycle among src/ modules: {}", cycle.join(" -> "));
    }
    // The check sees imports at all: the executor's plan imports the graph.
    assert!(edges["executor::plan"].contains("graph"), "{:?}", edges.get("executor::plan"));
}

/// The tool's and the Triton backend's files likewise (the tool's VM and AOT commands once read
/// each other).
#[test]
fn the_faces_modules_import_each_other_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, file) in [("tvmrt/src", "main"), ("triton/src", "lib")] {
        let edges = edges_of(&root.join(dir), file);
        if let Some(cycle) = circle(&edges) {
            panic!("an import cycle among {dir} modules: {}", cycle.join(" -> "));
        }
        assert!(!edges.is_empty(), "{dir}: no imports seen");
    }
}
