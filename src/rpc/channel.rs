//! Packets over a byte stream: a packet's body is read as its bytes arrive (a length field alone
//! sizes nothing), an idle session may wait as long as it likes for its next packet, and a peer
//! that stalls in the middle of one is dropped after a timeout.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

/// A byte stream whose reads can time out (TCP and Unix sockets; packed-function streams).
pub trait Socket: Read + Write + Send {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()>;
}

impl Socket for std::net::TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, timeout)
    }
}

impl Socket for std::os::unix::net::UnixStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
}

/// The largest packet read: beyond it the length is taken for garbage (a real copy of that size
/// would be split by the client).
const MAX_PACKET: u64 = 1 << 40;
/// What a body's buffer starts at, growing (doubling) only as bytes arrive.
const FIRST_CHUNK: usize = 1 << 20;

/// How long a peer may stall in the middle of a packet: `TVM_RT_RPC_STALL_MS`, else 30 s.
pub fn stall_timeout() -> Duration {
    static STALL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *STALL.get_or_init(|| {
        let ms = std::env::var("TVM_RT_RPC_STALL_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(30_000);
        Duration::from_millis(ms)
    })
}

/// Bytes read ahead in one system call: a small packet (a call, its reply) arrives whole in one.
const READ_AHEAD: usize = 64 << 10;

pub struct Channel<S: Socket> {
    socket: S,
    stall: Duration,
    /// Read ahead, not yet taken: `ahead[pos..end]`.
    ahead: Box<[u8]>,
    pos: usize,
    end: usize,
    /// The read timeout the next read from the socket needs (none between packets), and the one
    /// the socket has (set only when they differ: a system call).
    want: Option<Duration>,
    has: Option<Duration>,
}

impl<S: Socket> Channel<S> {
    pub fn new(socket: S) -> Channel<S> {
        Channel::with_stall(socket, stall_timeout())
    }

    fn with_stall(socket: S, stall: Duration) -> Channel<S> {
        let ahead = vec![0u8; READ_AHEAD].into_boxed_slice();
        Channel { socket, stall, ahead, pos: 0, end: 0, want: None, has: None }
    }

    /// The next packet's body; `None` when the peer closed the stream between packets.
    pub fn recv(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            self.want = None;
            let mut len = [0u8; 8];
            if self.read_some(&mut len[..1])? == 0 {
                return Ok(None);
            }
            self.want = Some(self.stall);
            self.read_exact(&mut len[1..])?;
            let n = u64::from_le_bytes(len);
            if n == 0 {
                continue;
            }
            if n > MAX_PACKET {
                return Err(Error::value(format!("RPC: a packet of {n} bytes announced")));
            }
            return self.read_body(n as usize).map(Some);
        }
    }

    /// The reply to a copy from the remote: when it is the copy's `out.len()` bytes, they are
    /// read straight into `out` (`None`); any other packet (an exception) is returned whole.
    pub fn recv_copy_ack(&mut self, out: &mut [u8]) -> Result<Option<Vec<u8>>> {
        self.want = None;
        let mut head = [0u8; 12];
        if self.read_some(&mut head[..1])? == 0 {
            return Err(closed());
        }
        self.want = Some(self.stall);
        self.read_exact(&mut head[1..8])?;
        let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if !(4..=MAX_PACKET).contains(&n) {
            return Err(Error::value(format!("RPC: a packet of {n} bytes announced")));
        }
        self.read_exact(&mut head[8..])?;
        let code = i32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
        if code == super::packet::code::COPY_ACK && n == 4 + out.len() as u64 {
            self.read_exact(out)?;
            return Ok(None);
        }
        let mut body = head[8..].to_vec();
        body.extend(self.read_body(n as usize - 4)?);
        Ok(Some(body))
    }

    /// `n` bytes, the buffer growing with what has arrived, never sized from `n` alone.
    fn read_body(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut body: Vec<u8> = Vec::with_capacity(n.min(FIRST_CHUNK));
        while body.len() < n {
            if body.len() == body.capacity() {
                let more = body.capacity().max(FIRST_CHUNK).min(n - body.len());
                body.reserve_exact(more);
            }
            let start = body.len();
            let end = body.capacity().min(n);
            body.resize(end, 0);
            let got = self.read_some(&mut body[start..end])?;
            body.truncate(start + got);
            if got == 0 {
                return Err(closed());
            }
        }
        Ok(body)
    }

    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<()> {
        while !buf.is_empty() {
            match self.read_some(buf)? {
                0 => return Err(closed()),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }

    /// Bytes read ahead first; then small reads fill the read-ahead buffer, large ones (a copy's
    /// data) go straight into place.
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.pos == self.end && buf.len() < READ_AHEAD {
            let mut ahead = std::mem::take(&mut self.ahead);
            let got = self.read_socket(&mut ahead);
            self.ahead = ahead;
            (self.pos, self.end) = (0, got?);
        }
        if self.pos < self.end {
            let n = buf.len().min(self.end - self.pos);
            buf[..n].copy_from_slice(&self.ahead[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.read_socket(buf)
    }

    fn read_socket(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.has != self.want {
            self.socket.set_read_timeout(self.want).map_err(io)?;
            self.has = self.want;
        }
        loop {
            match self.socket.read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Error::value(format!(
                        "RPC: the peer stalled for {:.1} s in the middle of a packet",
                        self.stall.as_secs_f64()
                    )))
                }
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Sends the pieces of one packet.
    pub fn send(&mut self, parts: &[&[u8]]) -> Result<()> {
        for p in parts {
            self.socket.write_all(p).map_err(io)?;
        }
        self.socket.flush().map_err(io)
    }
}

fn closed() -> Error {
    Error::value("Channel closes before we get needed bytes")
}

fn io(e: std::io::Error) -> Error {
    Error::tvm(format!("RPC: the connection failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn packets_arrive_whole_or_the_stall_is_an_error() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut ch = Channel::with_stall(b, Duration::from_millis(100));
        // Two packets and an empty one between them, then a clean close.
        a.write_all(&[&3u64.to_le_bytes()[..], b"abc", &0u64.to_le_bytes(), &1u64.to_le_bytes(), b"z"].concat())
            .unwrap();
        assert_eq!(ch.recv().unwrap().unwrap(), b"abc");
        assert_eq!(ch.recv().unwrap().unwrap(), b"z");
        // A length that claims more than arrives, then nothing: dropped after the stall timeout,
        // without a buffer of the claimed size.
        a.write_all(&(1u64 << 39).to_le_bytes()).unwrap();
        a.write_all(b"xy").unwrap();
        let e = ch.recv().unwrap_err().to_string();
        assert!(e.contains("stalled"), "{e}");
        drop(a);
        // Closed mid-header.
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut ch = Channel::new(b);
        a.write_all(&[1, 0]).unwrap();
        drop(a);
        assert!(ch.recv().unwrap_err().to_string().contains("Channel closes"));
        let (a, b) = UnixStream::pair().unwrap();
        let mut ch = Channel::new(b);
        drop(a);
        assert!(ch.recv().unwrap().is_none(), "closed between packets");
    }

    #[test]
    fn bytes_read_ahead_belong_to_the_packets_that_follow() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut ch = Channel::new(b);
        // A small packet, a copy's reply larger than the read-ahead buffer, a small packet, all
        // written at once: the reply's first bytes are read ahead with the first packet.
        let big: Vec<u8> = (0..3 * READ_AHEAD as u32 + 5).map(|i| (i * 7) as u8).collect();
        let ack = [&(4 + big.len() as u64).to_le_bytes()[..], &super::super::packet::code::COPY_ACK.to_le_bytes()[..]];
        let writer = {
            let big = big.clone();
            let bytes = [&3u64.to_le_bytes()[..], b"abc", ack[0], ack[1], &big, &2u64.to_le_bytes(), b"yz"].concat();
            std::thread::spawn(move || a.write_all(&bytes).unwrap())
        };
        assert_eq!(ch.recv().unwrap().unwrap(), b"abc");
        let mut out = vec![0u8; big.len()];
        assert!(ch.recv_copy_ack(&mut out).unwrap().is_none(), "read into place");
        assert!(out == big, "the copy's bytes in order");
        assert_eq!(ch.recv().unwrap().unwrap(), b"yz");
        writer.join().unwrap();
        assert!(ch.recv().unwrap().is_none());
    }

    #[test]
    fn absurd_lengths_are_refused() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut ch = Channel::new(b);
        a.write_all(&u64::MAX.to_le_bytes()).unwrap();
        assert!(ch.recv().unwrap_err().to_string().contains("announced"));
    }
}
