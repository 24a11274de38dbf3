//! `tvmrt rpc-server`: a device's RPC server on this runtime, as upstream's `tvm_rpc server`: it
//! listens on the first free port of a range, serves one session at a time, each in a child
//! process (a kernel that crashes ends the session, not the server) confined to a work directory
//! of its own, and registers with a tracker when given one.
//!
//! The listening process runs nothing a client controls that could fail badly: handshakes are fed
//! byte by byte to a parser (`tvm_runtime::rpc::handshake`) for every connection at once, each
//! against one deadline for all its bytes, so a client that dribbles holds up nobody; what a
//! client asks for is checked against its bounds (a session's timeout out of range is refused
//! with a message to the client); everything after the handshake runs in the session's process,
//! which lets go of the listening socket, the tracker's and other clients' at once. A lost
//! tracker is reconnected with backoff while the server keeps serving (`tracker_link`). SIGTERM,
//! SIGINT and SIGHUP stop the server at once: the session's process is ended, the work
//! directory removed, the port free.

mod system;
mod tracker_link;

use crate::RpcServerArgs;
use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use system::{Ended, Signals};
use tracker_link::TrackerLink;
use tvm_runtime::rpc::handshake::{self, ClientHello, Hello, Verdict};
use tvm_runtime::{Error, Result};

