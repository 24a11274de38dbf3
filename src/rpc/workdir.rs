//! The functions a server program provides over a session's work directory, as upstream's
//! servers do (`tvm.rpc.server.workpath`, `load_module`, `listdir`; `upload`, `download` and
//! `remove` are the runtime's own, over `workpath`), for a process that serves one session in a
//! directory of its own: [`serve_in`] confines every path the runtime opens for a caller to that
//! directory (`crate::files`), so neither these functions nor the globals that take a path
//! (`runtime.ModuleLoadFromFile`, `runtime.LoadParamsFromFile`, `runtime.SaveParamsToFile`, an
//! executor's `load_params_from_file`, `tvmrt.opencl.SetProgramCache`, ...) reach outside it,
//! through `..`, an absolute path, or a link.
//!
//! `load_module` links object files on the device (`export_library` writes a `.o`, or a `.tar` of
//! them, gzip-compressed by TVM's `tar` helper, for cross builds without a cross compiler) with
//! the system's C compiler. Archives are unpacked here by entry type (`tar`), never by the
//! system's `tar`.

#![forbid(unsafe_code)]

use super::tar;
use crate::error::{Error, Result};
use crate::files;
use crate::packed::{registry, PackedFunc, RetValue};
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

/// The most an archive may unpack to: a gzip stream that inflates past it is refused.
const MAX_UNPACKED: u64 = 1 << 30;

/// Confines this process's files to `work` and registers the work directory's functions there.
pub fn serve_in(work: &Path) -> Result<()> {
    files::confine(work)?;
    let root = files::confinement().expect("confined just now").to_path_buf();
    let r = root.clone();
    let path_of = PackedFunc::native(move |a| Ok(RetValue::Str(workpath(&r, a.str(0)?)?.display().to_string())));
    let r = root.clone();
    let load = PackedFunc::native(move |a| {
        let so = link_if_needed(&workpath(&r, a.str(0)?)?)?;
        crate::library::load_file(&so.display().to_string(), "").map(Into::into)
    });
    let r = root;
    let listdir = PackedFunc::native(move |a| {
        let dir = if a.is_empty() || a.str(0)?.is_empty() { r.clone() } else { workpath(&r, a.str(0)?)? };
        Ok(RetValue::Str(files::list(&dir)?.iter().map(|p| format!("{},", p.display())).collect()))
    });
    registry::register("tvm.rpc.server.workpath", path_of, true)?;
    registry::register("tvm.rpc.server.load_module", load, true)?;
    registry::register("tvm.rpc.server.listdir", listdir, true)
}

/// The path in the work directory `root` of a name a client gave: relative, or absolute inside
/// the directory, with no `..` (what it names is resolved, links refused, when it is used).
pub fn workpath(root: &Path, path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    let rel = if p.is_absolute() { p.strip_prefix(root).unwrap_or(Path::new("/")) } else { p };
    if path.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(Error::value(format!("'{path}' is not a path inside the server's work directory")));
    }
    Ok(root.join(rel))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().map_err(|e| Error::tvm(format!("{:?}: {e}", cmd.get_program())))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::tvm(format!("{:?} failed: {}", cmd.get_program(), String::from_utf8_lossy(&out.stderr))))
    }
}

/// A shared library for `path`: itself for `.so`; object files (`.o`, or a `.tar` of them)
/// linked with the system's C compiler into `<path without extension>.so`.
fn link_if_needed(path: &Path) -> Result<PathBuf> {
    let objects = match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "o" => vec![files::existing_file(path)?],
        "tar" => unpack(path)?,
        _ => return Ok(path.to_path_buf()),
    };
    let so = path.with_extension("so");
    // The compiler writes the output by name: whatever is there goes first (a link, the link).
    if files::existing_file(&so).is_ok() {
        files::remove(&so)?;
    }
    files::directory(so.parent().unwrap_or(path), false)?;
    run(Command::new("cc").arg("-shared").arg("-fPIC").arg("-o").arg(&so).args(&objects))?;
    Ok(so)
}

