//! `tvmrt rpc-server`: a device's RPC server on this runtime, as upstream's `tvm_rpc server`: it
//! listens on the first free port of a range, serves one session at a time, each in a child
//! process (a kernel that crashes ends the session, not the server) with a work directory of its
//! own, and registers with a tracker when given one.

use crate::RpcServerArgs;
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};
use tvm_runtime::packed::{registry, PackedFunc, RetValue};
use tvm_runtime::rpc::{handshake, tracker::Tracker};
use tvm_runtime::{Error, Result};

/// How often an idle server checks that the tracker still offers its session.
const TRACKER_POLL: Duration = Duration::from_secs(2);

pub fn run(a: &RpcServerArgs) -> Result<()> {
    let (listener, port) = bind(&a.host, a.port, a.port_end)?;
    let work =
        a.work_dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("tvmrt-rpc-{}", std::process::id())));
    std::fs::create_dir_all(&work).map_err(|e| Error::io(work.display().to_string(), e))?;
    println!(
        "tvmrt rpc-server: key '{}' on {}:{port}, work directory {}. Whoever can connect can run code on this \
         machine: serve on a trusted network only.",
        a.key,
        a.host,
        work.display()
    );
    let mut tracker = match &a.tracker {
        Some(addr) => {
            let mut t = Tracker::connect(addr)?;
            t.update_info(&a.key, port, a.custom_addr.as_deref())?;
            Some(t)
        }
        None => None,
    };
    listener.set_nonblocking(true).map_err(|e| Error::tvm(format!("rpc-server: {e}")))?;
    let mut sessions = 0u64;
    loop {
        // With a tracker, each session is offered under a fresh match key, kept until a client
        // holding it comes: the tracker may hand it out at any time (a connection that is no
        // client, or holds another key, changes nothing).
        let match_key = match &mut tracker {
            Some(t) => {
                let m = format!("{}:{}", a.key, random_suffix());
                t.put(&a.key, port, &m, a.custom_addr.as_deref())?;
                m
            }
            None => a.key.clone(),
        };
        loop {
            let stream = wait_for_client(&listener, tracker.as_mut(), &a.key, port, &match_key, a)?;
            let work = work.join(format!("session-{}", sessions + 1));
            match session(stream, &match_key, &a.key, &work, a.silent) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => eprintln!("tvmrt rpc-server: session {}: {e}", sessions + 1),
            }
            sessions += 1;
            break;
        }
    }
}

/// Binds the first free port of `[port, port_end)`.
fn bind(host: &str, port: u16, port_end: u16) -> Result<(TcpListener, u16)> {
    for p in port..port_end.max(port + 1) {
        if let Ok(l) = TcpListener::bind((host, p)) {
            return Ok((l, p));
        }
    }
    Err(Error::value(format!("rpc-server: no free port on {host} in [{port}, {port_end})")))
}

/// A client's connection; while none comes, keeps the tracker's offer alive (a fresh match key
/// when the tracker no longer lists it).
fn wait_for_client(
    listener: &TcpListener,
    mut tracker: Option<&mut Tracker>,
    key: &str,
    port: u16,
    match_key: &str,
    a: &RpcServerArgs,
) -> Result<TcpStream> {
    let mut last_poll = Instant::now();
    let mut missing = 0;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|e| Error::tvm(format!("rpc-server: {e}")))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(Error::tvm(format!("rpc-server: accept: {e}"))),
        }
        if let Some(t) = tracker.as_deref_mut() {
            if last_poll.elapsed() >= TRACKER_POLL {
                last_poll = Instant::now();
                missing = if t.pending_match_keys()?.iter().any(|k| k == match_key) { 0 } else { missing + 1 };
                if missing >= 4 {
                    t.put(key, port, match_key, a.custom_addr.as_deref())?;
                    missing = 0;
                }
            }
        }
    }
}

/// One session: the handshake here, the packets in a child process. False when the handshake
/// accepted no client (not one, or one holding another key).
fn session(mut stream: TcpStream, match_key: &str, key: &str, work: &Path, silent: bool) -> Result<bool> {
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| Error::tvm(e.to_string()))?;
    let accepted = match handshake::accept(&mut stream, match_key, key) {
        Ok(Some(accepted)) => accepted,
        Ok(None) => return Ok(false),
        // A peer that closes or stalls mid-handshake is no client either.
        Err(e) => {
            if !silent {
                println!("tvmrt rpc-server: {} dropped: {e}", peer(&stream));
            }
            return Ok(false);
        }
    };
    stream.set_read_timeout(None).map_err(|e| Error::tvm(e.to_string()))?;
    if !silent {
        println!("tvmrt rpc-server: session for {} ({})", accepted.client_key, peer(&stream));
    }
    // SAFETY: this process runs no other thread (the server serves one session at a time and
    // runs no kernel itself), so the child starts from a consistent copy of it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::tvm(format!("rpc-server: fork: {}", std::io::Error::last_os_error())));
    }
    if pid == 0 {
        let code = match child(stream, work) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tvmrt rpc-server: {e}");
                1
            }
        };
        let _ = std::fs::remove_dir_all(work);
        // SAFETY: ends the child without running the parent's exit handlers twice.
        unsafe { libc::_exit(code) };
    }
    drop(stream);
    wait(pid, accepted.timeout, silent);
    let _ = std::fs::remove_dir_all(work);
    Ok(true)
}

