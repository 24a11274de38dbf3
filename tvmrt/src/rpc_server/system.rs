//! What the server asks of the operating system directly, and nothing else: signals turned into
//! bytes on a pipe (so one `poll` waits for clients, the session's end and a request to stop),
//! `poll` itself, and the session's process (fork, what the child lets go of, wait, kill). The
//! one room of the server with `unsafe` code.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The pipe's write end, for the signal handler (-1 before the pipe exists).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; errno is kept for the interrupted code. A full
        // pipe drops the byte, which is fine: one byte of each kind is all the loop needs.
        unsafe {
            let saved = *libc::__errno_location();
            let byte = signal as u8;
            libc::write(fd, (&byte as *const u8).cast(), 1);
            *libc::__errno_location() = saved;
        }
    }
}

/// The signals the server acts on, as bytes on a pipe.
pub struct Signals {
    read: OwnedFd,
    write: OwnedFd,
}

/// The signals that stop the server.
pub const STOP: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

impl Signals {
    /// Installs the handlers (stop signals and SIGCHLD) and ignores SIGPIPE: a peer that goes
    /// away is an error on its socket, never the end of the server.
    pub fn install() -> io::Result<Signals> {
        let mut fds = [0; 2];
        // SAFETY: a two-int array for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: descriptors just made, owned from here on.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        SIGNAL_PIPE.store(write.as_raw_fd(), Ordering::Relaxed);
        for s in STOP.into_iter().chain([libc::SIGCHLD]) {
            set_handler(s, on_signal as *const () as usize, libc::SA_RESTART | libc::SA_NOCLDSTOP)?;
        }
        set_handler(libc::SIGPIPE, libc::SIG_IGN, 0)?;
        Ok(Signals { read, write })
    }

    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// The signals that arrived since the last call.
    pub fn take(&self) -> Vec<libc::c_int> {
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        loop {
            // SAFETY: a buffer of ours, a descriptor of ours (non-blocking).
            let n = unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return got;
            }
            got.extend(buf[..n as usize].iter().map(|b| libc::c_int::from(*b)));
        }
    }

    /// The descriptors a session's process lets go of.
    pub fn fds(&self) -> [RawFd; 2] {
        [self.read.as_raw_fd(), self.write.as_raw_fd()]
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        SIGNAL_PIPE.store(-1, Ordering::Relaxed);
    }
}

fn set_handler(signal: libc::c_int, handler: libc::sighandler_t, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid value to fill; the handler only writes to a pipe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = flags;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits until one of `fds` is readable (their `revents` say which) or `timeout` passes (none:
/// forever). A signal ends the wait early, as readiness of the signal pipe.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as libc::c_int);
    // SAFETY: a slice of pollfd structures of ours.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

pub fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd { fd, events: libc::POLLIN, revents: 0 }
}

/// Runs `session` in a child process, which first lets go of `close` (the listening socket, the
/// tracker's, other clients', the signal pipe), takes the default signal dispositions back and
/// dies with the server; returns the child's pid. The child never returns from here.
pub fn fork_session(close: &[RawFd], session: impl FnOnce() -> i32) -> io::Result<libc::pid_t> {
    // SAFETY: getpid has no preconditions.
    let server = unsafe { libc::getpid() };
    // SAFETY: the server is one thread (it runs no kernel and serves sessions in children), so
    // the child starts from a consistent copy of it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    // SAFETY: in the child: closing descriptors it inherited and does not use (their Rust owners
    // are never dropped here: the child leaves by _exit), resetting dispositions, and asking to
    // die with the server, then checking the server did not die first.
    unsafe {
        for fd in close {
            libc::close(*fd);
        }
        for s in STOP.into_iter().chain([libc::SIGCHLD]) {
            libc::signal(s, libc::SIG_DFL);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != server {
            libc::_exit(1);
        }
    }
    let code = session();
    // SAFETY: ends the child without running the server's exit handlers or destructors twice.
    unsafe { libc::_exit(code) }
}

/// How a session's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signalled(i32),
}

/// The child's end, if it has ended (reaped).
pub fn reap(pid: libc::pid_t, block: bool) -> Option<Ended> {
    let mut status = 0;
    // SAFETY: our child's pid and a status int of ours.
    let done = unsafe { libc::waitpid(pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
    if done != pid {
        // 0: still running; -1: not ours to wait for any more (gone).
        return (done < 0).then_some(Ended::Exited(-1));
    }
    Some(if libc::WIFSIGNALED(status) {
        Ended::Signalled(libc::WTERMSIG(status))
    } else {
        Ended::Exited(libc::WEXITSTATUS(status))
    })
}

/// Ends the child at once and reaps it.
pub fn kill_and_reap(pid: libc::pid_t) -> Ended {
    // SAFETY: our child, not yet reaped (so the pid is still its).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap(pid, true).unwrap_or(Ended::Exited(-1))
}
