//! Paths resolved beneath a directory, one component at a time, never following a link: the
//! walk opens each directory relative to the one before it (`openat` with `O_NOFOLLOW`), so a
//! symbolic link anywhere on the way, or a name that climbs out (`..`, an absolute path outside
//! the directory), is refused, and what is read, written, listed or removed is what the walk
//! found, through the descriptors it opened. This is the room of `files` that calls the system
//! directly.

use crate::error::{Error, Result};
use std::ffi::{CString, OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// How deep a tree [`Root::remove`] descends (a tree deeper than a path can name is not ours).
const MAX_DEPTH: usize = 256;

/// A directory whose paths are resolved beneath it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// The directory's canonical path (no links in it): what absolute paths are compared with and
    /// what resolved paths are reported under.
    path: PathBuf,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn c_name(name: &OsStr) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| Error::value(format!("a path with a NUL byte: {name:?}")))
}

/// `openat(dir, name, flags)`, always close-on-exec and never following a final link.
fn open_at(dir: RawFd, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated name; `dir` a descriptor of ours; the returned descriptor,
    // when valid, is owned by nobody else.
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOFOLLOW, mode as libc::c_uint) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor just opened, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What `name` in `dir` is, its own entry (a link is a link).
fn kind_at(dir: RawFd, name: &OsStr) -> std::io::Result<libc::mode_t> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: zeroed plain data the call fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated name, a descriptor of ours, a stat buffer of ours.
    if unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } < 0 {
        return Err(errno());
    }
    Ok(st.st_mode & libc::S_IFMT)
}

fn kind_of(fd: &OwnedFd) -> std::io::Result<libc::mode_t> {
    // SAFETY: zeroed plain data the call fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor of ours, a stat buffer of ours.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(errno());
    }
    Ok(st.st_mode & libc::S_IFMT)
}

/// The names in directory `dir` (not `.` and `..`).
fn names_in(dir: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    // fdopendir takes the descriptor it is given: hand it a duplicate.
    // SAFETY: a descriptor of ours; the duplicate is owned by the stream below.
    let dup = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(errno());
    }
    // SAFETY: `dup` is a directory descriptor no one else owns.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = errno();
        // SAFETY: still ours when fdopendir failed.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // The stream starts where the descriptor's offset is: at the start for a fresh one.
    // SAFETY: a stream just opened.
    unsafe { libc::rewinddir(stream) };
    let mut names = Vec::new();
    loop {
        // SAFETY: a live stream; the entry is read before the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir's entry holds a NUL-terminated name.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
        let name = OsStr::from_bytes(name.to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_os_string());
        }
    }
    // SAFETY: the stream (and `dup` with it) closed once.
    unsafe { libc::closedir(stream) };
    names.sort();
    Ok(names)
}

fn unlink_at(dir: RawFd, name: &OsStr, flags: libc::c_int) -> std::io::Result<()> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated name and a descriptor of ours.
    if unsafe { libc::unlinkat(dir, c.as_ptr(), flags) } < 0 {
        return Err(errno());
    }
    Ok(())
}

fn mkdir_at(dir: RawFd, name: &OsStr) -> std::io::Result<()> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated name and a descriptor of ours.
    if unsafe { libc::mkdirat(dir, c.as_ptr(), 0o755) } < 0 {
        return Err(errno());
    }
    Ok(())
}

