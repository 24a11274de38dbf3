//! The server's registration with a tracker, kept alive across the tracker's restarts: a lost
//! connection (a tracker that restarted, closed on us, or stalls) is dropped and made again with
//! backoff while the server goes on serving, and on each new connection the server announces
//! itself and offers its current session again, as upstream's servers do. The log says when the
//! link is lost and when it is back.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use tvm_runtime::rpc::tracker::Tracker;
use tvm_runtime::Result;

/// How often an idle server checks that the tracker still offers its session.
const POLL: Duration = Duration::from_secs(2);
/// Polls in a row that miss the offer before it is made again.
const MISSES: u32 = 4;
/// A tracker's answer (or connection) takes no longer than this.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection backoff: first wait, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);

pub struct TrackerLink {
    addr: String,
    key: String,
    port: u16,
    custom_addr: Option<String>,
    conn: Option<Tracker>,
    /// The match key offered for the next session.
    offered: Option<String>,
    /// When the next thing is due: a reconnection attempt, or a keep-alive poll.
    due: Instant,
    retry: Duration,
    misses: u32,
    /// Whether the server was ever registered (so a later registration is one "again").
    registered: bool,
    silent: bool,
}

impl TrackerLink {
    /// A link to the tracker at `addr`, connected at the first [`tick`](Self::tick).
    pub fn new(addr: &str, key: &str, port: u16, custom_addr: Option<&str>, silent: bool) -> TrackerLink {
        TrackerLink {
            addr: addr.into(),
            key: key.into(),
            port,
            custom_addr: custom_addr.map(Into::into),
            conn: None,
            offered: None,
            due: Instant::now(),
            retry: FIRST_RETRY,
            misses: 0,
            registered: false,
            silent,
        }
    }

    /// The tracker socket, which a session's process closes.
    pub fn fd(&self) -> Option<RawFd> {
        self.conn.as_ref().map(Tracker::raw_fd)
    }

    /// When [`tick`](Self::tick) next has something to do.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// Offers the next session under `match_key` (now if connected, else once reconnected).
    pub fn offer(&mut self, match_key: &str) {
        self.offered = Some(match_key.into());
        self.misses = 0;
        if self.conn.is_some() {
            let done = self.put();
            self.settle(done);
        }
    }

    /// Reconnects when due, or checks the offer is still listed (making it again after
    /// [`MISSES`] polls without it).
    pub fn tick(&mut self) {
        if Instant::now() < self.due {
            return;
        }
        let done = match self.conn.is_some() {
            false => self.reconnect(),
            true => self.keep_alive(),
        };
        self.settle(done);
    }

    fn reconnect(&mut self) -> Result<()> {
        let mut t = Tracker::connect(&self.addr, IO_TIMEOUT)?;
        t.update_info(&self.key, self.port, self.custom_addr.as_deref())?;
        self.conn = Some(t);
        self.put()?;
        if !self.silent {
            let again = if self.registered { " again" } else { "" };
            println!("tvmrt rpc-server: registered with the tracker {}{again}", self.addr);
        }
        self.registered = true;
        Ok(())
    }

    fn put(&mut self) -> Result<()> {
        let (Some(t), Some(m)) = (self.conn.as_mut(), self.offered.as_deref()) else { return Ok(()) };
        t.put(&self.key, self.port, m, self.custom_addr.as_deref())
    }

    fn keep_alive(&mut self) -> Result<()> {
        let Some(t) = self.conn.as_mut() else { return Ok(()) };
        let pending = t.pending_match_keys()?;
        let listed = self.offered.as_ref().is_none_or(|m| pending.contains(m));
        self.misses = if listed { 0 } else { self.misses + 1 };
        if self.misses >= MISSES {
            self.misses = 0;
            self.put()?;
        }
        Ok(())
    }

    /// After an exchange: on success the next poll is due in [`POLL`]; on failure the
    /// connection is dropped and the next attempt waits the backoff, which doubles.
    fn settle(&mut self, done: Result<()>) {
        match done {
            Ok(()) => {
                self.retry = FIRST_RETRY;
                self.due = Instant::now() + POLL;
            }
            Err(e) => {
                let was_connected = self.conn.take().is_some();
                if !self.silent && (was_connected || self.retry == FIRST_RETRY) {
                    println!("tvmrt rpc-server: no tracker connection ({e}); retrying while serving");
                }
                self.due = Instant::now() + self.retry;
                self.retry = (self.retry * 2).min(MAX_RETRY);
            }
        }
    }
}