/// Unpacks the archive at `path` into `<path without extension>.parts` (emptied first); returns
/// its object files, by name.
fn unpack(path: &Path) -> Result<Vec<PathBuf>> {
    let bytes = files::read(path)?;
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) { gunzip(&bytes, MAX_UNPACKED)? } else { bytes };
    let members = tar::entries(&bytes).map_err(|e| e.context(format!("'{}'", path.display())))?;
    let dir = path.with_extension("parts");
    if files::directory(&dir, false).is_ok() {
        files::remove(&dir)?;
    }
    files::directory(&dir, true)?;
    let mut objects = Vec::new();
    for m in &members {
        let to = dir.join(&m.name);
        match m.kind {
            tar::Kind::Dir => {
                files::directory(&to, true)?;
            }
            tar::Kind::File => {
                files::write_whole_in_new_dirs(&to, m.data)?;
                if to.extension().is_some_and(|e| e == "o") {
                    objects.push(files::existing_file(&to)?);
                }
            }
        }
    }
    objects.sort();
    Ok(objects)
}

/// Inflates a gzip stream with the system's `gzip` over pipes (it touches no file), refusing
/// one that inflates past `limit` bytes (gzip stopped at once, not left blocked on a full pipe).
fn gunzip(bytes: &[u8], limit: u64) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::tvm(format!("gzip: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut out = Vec::new();
    let read = child.stdout.take().expect("piped").take(limit + 1).read_to_end(&mut out);
    if read.is_err() || out.len() as u64 > limit {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| Error::tvm(format!("gzip: {e}")))?;
    let _ = feeder.join();
    if out.len() as u64 > limit {
        return Err(Error::value(format!("an archive that unpacks to more than {limit} bytes")));
    }
    read.map_err(|e| Error::tvm(format!("gzip: {e}")))?;
    if !status.success() {
        let mut err = String::new();
        let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
        return Err(Error::value(format!("a compressed archive gzip cannot read: {}", err.trim())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_paths_stay_inside_the_work_directory() {
        let w = Path::new("/tmp/w");
        assert_eq!(workpath(w, "lib.so").unwrap(), Path::new("/tmp/w/lib.so"));
        assert_eq!(workpath(w, "a/./b.so").unwrap(), Path::new("/tmp/w/a/./b.so"));
        assert_eq!(workpath(w, "/tmp/w/lib.so").unwrap(), Path::new("/tmp/w/lib.so"), "workpath's own answer");
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "a/..", "/tmp/w/../x", "/tmp/wx/lib.so"] {
            assert!(workpath(w, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gzip_streams_inflate_and_bad_ones_are_errors() {
        let packed = gzip(b"hello tar");
        assert_eq!(gunzip(&packed, MAX_UNPACKED).unwrap(), b"hello tar");
        assert!(gunzip(&packed[..packed.len() / 2], MAX_UNPACKED)
            .unwrap_err()
            .to_string()
            .contains("gzip cannot read"));
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = Command::new("gzip").arg("-c").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdin = gz.stdin.take().unwrap();
        let input = bytes.to_vec();
        let feeder = std::thread::spawn(move || stdin.write_all(&input).unwrap());
        let packed = gz.wait_with_output().unwrap().stdout;
        feeder.join().unwrap();
        packed
    }

    #[test]
    fn a_stream_inflating_past_the_limit_is_refused_and_gzip_stopped() {
        let packed = gzip(&[0; 4096]);
        assert_eq!(gunzip(&packed, 4096).unwrap(), [0; 4096], "exactly the limit");
        let e = gunzip(&packed, 4095).unwrap_err().to_string();
        assert!(e.contains("more than 4095 bytes"), "{e}");
        // Far past a pipe's buffer: gzip, blocked writing, must be stopped for the call to return.
        let bomb = gzip(&vec![0; 64 << 20]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(gunzip(&bomb, 4096).map_err(|e| e.to_string())));
        let e = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("gunzip returned").unwrap_err();
        assert!(e.contains("more than 4096 bytes"), "{e}");
    }
}
