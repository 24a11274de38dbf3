//! What a model's version folder holds: one artefact folder (its files directly inside), or
//! several (one per build: batch sizes, sequence lengths) as its subfolders. An artefact folder
//! is read by the rules the tool and the package use (`tvmrt/src/artefacts.rs`): a graph model
//! (`lib.so` alone, or with a graph JSON and a params file of any name), a VM model (a Relay VM
//! executable's `export_library`, or its bytecode beside the kernel library, with a DLR-style
//! `.meta` recording its tensors; a Relax executable's `export_library`, TVM 0.19 to 0.27) or an
//! AOT executor artefact.

use std::path::{Path, PathBuf};
use tvm_runtime::{Error, Result};

// The tool's own rules, compiled here too (one text for both faces).
#[path = "../../tvmrt/src/artefacts.rs"]
#[allow(dead_code)]
mod rules;

/// The module blob's type keys as `export_library` writes them (length, then key).
const VM_MARK: &[u8] = b"\x0c\x00\x00\x00\x00\x00\x00\x00VMExecutable";
/// A Relax executable's type key, in whichever of its three blob layouts.
const RELAX_MARKS: [&[u8]; 2] = [b"relax.VMExecutable", b"relax.Executable"];
const AOT_MARK: &[u8] = b"\x12\0\0\0\0\0\0\0AotExecutorFactory";
/// The first word of a Relay VM executable's bytecode (`exe.save()`'s code).
const VM_MAGIC: u64 = 0xD225_DE2F_4214_151D;

/// One artefact folder's files, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Artefact {
    Graph { lib: PathBuf, graph: Option<PathBuf>, params: Option<PathBuf> },
    Vm { lib: PathBuf, code: Option<PathBuf>, meta: Option<PathBuf> },
    Aot { lib: PathBuf },
}

fn contains(path: &Path, mark: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|b| b.windows(mark.len()).any(|w| w == mark))
}

fn is_library(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "so")
}

/// Whether `dir` holds an artefact (an operator library) directly.
pub fn is_artefact_folder(dir: &Path) -> bool {
    rules::files_of(dir).is_ok_and(|f| f.iter().any(|p| is_library(p)))
}

/// The artefact in `dir`.
pub fn locate(dir: &Path) -> Result<Artefact> {
    let files = rules::files_of(dir)?;
    let vm_library = |p: &&PathBuf| is_library(p) && [VM_MARK].iter().chain(&RELAX_MARKS).any(|m| contains(p, m));
    if let Some(lib) = files.iter().find(vm_library) {
        return Ok(Artefact::Vm { lib: lib.clone(), code: None, meta: meta_of(&files) });
    }
    let is_code = |p: &&PathBuf| {
        !is_library(p)
            && std::fs::read(p)
                .is_ok_and(|b| b.len() >= 8 && u64::from_le_bytes(b[..8].try_into().unwrap()) == VM_MAGIC)
    };
    if let Some(code) = files.iter().find(is_code) {
        return Ok(Artefact::Vm { lib: rules::library(dir)?, code: Some(code.clone()), meta: meta_of(&files) });
    }
    let lib = rules::library(dir)?;
    if contains(&lib, AOT_MARK) {
        return Ok(Artefact::Aot { lib });
    }
    Ok(Artefact::Graph { lib, graph: rules::graph(dir), params: rules::params(dir)? })
}

fn meta_of(files: &[PathBuf]) -> Option<PathBuf> {
    files.iter().find(|p| p.extension().is_some_and(|e| e == "meta")).cloned()
}

/// The builds of a version folder, named: the folder itself when it holds an artefact, else each
/// subfolder that does (in name order).
pub fn builds(version_dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    if !version_dir.is_dir() {
        return Err(Error::value(format!("{}: no such version folder", version_dir.display())));
    }
    if is_artefact_folder(version_dir) {
        let name = version_dir.file_name().map_or("1".into(), |n| n.to_string_lossy().into_owned());
        return Ok(vec![(name, version_dir.to_path_buf())]);
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(version_dir)
        .map_err(|e| Error::io(version_dir.display().to_string(), e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && is_artefact_folder(p))
        .collect();
    subs.sort();
    if subs.is_empty() {
        return Err(Error::value(format!(
            "{}: no artefact (no operator library .so in it or in a subfolder of it)",
            version_dir.display()
        )));
    }
    Ok(subs.into_iter().map(|p| (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), p)).collect())
}

/// A params file of names alone: what `share_params` reads to know which inputs to bind.
pub fn names_blob(names: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(tvm_runtime::params::NDARRAY_LIST_MAGIC.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((names.len() as u64).to_le_bytes());
    for n in names {
        b.extend((n.len() as u64).to_le_bytes());
        b.extend(n.as_bytes());
    }
    b.extend((names.len() as u64).to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
    }

    #[test]
    fn names_blob_reads_back() {
        let b = names_blob(&["w1", "bias"]);
        assert_eq!(tvm_runtime::params::parse_names(&b).unwrap(), vec!["w1", "bias"]);
    }

    #[test]
    fn a_folder_without_artefacts_is_named() {
        let e = builds(&fixture("no/such/folder")).unwrap_err().to_string();
        assert!(e.contains("no such version folder"), "{e}");
    }
}
