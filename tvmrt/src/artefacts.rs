//! Where a model folder keeps its artefacts: the names TVM's tutorials, tvmc and DLR give them, and
//! the params file found by TVM's magic number whatever its name. The same rule as the Python
//! package's (`python/tvmrt/_artifacts.py`) and so Serve's: a folder means one thing everywhere.

use std::path::{Path, PathBuf};
use tvm_runtime::error::{Error, Result};

/// Library names, in the order they are preferred; else the folder's one `.so`.
pub const LIBRARY_NAMES: [&str; 3] = ["lib.so", "deploy_lib.so", "mod.so"];
/// Graph names, in the order they are preferred.
pub const GRAPH_NAMES: [&str; 2] = ["graph.json", "deploy_graph.json"];
/// Params names, in the order they are preferred; else the folder's one file of TVM's params magic.
pub const PARAMS_NAMES: [&str; 3] = ["params.bin", "params", "deploy_param.params"];

/// The files of `dir` (not its folders), in name order.
pub fn files_of(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir.display().to_string(), e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

fn has_extension(p: &Path, ext: &str) -> bool {
    p.extension().is_some_and(|e| e == ext)
}

/// The operator library of a model folder.
pub fn library(dir: &Path) -> Result<PathBuf> {
    if let Some(p) = LIBRARY_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file()) {
        return Ok(p);
    }
    let so: Vec<PathBuf> = files_of(dir)?.into_iter().filter(|p| has_extension(p, "so")).collect();
    match so.as_slice() {
        [one] => Ok(one.clone()),
        _ => {
            let listed: Vec<String> =
                so.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
            Err(Error::value(format!(
                "no operator library in {}: no {} and {} other .so files{} (--lib names one)",
                dir.display(),
                LIBRARY_NAMES.join(" / "),
                so.len(),
                if listed.is_empty() { String::new() } else { format!(" ({})", listed.join(", ")) }
            )))
        }
    }
}

/// The graph JSON of a model folder, if it has one.
pub fn graph(dir: &Path) -> Option<PathBuf> {
    GRAPH_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Whether `path` starts with TVM's params magic number.
pub fn is_params_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && u64::from_le_bytes(head) == tvm_runtime::params::NDARRAY_LIST_MAGIC
}

/// The params file of a model folder: one of the usual names, else the one file of any name (not
/// a library or JSON) that starts with TVM's params magic number; several are an error naming them.
pub fn params(dir: &Path) -> Result<Option<PathBuf>> {
    if let Some(p) = PARAMS_NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file() && is_params_file(p)) {
        return Ok(Some(p));
    }
    let found: Vec<PathBuf> = files_of(dir)?
        .into_iter()
        .filter(|p| !has_extension(p, "so") && !has_extension(p, "json") && is_params_file(p))
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => {
            let names: Vec<String> =
                found.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
            Err(Error::value(format!(
                "{}: several params files ({}): name the one to use with --params",
                dir.display(),
                names.join(", ")
            )))
        }
    }
}

/// What [`params`] looks for, for a message saying the weights are missing.
pub fn params_looked_for(dir: &Path) -> String {
    format!("{}, or any one file starting with TVM's params magic number in {}", PARAMS_NAMES.join(", "), dir.display())
}