fn peer(stream: &TcpStream) -> String {
    stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string())
}

/// Waits for the session's process; past the client's timeout, ends it.
fn wait(pid: libc::pid_t, timeout: Option<Duration>, silent: bool) {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our child's pid; WNOHANG so the timeout can be checked.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid || done < 0 {
            if !silent && libc::WIFSIGNALED(status) {
                println!("tvmrt rpc-server: the session ended by signal {}", libc::WTERMSIG(status));
            }
            return;
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            // SAFETY: our child, ended and reaped below.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            if !silent {
                println!("tvmrt rpc-server: the session timed out");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The session's process: the work directory's functions, then the packets.
fn child(stream: TcpStream, work: &Path) -> Result<()> {
    std::fs::create_dir_all(work).map_err(|e| Error::io(work.display().to_string(), e))?;
    let work = work.canonicalize().map_err(|e| Error::io(work.display().to_string(), e))?;
    register_environment(&work)?;
    tvm_runtime::rpc::serve(stream, "tvmrt")
}

/// `path` inside the work directory: relative, with no `..` (upload, download, remove and load
/// cannot reach outside it).
fn confined(work: &Path, path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    if p.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) || path.is_empty() {
        return Err(Error::value(format!("'{path}' is not a path inside the server's work directory")));
    }
    Ok(work.join(p))
}

/// The functions a server program provides (`tvm.rpc.server.workpath`, `load_module`,
/// `listdir`), over the session's work directory.
fn register_environment(work: &Path) -> Result<()> {
    let w = work.to_path_buf();
    let workpath = PackedFunc::native(move |a| Ok(RetValue::Str(confined(&w, a.str(0)?)?.display().to_string())));
    let w = work.to_path_buf();
    let load = PackedFunc::native(move |a| {
        let path = confined(&w, a.str(0)?)?;
        let so = link_if_needed(&path)?;
        tvm_runtime::library::load_file(&so.display().to_string(), "").map(Into::into)
    });
    let w = work.to_path_buf();
    let listdir = PackedFunc::native(move |a| {
        let dir = if a.is_empty() || a.str(0)?.is_empty() { w.clone() } else { confined(&w, a.str(0)?)? };
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(dir.display().to_string(), e))?
            .filter_map(|e| e.ok())
            .map(|e| format!("{},", e.path().display()))
            .collect();
        names.sort();
        Ok(RetValue::Str(names.concat()))
    });
    registry::register("tvm.rpc.server.workpath", workpath, true)?;
    registry::register("tvm.rpc.server.load_module", load, true)?;
    registry::register("tvm.rpc.server.listdir", listdir, true)
}

/// A shared library for `path`: itself for `.so`; object files (`.o`, or a `.tar` of them, as
/// `export_library` writes for cross builds) linked with the system's C compiler.
fn link_if_needed(path: &Path) -> Result<PathBuf> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let run = |cmd: &mut std::process::Command| -> Result<()> {
        let out = cmd.output().map_err(|e| Error::tvm(format!("{:?}: {e}", cmd.get_program())))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::tvm(format!("{:?} failed: {}", cmd.get_program(), String::from_utf8_lossy(&out.stderr))))
        }
    };
    let objects = match ext {
        "o" => vec![path.to_path_buf()],
        "tar" => {
            let dir = path.with_extension("parts");
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
            run(std::process::Command::new("tar").arg("-xf").arg(path).arg("-C").arg(&dir))?;
            let mut objs: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| Error::io(dir.display().to_string(), e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "o"))
                .collect();
            objs.sort();
            objs
        }
        _ => return Ok(path.to_path_buf()),
    };
    let so = path.with_extension("so");
    run(std::process::Command::new("cc").arg("-shared").arg("-fPIC").arg("-o").arg(&so).args(&objects))?;
    Ok(so)
}

/// The random part of a match key.
fn random_suffix() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:.6}", (t % 1_000_000) as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_work_directory() {
        let w = Path::new("/tmp/w");
        assert_eq!(confined(w, "lib.so").unwrap(), Path::new("/tmp/w/lib.so"));
        assert_eq!(confined(w, "a/./b.so").unwrap(), Path::new("/tmp/w/a/./b.so"));
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "a/.."] {
            assert!(confined(w, bad).is_err(), "{bad}");
        }
    }
}
