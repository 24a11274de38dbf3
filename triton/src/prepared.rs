//! A graph build's weights as a prepared-params file, mapped: the weights and what the build's
//! weight-only operators derive from them (in the kernels' layouts), computed once per content and
//! then mapped by every load of the model, in this server or another. The derived weights are
//! read in place; raw weights that only fed them are never touched, so they cost no resident
//! memory; the pages are the page cache's, shared by every process that maps the file.
//!
//! The files live in a folder of this user's own, as the Python package keeps them (its
//! `serve/_prepared.py`): `TVMRT_PREPARED_DIR`, else `<tmp>/tvmrt-prepared-<uid>`, made 0700 and
//! refused when it is a link, another user's, or writable by others (a file planted there would
//! be mapped as weights). A file is named by a digest of the library, graph and params it was
//! made from; it is written whole (a new file renamed over), never in place, which is what
//! mapping it needs.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::tensor::FileMap;
use tvm_runtime::{Error, Result};

/// The folder of prepared files: made if missing, checked to be this user's alone.
fn folder() -> Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("TVMRT_PREPARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("tvmrt-prepared-{uid}")),
    };
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(Error::io(dir.display().to_string(), e));
        }
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    let why = if !meta.file_type().is_dir() {
        Some("not a folder (a link, or a file)".to_string())
    } else if meta.uid() != uid {
        Some(format!("owned by user {}, not this one ({uid})", meta.uid()))
    } else if meta.permissions().mode() & 0o022 != 0 {
        Some(format!("writable by others (mode {:o})", meta.permissions().mode() & 0o7777))
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::value(format!(
            "the prepared-params folder {} is {why}: weights found there could be anyone's (choose another with \
             TVMRT_PREPARED_DIR, or set the model's parameter prepare_weights to \"false\")",
            dir.display()
        ))),
        None => Ok(dir),
    }
}

/// The prepared file of a build made from `lib_path`, `graph_json` and `params`, made by
/// `prepare` when missing.
pub fn file_for(
    lib_path: &Path,
    graph_json: &str,
    params: &[u8],
    prepare: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<PathBuf> {
    let lib = std::fs::read(lib_path).map_err(|e| Error::io(lib_path.display().to_string(), e))?;
    let digest = tvm_runtime::digest::of_parts([
        ("backend", env!("CARGO_PKG_VERSION").as_bytes()),
        ("library", lib.as_slice()),
        ("graph", graph_json.as_bytes()),
        ("params", params),
    ]);
    let stem = lib_path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let path = folder()?.join(format!("{stem}-{digest:016x}.tvmrt-prepared.params"));
    if !path.is_file() {
        tvm_runtime::files::store(&path, &prepare()?)?;
    }
    Ok(path)
}

/// Maps `path` (to be loaded by every executor of the build: `load_params_mapped`).
pub fn map(path: &Path) -> Result<Arc<FileMap>> {
    // SAFETY: the file is in this user's private folder and is only ever replaced whole (a new
    // file renamed over it), never written in place or truncated, so the mapping's pages stay
    // what they were for as long as it lives.
    unsafe { FileMap::open(&path.to_string_lossy()) }
}

/// Loads the mapped file into `ex`. Returns why its derived weights are not used, if they are
/// not (a file damaged or made from other weights: it then loads as the plain params it is).
pub fn load(ex: &GraphExecutor, map: &Arc<FileMap>) -> Result<Option<String>> {
    ex.load_params_mapped(map)?;
    // The load read every weight (checking them against the file's stamp); the raw weights only
    // the folded operators read need not stay resident.
    map.release_resident();
    Ok(ex.prepared_params_use().and_then(|u| u.strip_prefix("not used: ").map(str::to_string)))
}