fn rename_at(dir: RawFd, from: &OsStr, to: &OsStr) -> std::io::Result<()> {
    let bad = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let (f, t) = (CString::new(from.as_bytes()).map_err(|_| bad())?, CString::new(to.as_bytes()).map_err(|_| bad())?);
    // SAFETY: NUL-terminated names and a descriptor of ours.
    if unsafe { libc::renameat(dir, f.as_ptr(), dir, t.as_ptr()) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// How many names [`create_new`] tries: with unpredictable names, a collision is someone else's
/// file planted there, and a few of those in a row are an attack, not bad luck.
const CREATE_ATTEMPTS: usize = 9;

/// A new file in `dir`, made exclusively (never an existing file or a link) under the first free
/// name of up to [`CREATE_ATTEMPTS`] that `names` gives, with that name.
fn create_new(dir: RawFd, mut names: impl FnMut() -> OsString) -> std::io::Result<(OsString, OwnedFd)> {
    let mut attempt = 1;
    loop {
        let name = names();
        match open_at(dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o644) {
            Ok(fd) => return Ok((name, fd)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < CREATE_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Removes the tree under directory `dir` (its entries, not itself), descending by descriptor.
fn empty_tree(dir: &OwnedFd, depth: usize) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other("a tree too deep to remove"));
    }
    for name in names_in(dir)? {
        if kind_at(dir.as_raw_fd(), &name)? == libc::S_IFDIR {
            let sub = open_at(dir.as_raw_fd(), &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
            empty_tree(&sub, depth + 1)?;
            unlink_at(dir.as_raw_fd(), &name, libc::AT_REMOVEDIR)?;
        } else {
            // Files, and links themselves (never what they point at).
            unlink_at(dir.as_raw_fd(), &name, 0)?;
        }
    }
    Ok(())
}

impl Root {
    /// The directory at `path`, which must exist.
    pub fn open(path: &Path) -> Result<Root> {
        let canonical = path.canonicalize().map_err(|e| Error::io(path.display().to_string(), e))?;
        let c = c_name(canonical.as_os_str())?;
        // SAFETY: a NUL-terminated path; the descriptor, when valid, is owned by nobody else.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io(canonical.display().to_string(), errno()));
        }
        // SAFETY: a descriptor just opened, owned from here on.
        Ok(Root { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path: canonical })
    }

    /// The directory's canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names `path` walks through beneath the root: a relative path, or an absolute one inside
    /// the root's own path; `.` is skipped, `..` refused (it could only climb out or back). No
    /// names: the root itself.
    fn names<'a>(&self, path: &'a Path) -> Result<Vec<&'a OsStr>> {
        let outside = || Error::value(format!("'{}' is not a path inside {}", path.display(), self.path.display()));
        let rel = if path.is_absolute() { path.strip_prefix(&self.path).map_err(|_| outside())? } else { path };
        rel.components()
            .filter(|c| *c != Component::CurDir)
            .map(|c| match c {
                Component::Normal(n) => Ok(n),
                _ => Err(outside()),
            })
            .collect()
    }

    /// The directory `names` lead to, each step a directory that is not a link (made when
    /// missing, if `create`).
    fn walk(&self, names: &[&OsStr], create: bool, whole: &Path) -> Result<OwnedFd> {
        let mut dir = self.fd.try_clone().map_err(|e| Error::io(self.path.display().to_string(), e))?;
        for (i, name) in names.iter().enumerate() {
            let step = || self.path.join(names[..=i].iter().collect::<PathBuf>()).display().to_string();
            let opened = match open_at(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => mkdir_at(dir.as_raw_fd(), name)
                    .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
                    .and_then(|()| open_at(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)),
                other => other,
            };
            dir = opened.map_err(|e| self.refusal(whole, &step(), e))?;
        }
        Ok(dir)
    }

    /// The error for a step that failed: a link (or a file where a directory was needed) is
    /// refused by name, anything else is the system's error on the path.
    fn refusal(&self, whole: &Path, step: &str, e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::EMLINK) => Error::value(format!(
                "'{}' is not a path inside {}: {step} is a link or not a directory",
                whole.display(),
                self.path.display()
            )),
            _ => Error::io(step.to_string(), e),
        }
    }

    /// The directory holding `path`'s last name, and that name.
    fn parent_of<'a>(&self, path: &'a Path, create_dirs: bool) -> Result<(OwnedFd, &'a OsStr)> {
        let names = self.names(path)?;
        let (last, dirs) = names.split_last().ok_or_else(|| {
            Error::value(format!(
                "'{}' names the directory {} itself, not a file in it",
                path.display(),
                self.path.display()
            ))
        })?;
        Ok((self.walk(dirs, create_dirs, path)?, last))
    }

    /// The path the walk reached, under the root's canonical path.
    fn resolved(&self, names: &[&OsStr]) -> PathBuf {
        self.path.join(names.iter().collect::<PathBuf>())
    }

    /// A regular file beneath the root, opened for reading.
    fn open_file(&self, path: &Path) -> Result<std::fs::File> {
        let (dir, name) = self.parent_of(path, false)?;
        let whole = self.path.join(self.names(path)?.iter().collect::<PathBuf>()).display().to_string();
        // Non-blocking: a FIFO or device node (never made by these functions) must not hang the open.
        let fd = open_at(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .map_err(|e| self.refusal(path, &whole, e))?;
        match kind_of(&fd) {
            Ok(libc::S_IFREG) => Ok(std::fs::File::from(fd)),
            Ok(_) => Err(Error::value(format!("{whole} is not a regular file"))),
            Err(e) => Err(Error::io(whole, e)),
        }
    }

    /// The bytes of the regular file `path`.
    pub fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.open_file(path)?.read_to_end(&mut bytes).map_err(|e| Error::io(path.display().to_string(), e))?;
        Ok(bytes)
    }

    /// The resolved path of the regular file `path`, for what can only take a path (`dlopen`, a
    /// compiler): nothing on the way is a link, so the path names what the walk found.
    pub fn file(&self, path: &Path) -> Result<PathBuf> {
        self.open_file(path)?;
        Ok(self.resolved(&self.names(path)?))
    }

    /// The resolved path of directory `path` (made, with its parents, when `create`).
    pub fn dir(&self, path: &Path, create: bool) -> Result<PathBuf> {
        let names = self.names(path)?;
        self.walk(&names, create, path)?;
        Ok(self.resolved(&names))
    }

    /// Writes `bytes` to `path` whole: into a new file of an unpredictable name beside it (made
    /// exclusively: never an existing file or a link), then renamed over it. With
    /// `create_dirs`, missing directories on the way are made.
    pub fn write_whole(&self, path: &Path, bytes: &[u8], create_dirs: bool) -> Result<()> {
        let (dir, name) = self.parent_of(path, create_dirs)?;
        let shown = || self.resolved(&self.names(path).unwrap_or_default()).display().to_string();
        let (temp, fd) = create_new(dir.as_raw_fd(), || super::temp_name(name)).map_err(|e| Error::io(shown(), e))?;
        let written = std::fs::File::from(fd).write_all(bytes).and_then(|()| rename_at(dir.as_raw_fd(), &temp, name));
        if let Err(e) = written {
            let _ = unlink_at(dir.as_raw_fd(), &temp, 0);
            return Err(Error::io(shown(), e));
        }
        Ok(())
    }

    /// Removes `path`: a file or a link (the link itself), or a directory with everything in it.
    pub fn remove(&self, path: &Path) -> Result<()> {
        let (dir, name) = self.parent_of(path, false)?;
        let shown = self.resolved(&self.names(path)?).display().to_string();
        let removed = match kind_at(dir.as_raw_fd(), name) {
            Ok(libc::S_IFDIR) => open_at(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .and_then(|sub| empty_tree(&sub, 0))
                .and_then(|()| unlink_at(dir.as_raw_fd(), name, libc::AT_REMOVEDIR)),
            Ok(_) => unlink_at(dir.as_raw_fd(), name, 0),
            Err(e) => Err(e),
        };
        removed.map_err(|e| Error::io(shown, e))
    }

    /// The paths in directory `path` (the root itself for an empty path), sorted.
    pub fn list(&self, path: &Path) -> Result<Vec<PathBuf>> {
        let names = self.names(path)?;
        let dir = self.walk(&names, false, path)?;
        let base = self.resolved(&names);
        let listed = names_in(&dir).map_err(|e| Error::io(base.display().to_string(), e))?;
        Ok(listed.into_iter().map(|n| base.join(n)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fresh directory with `root/` (the confined one) and `outside/` beside it.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("tvmrt-beneath-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("root/sub")).unwrap();
            std::fs::create_dir_all(dir.join("outside")).unwrap();
            std::fs::write(dir.join("outside/secret"), b"secret").unwrap();
            std::fs::write(dir.join("root/sub/in.txt"), b"inside").unwrap();
            Scratch(dir)
        }
        fn root(&self) -> Root {
            Root::open(&self.0.join("root")).unwrap()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn refused(r: Result<impl std::fmt::Debug>, what: &str) -> String {
        let e = r.expect_err(what).to_string();
        assert!(e.contains("not a path inside") || e.contains("not a regular file"), "{what}: {e}");
        e
    }

    #[test]
    fn paths_inside_are_served() {
        let s = Scratch::new("inside");
        let root = s.root();
        assert_eq!(root.read(Path::new("sub/in.txt")).unwrap(), b"inside");
        assert_eq!(root.read(Path::new("./sub/./in.txt")).unwrap(), b"inside");
        let abs = root.path().join("sub/in.txt");
        assert_eq!(root.read(&abs).unwrap(), b"inside", "an absolute path inside the root");
        assert_eq!(root.file(Path::new("sub/in.txt")).unwrap(), abs);
        root.write_whole(Path::new("sub/new.bin"), b"abc", false).unwrap();
        assert_eq!(std::fs::read(s.0.join("root/sub/new.bin")).unwrap(), b"abc");
        root.write_whole(Path::new("sub/new.bin"), b"replaced", false).unwrap();
        assert_eq!(root.read(Path::new("sub/new.bin")).unwrap(), b"replaced");
        assert!(root.write_whole(Path::new("a/b/c.bin"), b"x", false).is_err(), "no directories made unasked");
        root.write_whole(Path::new("a/b/c.bin"), b"x", true).unwrap();
        assert_eq!(root.dir(Path::new("a/b"), false).unwrap(), root.path().join("a/b"));
        let listed = root.list(Path::new("sub")).unwrap();
        assert_eq!(listed, vec![root.path().join("sub/in.txt"), root.path().join("sub/new.bin")], "no temp file left");
        assert_eq!(root.list(Path::new("")).unwrap(), vec![root.path().join("a"), root.path().join("sub")]);
        root.remove(Path::new("a")).unwrap();
        assert!(!s.0.join("root/a").exists());
        root.remove(Path::new("sub/new.bin")).unwrap();
        assert!(!s.0.join("root/sub/new.bin").exists());
        assert!(root.remove(Path::new("sub/new.bin")).is_err(), "gone");
        assert!(root.remove(Path::new("")).is_err(), "never the root itself");
        assert!(root.read(Path::new("sub")).unwrap_err().to_string().contains("not a regular file"));
    }

    #[test]
    fn names_that_climb_out_are_refused() {
        let s = Scratch::new("climb");
        let root = s.root();
        for bad in ["../outside/secret", "sub/../../outside/secret", "/etc/passwd", "sub/.."] {
            refused(root.read(Path::new(bad)), bad);
            refused(root.list(Path::new(bad)), bad);
        }
        let outside = s.0.join("outside/secret");
        refused(root.read(&outside), "an absolute path outside");
        refused(root.write_whole(&s.0.join("outside/new"), b"x", true), "writing outside");
        assert!(!s.0.join("outside/new").exists());
        refused(root.remove(&outside), "removing outside");
        assert!(outside.exists());
    }

    #[test]
    fn links_are_never_followed() {
        let s = Scratch::new("links");
        let root = s.root();
        symlink(s.0.join("outside"), s.0.join("root/esc")).unwrap();
        symlink(s.0.join("outside/secret"), s.0.join("root/file-link")).unwrap();
        symlink("sub", s.0.join("root/inner-link")).unwrap();
        for via in ["esc/secret", "file-link", "inner-link/in.txt"] {
            refused(root.read(Path::new(via)), via);
            refused(root.file(Path::new(via)), via);
        }
        refused(root.list(Path::new("esc")), "listing through a link");
        refused(root.dir(Path::new("esc"), true), "a directory through a link");
        refused(root.write_whole(Path::new("esc/planted"), b"x", false), "writing through a link");
        refused(root.write_whole(Path::new("esc/new/planted"), b"x", true), "making directories through a link");
        assert!(!s.0.join("outside/planted").exists() && !s.0.join("outside/new").exists());
        // Writing over a link replaces the link, never its target.
        root.write_whole(Path::new("file-link"), b"mine", false).unwrap();
        assert_eq!(std::fs::read(s.0.join("outside/secret")).unwrap(), b"secret");
        assert_eq!(root.read(Path::new("file-link")).unwrap(), b"mine");
        refused(root.remove(Path::new("esc/secret")), "removing through a link");
        // Removing the link removes the link; a tree holding links loses the links only.
        std::fs::create_dir_all(s.0.join("root/tree/deeper")).unwrap();
        symlink(s.0.join("outside"), s.0.join("root/tree/deeper/esc")).unwrap();
        root.remove(Path::new("tree")).unwrap();
        root.remove(Path::new("esc")).unwrap();
        assert!(s.0.join("outside/secret").exists(), "nothing outside removed");
        assert!(!s.0.join("root/tree").exists() && !s.0.join("root/esc").exists());
    }

    #[test]
    fn the_systems_refusals_come_back_as_errors() {
        let s = Scratch::new("errors");
        let root = s.root();
        let at = root.fd.as_raw_fd();
        let kind = |r: std::io::Result<()>| r.unwrap_err().kind();
        assert_eq!(kind_at(at, OsStr::new("missing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
        assert_eq!(kind_at(at, OsStr::new("sub")).unwrap(), libc::S_IFDIR);
        assert_eq!(kind(unlink_at(at, OsStr::new("missing"), 0)), std::io::ErrorKind::NotFound);
        assert_eq!(kind(mkdir_at(at, OsStr::new("sub"))), std::io::ErrorKind::AlreadyExists);
        assert_eq!(kind(rename_at(at, OsStr::new("missing"), OsStr::new("other"))), std::io::ErrorKind::NotFound);
        // A root is a directory, held by a descriptor no child process inherits.
        assert!(Root::open(&s.0.join("root/sub/in.txt")).is_err(), "a file is no root");
        // SAFETY: a query of a descriptor of ours.
        let flags = unsafe { libc::fcntl(at, libc::F_GETFD) };
        assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "close-on-exec");
        refused(root.dir(Path::new("sub/in.txt"), false), "a file is no directory");
    }

    #[test]
    fn a_new_file_takes_the_first_free_name_of_a_few() {
        let s = Scratch::new("create");
        let root = s.root();
        let at = root.fd.as_raw_fd();
        for taken in 0..CREATE_ATTEMPTS {
            std::fs::write(s.0.join(format!("root/t{taken}")), b"theirs").unwrap();
        }
        // Names `t0`, `t1`, ... counted as they are asked for.
        let asked = std::cell::Cell::new(0);
        let names = || {
            asked.set(asked.get() + 1);
            OsString::from(format!("t{}", asked.get() - 1))
        };
        std::fs::remove_file(s.0.join("root/t3")).unwrap();
        let (name, _) = create_new(at, names).unwrap();
        assert_eq!((name.to_str().unwrap(), asked.get()), ("t3", 4));
        assert_eq!(std::fs::read(s.0.join("root/t2")).unwrap(), b"theirs", "taken names left alone");
        // Every name taken: refused after the last attempt.
        asked.set(0);
        std::fs::write(s.0.join("root/t3"), b"theirs").unwrap();
        assert_eq!(create_new(at, names).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(asked.get(), CREATE_ATTEMPTS);
        // Any other failure at once.
        asked.set(0);
        let bad = || {
            asked.set(asked.get() + 1);
            OsString::from("no-such-dir/t")
        };
        assert_eq!(create_new(at, bad).unwrap_err().kind(), std::io::ErrorKind::NotFound);
        assert_eq!(asked.get(), 1);
    }

    /// A server started with stdin closed gets descriptor 0 from the system like any other, and
    /// must take it for one. In a forked child, whose closing of 0 no other thread sees.
    #[test]
    fn descriptor_zero_is_a_descriptor_like_any_other() {
        let s = Scratch::new("fd0");
        let root = s.root();
        // SAFETY: the child only opens, reads and closes files (glibc's malloc is usable after
        // fork) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: the child's own stdin, closed so that the next descriptor is 0.
            unsafe { libc::close(0) };
            // `sub` opens as 0 (copies of the root's descriptor start at 3); listing the root
            // hands the stream a duplicate, 0 again once `sub` is closed; a root opened last gets 0.
            let ok = root.read(Path::new("sub/in.txt")).ok().as_deref() == Some(&b"inside"[..])
                && root.list(Path::new("")).is_ok_and(|l| l.len() == 1)
                && Root::open(&s.0.join("root")).is_ok_and(|r| r.fd.as_raw_fd() == 0);
            // SAFETY: leaving the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "descriptor 0 refused");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let s = Scratch::new("fifo");
        let fifo = CString::new(s.0.join("root/pipe").as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let root = s.root();
        let (tx, rx) = std::sync::mpsc::channel();
        // A thread of its own: an open that blocks (no O_NONBLOCK) would wait for a writer forever.
        std::thread::spawn(move || tx.send(root.read(Path::new("pipe")).map_err(|e| e.to_string())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("reading a FIFO returned");
        assert!(got.unwrap_err().contains("not a regular file"));
    }

    #[test]
    fn removal_descends_as_deep_as_the_limit_and_no_further() {
        let s = Scratch::new("deep");
        let root = s.root();
        // `tree` with a chain of `n` directories under it.
        let chain = |n: usize| -> PathBuf {
            let path = std::iter::once("tree").chain(std::iter::repeat_n("d", n)).collect::<PathBuf>();
            std::fs::create_dir_all(s.0.join("root").join(&path)).unwrap();
            path
        };
        chain(MAX_DEPTH);
        root.remove(Path::new("tree")).unwrap();
        assert!(!s.0.join("root/tree").exists());
        chain(MAX_DEPTH + 1);
        let e = root.remove(Path::new("tree")).unwrap_err().to_string();
        assert!(e.contains("too deep"), "{e}");
    }
}
