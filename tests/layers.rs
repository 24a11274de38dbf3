//! The layers of `src/`, as docs/ARCHITECTURE.md states them, checked against the crate's imports
//! at module granularity: a module uses only its own layer and the layers below, the top-level
//! modules use each other in no circle, every top-level module has its row, and no source file
//! grows past 600 lines.

mod common;

use common::sources::{circle, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const LONGEST_FILE: usize = 600;

/// The layer table: module name -> layer number.
fn stated_layers(doc: &str) -> BTreeMap<String, u32> {
    let mut layers = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | layer | modules | what |
        let (Some(number), Some(modules)) = (cells.get(1), cells.get(2)) else { continue };
        let Ok(number) = number.parse::<u32>() else { continue };
        for name in modules.split('`').skip(1).step_by(2) {
            assert!(layers.insert(name.to_string(), number).is_none(), "{name} has two rows in the layer table");
        }
    }
    layers
}

/// The top-level modules `src/lib.rs` declares.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) ")).unwrap_or(l);
            rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')).map(str::to_string)
        })
        .collect()
}

/// The module path of a file: `src/device/opencl/kernels.rs` is [device, opencl, kernels];
/// `mod.rs` is its folder's module.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap();
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file without its comments (line comments and doc comments; string contents kept).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l.split(" // ").next().unwrap_or(""),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file's code names: `crate::x`, `$crate::x`, `super::...::x` resolved
/// from the file's own module, and the names of a grouped `use crate::{x::..., y}`.
fn used_modules(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let bytes = code.as_bytes();
    let ident_end = |from: usize| {
        let mut end = from;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        end
    };
    let mut i = 0;
    while let Some(at) = code[i..].find("crate::").map(|a| a + i) {
        let preceded = at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let start = at + "crate::".len();
        i = start;
        if preceded {
            continue;
        }
        if bytes.get(start) == Some(&b'{') {
            // A group: the first segment of each item at depth one.
            let mut depth = 0;
            let mut item_start = true;
            let mut j = start;
            while j < bytes.len() {
                match bytes[j] {
                    b'{' => {
                        depth += 1;
                        item_start = depth == 1;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => item_start = true,
                    c if item_start && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                        let end = ident_end(j);
                        used.insert(code[j..end].to_string());
                        item_start = false;
                        j = end;
                        continue;
                    }
                    _ => {}
                }
                j += 1;
            }
            continue;
        }
        used.insert(code[start..ident_end(start)].to_string());
    }
    // `super::` chains, resolved from this file's module.
    let mut i = 0;
    while let Some(at) = code[i..].find("super::").map(|a| a + i) {
        let preceded =
            at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':');
        i = at + "super::".len();
        if preceded {
            continue;
        }
        let mut ups = 1;
        let mut rest = i;
        while code[rest..].starts_with("super::") {
            ups += 1;
            rest += "super::".len();
        }
        i = rest;
        if ups < path.len() {
            continue; // still inside the file's own top-level module
        }
        if ups == path.len() {
            let end = ident_end(rest);
            if end > rest {
                used.insert(code[rest..end].to_string());
            }
        }
    }
    used.remove("self");
    used
}

/// Edges of the top-level module graph and what breaks the stated order.
fn check(
    files: &[(Vec<String>, String)],
    layers: &BTreeMap<String, u32>,
) -> (Vec<String>, BTreeMap<String, BTreeSet<String>>) {
    let mut problems = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        let Some(top) = path.first() else { continue };
        let code = code_of(text);
        for used in used_modules(&code, path) {
            if &used == top || !layers.contains_key(&used) {
                continue;
            }
            graph.entry(top.clone()).or_default().insert(used.clone());
            let (from, to) = (layers[top], layers[&used]);
            if to > from {
                problems.push(format!(
                    "{}: `{top}` (layer {from}) uses `{used}` (layer {to}), a layer above it",
                    path.join("::")
                ));
            }
        }
    }
    (problems, graph)
}

fn crate_files() -> Vec<(Vec<String>, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    rust_files(&src)
        .iter()
        .map(|p| (module_path(p.strip_prefix(&src).unwrap()), std::fs::read_to_string(p).unwrap()))
        .collect()
}

fn table() -> BTreeMap<String, u32> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md")).unwrap();
    stated_layers(&doc)
}

#[test]
fn every_import_follows_the_stated_layers_and_none_goes_in_a_circle() {
    let layers = table();
    let (problems, graph) = check(&crate_files(), &layers);
    assert!(problems.is_empty(), "imports against docs/ARCHITECTURE.md:\n{}", problems.join("\n"));
    assert_eq!(circle(&graph), None, "top-level modules that use each other in a circle");
}

#[test]
fn the_table_names_every_top_level_module_once() {
    let layers = table();
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let declared = declared_modules(&lib);
    let stated: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(
        declared.difference(&stated).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "modules of src/lib.rs without a row in docs/ARCHITECTURE.md"
    );
    assert_eq!(
        stated.difference(&declared).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "rows of docs/ARCHITECTURE.md naming no module of src/lib.rs"
    );
}

#[test]
fn no_source_file_is_longer_than_600_lines() {
    let long: Vec<String> = crate_files()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > LONGEST_FILE)
        .map(|(path, text)| format!("{}: {} lines", path.join("::"), text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}

/// The checker itself notices each kind of tie the crate once had (put back in a copy of a file).
#[test]
fn the_checker_notices_a_tie_put_back() {
    let layers = table();
    let mut files = crate_files();
    let ties = [
        // The type table naming the profiling family's objects.
        (vec!["object", "types"], "use crate::profiling::objects::ReportObj;"),
        // The packed layer calling the C++ face.
        (vec!["packed", "function"], "use crate::{cxx::threading, error::Result};"),
        // The device layer taking the module layer's types (the OpenCL module where it was).
        (vec!["device", "opencl", "module"], "use crate::module::{Module, ModuleNode};"),
        // The executor reaching RPC.
        (vec!["executor", "debug"], "fn f() { let _ = crate::rpc::install; }"),
        // A `super::` path out of a top-level file.
        (vec!["tensor"], "use super::executor::Plan;"),
    ];
    for (path, line) in ties {
        let path: Vec<String> = path.into_iter().map(str::to_string).collect();
        files.push((path.clone(), line.to_string()));
        let (problems, _) = check(&files, &layers);
        assert!(problems.iter().any(|p| p.starts_with(&path.join("::"))), "not noticed: {line} in {path:?}");
        files.pop();
    }
    // And a circle within one layer.
    let mut graph = BTreeMap::new();
    graph.insert("files".to_string(), BTreeSet::from(["stream".to_string()]));
    graph.insert("stream".to_string(), BTreeSet::from(["files".to_string()]));
    assert!(circle(&graph).is_some());
    // Comments do not count.
    assert!(used_modules(&code_of("/// see crate::rpc\n// crate::executor"), &["device".into()]).is_empty());
}