/// Connections mid-handshake held at once; past it, the one waiting longest is dropped.
const MAX_PENDING: usize = 64;
/// How long a refused client has to read its refusal and close (the server reads and drops what
/// it sends meanwhile, so the refusal is not reset under it); nobody waits for it.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long a connection has for its whole handshake: `TVM_RT_RPC_HANDSHAKE_MS`, else 10 s.
fn handshake_limit() -> Duration {
    let ms = std::env::var("TVM_RT_RPC_HANDSHAKE_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(10_000);
    Duration::from_millis(ms)
}

pub fn run(a: &RpcServerArgs) -> Result<()> {
    let signals = Signals::install().map_err(|e| Error::tvm(format!("rpc-server: signals: {e}")))?;
    let (listener, port) = bind(&a.host, a.port, a.port_end)?;
    listener.set_nonblocking(true).map_err(|e| Error::tvm(format!("rpc-server: {e}")))?;
    let work = WorkDir::create(a.work_dir.as_deref())?;
    println!(
        "tvmrt rpc-server: key '{}' on {}:{port}, work directory {}. Whoever can connect can run code on this \
         machine: serve on a trusted network only.",
        a.key,
        a.host,
        work.path.display()
    );
    let tracker = a.tracker.as_deref().map(|t| TrackerLink::new(t, &a.key, port, a.custom_addr.as_deref(), a.silent));
    let mut server = Server {
        key: a.key.clone(),
        match_key: a.key.clone(),
        silent: a.silent,
        limit: handshake_limit(),
        listener,
        signals,
        work,
        tracker,
        pending: Vec::new(),
        closing: Vec::new(),
        sessions: 0,
    };
    server.next_match_key();
    server.serve()
}

/// Binds the first free port of `[port, port_end)` (port 0: one the system picks).
fn bind(host: &str, port: u16, port_end: u16) -> Result<(TcpListener, u16)> {
    for p in port..port_end.max(port.saturating_add(1)) {
        if let Ok(l) = TcpListener::bind((host, p)) {
            let bound = l.local_addr().map_or(p, |a| a.port());
            return Ok((l, bound));
        }
    }
    Err(Error::value(format!("rpc-server: no free port on {host} in [{port}, {port_end})")))
}

/// The server's folder for sessions: made at start, a folder per session inside, and removed when
/// the server stops (a folder the user named is kept, emptied of the sessions' folders).
struct WorkDir {
    path: PathBuf,
    /// Whether the server made the folder (and so removes it).
    made: bool,
}

impl WorkDir {
    fn create(given: Option<&Path>) -> Result<WorkDir> {
        let (path, made) = match given {
            Some(p) => (p.to_path_buf(), !p.exists()),
            None => (std::env::temp_dir().join(format!("tvmrt-rpc-{}", std::process::id())), true),
        };
        std::fs::create_dir_all(&path).map_err(|e| Error::io(path.display().to_string(), e))?;
        Ok(WorkDir { path, made })
    }

    fn session(&self, n: u64) -> PathBuf {
        self.path.join(format!("session-{n}"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.made {
            let _ = std::fs::remove_dir_all(&self.path);
        } else if let Ok(entries) = std::fs::read_dir(&self.path) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("session-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

/// A connection in its handshake.
struct Pending {
    stream: TcpStream,
    peer: String,
    hello: ClientHello,
    deadline: Instant,
}

impl Pending {
    fn is_complete(&self) -> bool {
        matches!(self.hello.hello(), Hello::Complete(_))
    }
}

/// A refused connection, answered in full and shut for writing: what the client still sends is
/// read and dropped until it closes or `until`.
struct Closing {
    stream: TcpStream,
    until: Instant,
}

struct Server {
    key: String,
    /// The key the next session is offered under (with a tracker, a fresh one per session).
    match_key: String,
    silent: bool,
    limit: Duration,
    listener: TcpListener,
    signals: Signals,
    work: WorkDir,
    tracker: Option<TrackerLink>,
    /// Connections in (or done with) their handshake, oldest first.
    pending: Vec<Pending>,
    /// Refused connections being closed.
    closing: Vec<Closing>,
    sessions: u64,
}

/// Whether the server goes on.
#[derive(PartialEq)]
enum Flow {
    Continue,
    Stop,
}

impl Server {
    fn log(&self, msg: std::fmt::Arguments<'_>) {
        if !self.silent {
            println!("tvmrt rpc-server: {msg}");
        }
    }

    fn serve(&mut self) -> Result<()> {
        loop {
            if let Some(t) = &mut self.tracker {
                t.tick();
            }
            let waiting: Vec<usize> = (0..self.pending.len()).filter(|&i| !self.pending[i].is_complete()).collect();
            let mut fds = vec![system::pollfd(self.signals.fd()), system::pollfd(self.listener.as_raw_fd())];
            fds.extend(waiting.iter().map(|&i| system::pollfd(self.pending[i].stream.as_raw_fd())));
            fds.extend(self.closing.iter().map(|c| system::pollfd(c.stream.as_raw_fd())));
            let now = Instant::now();
            let next = waiting
                .iter()
                .map(|&i| self.pending[i].deadline)
                .chain(self.closing.iter().map(|c| c.until))
                .chain(self.tracker.as_ref().map(|t| t.due()))
                .min();
            let complete = self.pending.iter().any(Pending::is_complete);
            let timeout = if complete { Some(Duration::ZERO) } else { next.map(|t| t.saturating_duration_since(now)) };
            system::poll(&mut fds, timeout).map_err(|e| Error::tvm(format!("rpc-server: poll: {e}")))?;
            if self.stop_requested() {
                return Ok(());
            }
            if fds[1].revents != 0 {
                self.accept_all();
            }
            let (handshakes, closing) = fds[2..].split_at(waiting.len());
            let ready: Vec<usize> =
                waiting.iter().zip(handshakes).filter(|(_, f)| f.revents != 0).map(|(&i, _)| i).collect();
            let closing_ready: Vec<bool> = closing.iter().map(|f| f.revents != 0).collect();
            self.drain_closing(&closing_ready);
            self.read_handshakes(&ready);
            self.expire();
            if let Some(i) = self.pending.iter().position(Pending::is_complete) {
                let p = self.pending.remove(i);
                if self.answer(p)? == Flow::Stop {
                    return Ok(());
                }
            }
        }
    }

    /// Whether a stop signal arrived (SIGCHLD outside a session means nothing here).
    fn stop_requested(&self) -> bool {
        let signals = self.signals.take();
        match signals.iter().find(|s| system::STOP.contains(s)) {
            Some(s) => {
                println!("tvmrt rpc-server: stopped by signal {s}");
                true
            }
            None => false,
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, addr)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let deadline = Instant::now() + self.limit;
                    self.pending.push(Pending { stream, peer: addr.to_string(), hello: ClientHello::new(), deadline });
                    if self.pending.len() > MAX_PENDING {
                        if let Some(oldest) = self.pending.iter().position(|p| !p.is_complete()) {
                            let p = self.pending.remove(oldest);
                            self.log(format_args!("{} dropped: too many connections in their handshake", p.peer));
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // A connection reset before it was taken, or out of descriptors for now: the
                // listener itself is fine.
                Err(e) => {
                    self.log(format_args!("accept: {e}"));
                    return;
                }
            }
        }
    }

    /// Reads and drops what refused clients sent (`ready`: per closing connection, whether it
    /// has something); lets go of those that closed or whose time is up.
    fn drain_closing(&mut self, ready: &[bool]) {
        let now = Instant::now();
        let mut buf = [0u8; 4096];
        let mut i = 0;
        self.closing.retain_mut(|c| {
            let was_ready = ready.get(i).copied().unwrap_or(false);
            i += 1;
            if was_ready {
                loop {
                    match c.stream.read(&mut buf) {
                        Ok(0) => return false,
                        Ok(_) => continue,
                        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => break,
                        Err(_) => return false,
                    }
                }
            }
            now < c.until
        });
    }

    /// Refuses a client whose handshake asked for what it cannot have: its answer and the
    /// exception packet its `connect` raises, written at once; no session, no waiting.
    fn refuse(&mut self, p: Pending, reply: &[u8], why: &str) {
        let mut answer = reply.to_vec();
        answer.extend(tvm_runtime::rpc::refusal(&format!("RPCSessionRefused: {why}")));
        let sent = p.stream.set_nonblocking(false).and_then(|()| p.stream.set_write_timeout(Some(self.limit)));
        if sent.and_then(|()| (&p.stream).write_all(&answer)).is_err() {
            return;
        }
        let _ = p.stream.shutdown(std::net::Shutdown::Write);
        if p.stream.set_nonblocking(true).is_ok() {
            self.closing.push(Closing { stream: p.stream, until: Instant::now() + REFUSAL_LINGER });
            if self.closing.len() > MAX_PENDING {
                self.closing.remove(0);
            }
        }
    }

    /// Reads what arrived on the connections at `ready` (indices into `pending`).
    fn read_handshakes(&mut self, ready: &[usize]) {
        let mut gone = Vec::new();
        for &i in ready {
            let p = &mut self.pending[i];
            let mut buf = vec![0u8; p.hello.wants().min(handshake::MAX_KEY + 8)];
            match p.stream.read(&mut buf) {
                Ok(0) => gone.push(i),
                Ok(n) => {
                    if p.hello.feed(&buf[..n]) == &Hello::NotAClient {
                        gone.push(i);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                Err(_) => gone.push(i),
            }
        }
        for i in gone.into_iter().rev() {
            self.pending.remove(i);
        }
    }

    /// Drops connections whose handshake did not arrive in time.
    fn expire(&mut self) {
        let now = Instant::now();
        let (late, kept): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.pending).into_iter().partition(|p| !p.is_complete() && p.deadline <= now);
        self.pending = kept;
        for p in late {
            self.log(format_args!("{} dropped: no handshake within {:?}", p.peer, self.limit));
        }
    }

    /// Answers a connection whose handshake is complete: another key's is told so; this
    /// server's client gets its session (or, asking for what it cannot have, a refusal).
    fn answer(&mut self, mut p: Pending) -> Result<Flow> {
        let Hello::Complete(client_key) = p.hello.hello().clone() else { return Ok(Flow::Continue) };
        let verdict = handshake::answer(&client_key, &self.match_key, &self.key);
        let reply = match &verdict {
            Verdict::Refused { reply, why } => {
                self.log(format_args!("{} ({client_key}) refused: {why}", p.peer));
                let (reply, why) = (reply.clone(), why.clone());
                self.refuse(p, &reply, &why);
                return Ok(Flow::Continue);
            }
            Verdict::Mismatch { reply } | Verdict::Accepted { reply, .. } => reply,
        };
        let sent = p.stream.set_nonblocking(false).and_then(|()| p.stream.set_write_timeout(Some(self.limit)));
        if sent.and_then(|()| p.stream.write_all(reply)).is_err() {
            self.log(format_args!("{} dropped: gone before the handshake's answer", p.peer));
            return Ok(Flow::Continue);
        }
        match verdict {
            Verdict::Mismatch { .. } => {
                self.log(format_args!("{} ({client_key}) told: not this server's key", p.peer));
                Ok(Flow::Continue)
            }
            Verdict::Refused { .. } => Ok(Flow::Continue),
            Verdict::Accepted { options, .. } => {
                self.log(format_args!("session for {client_key} ({})", p.peer));
                self.session(p, &client_key, options.timeout)
            }
        }
    }

    /// Runs one session in a process of its own and waits for it (past `timeout`, ends it).
    fn session(&mut self, p: Pending, client_key: &str, timeout: Option<Duration>) -> Result<Flow> {
        self.sessions += 1;
        let dir = self.work.session(self.sessions);
        let mut close: Vec<RawFd> = vec![self.listener.as_raw_fd()];
        close.extend(self.signals.fds());
        close.extend(self.tracker.as_ref().and_then(TrackerLink::fd));
        close.extend(self.pending.iter().map(|q| q.stream.as_raw_fd()));
        close.extend(self.closing.iter().map(|q| q.stream.as_raw_fd()));
        let started = Instant::now();
        let stream = p.stream;
        let pid = system::fork_session(&close, || session_process(stream, &dir))
            .map_err(|e| Error::tvm(format!("rpc-server: fork: {e}")))?;
        let deadline = timeout.map(|t| started + t);
        let flow = loop {
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let mut fds = [system::pollfd(self.signals.fd())];
            system::poll(&mut fds, wait).map_err(|e| Error::tvm(format!("rpc-server: poll: {e}")))?;
            if self.stop_requested() {
                system::kill_and_reap(pid);
                break Flow::Stop;
            }
            if let Some(ended) = system::reap(pid, false) {
                if let Ended::Signalled(s) = ended {
                    self.log(format_args!("the session of {client_key} ended by signal {s}"));
                }
                break Flow::Continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                system::kill_and_reap(pid);
                self.log(format_args!("the session of {client_key} timed out"));
                break Flow::Continue;
            }
        };
        let _ = std::fs::remove_dir_all(&dir);
        // Connections that waited meanwhile keep the time they had left.
        let paused = started.elapsed();
        for q in &mut self.pending {
            q.deadline += paused;
        }
        if flow == Flow::Continue {
            self.next_match_key();
        }
        Ok(flow)
    }

    /// With a tracker, each session is offered under a fresh match key, kept until a client
    /// holding it comes (the tracker may hand it out at any time).
    fn next_match_key(&mut self) {
        if let Some(t) = &mut self.tracker {
            self.match_key = format!("{}:{}", self.key, random_suffix());
            t.offer(&self.match_key);
        }
    }
}

/// The session's process: the work directory's functions, then the packets.
fn session_process(stream: TcpStream, dir: &Path) -> i32 {
    let served = std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(dir.display().to_string(), e))
        .and_then(|()| tvm_runtime::rpc::workdir::serve_in(dir))
        .and_then(|()| tvm_runtime::rpc::serve(stream, "tvmrt"));
    let _ = std::fs::remove_dir_all(dir);
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tvmrt rpc-server: {e}");
            1
        }
    }
}

/// The random part of a match key (as upstream's, a number in [0, 1)).
fn random_suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{:.6}", (h.finish() % 1_000_000) as f64 / 1e6)
}
