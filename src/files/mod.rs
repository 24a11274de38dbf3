//! Files a caller names, and files written whole.
//!
//! Every path a caller hands the runtime to open, write, list or remove (a library to load, a
//! params file to read, map or save, the RPC work directory's uploads and downloads, the OpenCL
//! program cache's folder) goes through this module. In an ordinary process that is the path as
//! given. In a process serving RPC sessions ([`confine`]), every such path must resolve beneath
//! the session's directory without following a link ([`beneath`]): a relative path is taken from
//! that directory, an absolute one must lie inside it, and anything else is refused with a
//! message before a byte is touched.
//!
//! Files are written whole: into a new file of an unpredictable name beside the target, created
//! exclusively (never an existing file or a link someone planted), then renamed over it, so
//! readers, and processes that mapped the old file (a loaded library, mapped params), see the old
//! bytes or the new ones, never a file cut short or changed under them.

pub mod beneath;

use crate::error::{Error, Result};
use beneath::Root;
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static CONFINED: OnceLock<Root> = OnceLock::new();

/// Confines every path a caller names, for the rest of the process, to `dir` (which must exist).
/// For a process that serves RPC sessions: once confined, a process stays so (a second call
/// with another directory is an error).
pub fn confine(dir: &Path) -> Result<()> {
    let root = Root::open(dir)?;
    let canonical = root.path().to_path_buf();
    let set = CONFINED.get_or_init(|| root);
    if set.path() != canonical {
        return Err(Error::value(format!("files are already confined to {}", set.path().display())));
    }
    Ok(())
}

/// The directory paths are confined to, if any.
pub fn confinement() -> Option<&'static Path> {
    CONFINED.get().map(Root::path)
}

/// The bytes of the file at `path`.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    match CONFINED.get() {
        Some(root) => root.read(path),
        None => std::fs::read(path).map_err(|e| Error::io(path.display().to_string(), e)),
    }
}

/// The path of the existing file `path`, for what can only take a path (`dlopen`, a mapping, a
/// compiler): when confined, resolved beneath the directory, a regular file reached through no
/// link.
pub fn existing_file(path: &Path) -> Result<PathBuf> {
    match CONFINED.get() {
        Some(root) => root.file(path),
        None => Ok(path.to_path_buf()),
    }
}

/// The path of directory `path`, made (with its parents) when `create`: when confined, resolved
/// beneath the directory through no link.
pub fn directory(path: &Path, create: bool) -> Result<PathBuf> {
    match CONFINED.get() {
        Some(root) => root.dir(path, create),
        None => {
            if create {
                std::fs::create_dir_all(path).map_err(|e| Error::io(path.display().to_string(), e))?;
            }
            Ok(path.to_path_buf())
        }
    }
}

/// Writes `bytes` to the file a caller named, whole (see the module's documentation).
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    match CONFINED.get() {
        Some(root) => root.write_whole(path, bytes, false),
        None => store(path, bytes),
    }
}

/// Writes `bytes` to `path` whole, with the directories on the way made when missing.
pub fn write_whole_in_new_dirs(path: &Path, bytes: &[u8]) -> Result<()> {
    match CONFINED.get() {
        Some(root) => root.write_whole(path, bytes, true),
        None => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent.display().to_string(), e))?;
            }
            store(path, bytes)
        }
    }
}

/// Removes the file a caller named, or the directory with everything in it (a link: the link).
pub fn remove(path: &Path) -> Result<()> {
    if let Some(root) = CONFINED.get() {
        return root.remove(path);
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let removed = if meta.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    removed.map_err(|e| Error::io(path.display().to_string(), e))
}

/// The paths in the directory a caller named, sorted.
pub fn list(path: &Path) -> Result<Vec<PathBuf>> {
    if let Some(root) = CONFINED.get() {
        return root.list(path);
    }
    let entries = std::fs::read_dir(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    Ok(paths)
}

/// Writes `bytes` to a file the runtime itself chose the place of (its caches), whole; never
/// confined.
pub fn store(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().unwrap_or(OsStr::new("file"));
    let mut attempt = 0;
    let (temp, mut file) = loop {
        let temp = path.with_file_name(temp_name(name));
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&temp) {
            Ok(file) => break (temp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(Error::io(path.display().to_string(), e)),
        }
    };
    let written = file.write_all(bytes).and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::io(path.display().to_string(), e));
    }
    Ok(())
}

/// A temporary name beside `name`: hidden, and unpredictable (a keyed hash the process seeds
/// from the system's randomness, over a counter), so nobody can plant a file or link under it in
/// advance; it is created exclusively all the same.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = KEYS.get_or_init(std::collections::hash_map::RandomState::new).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".{:016x}.tmp", h.finish()));
    temp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_hidden_distinct_and_not_guessable_from_the_pid() {
        let a = temp_name(OsStr::new("lib.so"));
        let b = temp_name(OsStr::new("lib.so"));
        assert_ne!(a, b);
        let a = a.to_string_lossy().into_owned();
        assert!(a.starts_with(".lib.so.") && a.ends_with(".tmp"), "{a}");
        assert!(!a.contains(&std::process::id().to_string()), "{a}");
    }

    #[test]
    fn a_file_is_written_whole_over_a_planted_temp_file() {
        let dir = std::env::temp_dir().join(format!("tvmrt-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.bin");
        store(&target, b"first").unwrap();
        store(&target, b"second").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second");
        write_whole_in_new_dirs(&dir.join("a/b/c.bin"), b"deep").unwrap();
        assert_eq!(read(&dir.join("a/b/c.bin")).unwrap(), b"deep");
        let names: Vec<_> = list(&dir).unwrap();
        assert_eq!(names, vec![dir.join("a"), dir.join("out.bin")], "no temporary file left behind");
        remove(&dir.join("a")).unwrap();
        remove(&target).unwrap();
        assert!(list(&dir).unwrap().is_empty());
        std::fs::remove_dir(&dir).unwrap();
    }

    /// Two threads writing one entry at once (the program cache's case): each writes its own
    /// temporary file, and the entry ends whole, one writer's or the other's.
    #[test]
    fn concurrent_writers_of_one_file_never_mix() {
        let dir = std::env::temp_dir().join(format!("tvmrt-files-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("entry");
        let writers: Vec<_> = (0..4u8)
            .map(|i| {
                let target = target.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        store(&target, &vec![i; 1 << 16]).unwrap();
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        let bytes = std::fs::read(&target).unwrap();
        assert_eq!(bytes.len(), 1 << 16);
        assert!(bytes.iter().all(|b| *b == bytes[0]));
        assert_eq!(list(&dir).unwrap(), vec![target]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
