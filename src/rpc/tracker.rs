//! A server's side of TVM's RPC tracker: it announces itself and the key it serves, and offers a
//! fresh match key for each session; a client asks the tracker for a server by key. Messages are
//! `i32 length` + JSON after the tracker's magic. Every reply is bounded before it is read, and
//! every read and write has a deadline, so a tracker that stalls or talks nonsense costs its
//! caller an error, never a hang or a crash.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

pub const TRACKER_MAGIC: i32 = 0x2F271;
const PUT: i64 = 3;
const UPDATE_INFO: i64 = 5;
const GET_PENDING_MATCHKEYS: i64 = 7;
const SUCCESS: i64 = 0;
/// A tracker reply longer than this is not one.
const MAX_MESSAGE: i32 = 1 << 20;

pub struct Tracker<S: Read + Write = TcpStream> {
    stream: S,
    addr: String,
}

impl Tracker {
    /// Connects (within `timeout`, which also bounds every later read and write) and checks the
    /// tracker's magic.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Tracker> {
        let io = |e: std::io::Error| Error::tvm(format!("RPC tracker {addr}: {e}"));
        let mut last = Error::tvm(format!("RPC tracker {addr}: no address"));
        for sa in addr.to_socket_addrs().map_err(io)? {
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout)).map_err(io)?;
                    stream.set_write_timeout(Some(timeout)).map_err(io)?;
                    let _ = stream.set_nodelay(true);
                    return Tracker::over(stream, addr);
                }
                Err(e) => last = io(e),
            }
        }
        Err(last)
    }

    /// The socket's descriptor (a process that forks closes it in the child).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.stream)
    }
}

impl<S: Read + Write> Tracker<S> {
    /// The conversation over a connected stream: sends the magic and checks the tracker's.
    pub fn over(mut stream: S, addr: &str) -> Result<Tracker<S>> {
        let io = |e: std::io::Error| Error::tvm(format!("RPC tracker {addr}: {e}"));
        stream.write_all(&TRACKER_MAGIC.to_le_bytes()).map_err(io)?;
        let mut b = [0u8; 4];
        stream.read_exact(&mut b).map_err(io)?;
        if i32::from_le_bytes(b) != TRACKER_MAGIC {
            return Err(Error::tvm(format!("{addr} is not a TVM RPC tracker")));
        }
        Ok(Tracker { stream, addr: addr.to_string() })
    }

    /// Sends one message, returns the reply.
    pub fn request(&mut self, message: &Value) -> Result<Value> {
        let addr = &self.addr;
        let io = |e: std::io::Error| Error::tvm(format!("RPC tracker {addr}: {e}"));
        let text = message.to_string();
        let framed = [&(text.len() as i32).to_le_bytes()[..], text.as_bytes()].concat();
        self.stream.write_all(&framed).map_err(io)?;
        let mut b = [0u8; 4];
        self.stream.read_exact(&mut b).map_err(io)?;
        let n = i32::from_le_bytes(b);
        if !(0..=MAX_MESSAGE).contains(&n) {
            return Err(Error::tvm(format!("RPC tracker {addr}: a reply of {n} bytes")));
        }
        let mut reply = vec![0u8; n as usize];
        self.stream.read_exact(&mut reply).map_err(io)?;
        serde_json::from_slice(&reply).map_err(|e| Error::tvm(format!("RPC tracker {addr}: {e}")))
    }

    fn expect_success(&mut self, message: Value) -> Result<()> {
        match self.request(&message)? {
            Value::Number(n) if n.as_i64() == Some(SUCCESS) => Ok(()),
            other => Err(Error::tvm(format!("RPC tracker {}: {message} answered {other}", self.addr))),
        }
    }

    /// Announces a server of `key` listening on `port` (at `custom_addr`, else the address the
    /// tracker sees).
    pub fn update_info(&mut self, key: &str, port: u16, custom_addr: Option<&str>) -> Result<()> {
        self.expect_success(json!([UPDATE_INFO, {"key": format!("server:{key}"), "addr": [custom_addr, port]}]))
    }

    /// Offers one session of `key` under `match_key`.
    pub fn put(&mut self, key: &str, port: u16, match_key: &str, custom_addr: Option<&str>) -> Result<()> {
        self.expect_success(json!([PUT, key, [port, match_key], custom_addr]))
    }

    /// The match keys this connection offered that no client has taken yet.
    pub fn pending_match_keys(&mut self) -> Result<Vec<String>> {
        match self.request(&json!([GET_PENDING_MATCHKEYS]))? {
            Value::Array(keys) => Ok(keys.into_iter().filter_map(|k| k.as_str().map(str::to_string)).collect()),
            other => Err(Error::tvm(format!("RPC tracker {}: pending keys answered {other}", self.addr))),
        }
    }
}

/// A stream that reads a fixed script of bytes (a tracker's side of a conversation) and takes
/// whatever is written: for tests and the fuzzer.
pub struct Scripted<'a> {
    pub script: &'a [u8],
    pub written: Vec<u8>,
}

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.script.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tracker's bytes for a server's conversation: its magic, then each reply framed.
pub fn tracker_script(replies: &[&str]) -> Vec<u8> {
    let mut out = TRACKER_MAGIC.to_le_bytes().to_vec();
    for r in replies {
        out.extend_from_slice(&(r.len() as i32).to_le_bytes());
        out.extend_from_slice(r.as_bytes());
    }
    out
}

/// A server's conversation (announce, offer, ask what is pending) against a tracker that sends
/// `script`: Ok when every step succeeded.
pub fn converse(script: &[u8]) -> Result<Vec<String>> {
    let mut t = Tracker::over(Scripted { script, written: Vec::new() }, "scripted")?;
    t.update_info("k", 9090, None)?;
    t.put("k", 9090, "k:0.5", Some("10.0.0.1"))?;
    t.pending_match_keys()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_framed_and_bounded() {
        let keys = converse(&tracker_script(&["0", "0", "[\"k:0.5\", 3]"])).unwrap();
        assert_eq!(keys, vec!["k:0.5".to_string()]);
        let script = tracker_script(&["0"]);
        let mut t = Tracker::over(Scripted { script: &script, written: vec![] }, "s").unwrap();
        t.update_info("dev", 9091, Some("1.2.3.4")).unwrap();
        let sent = &t.stream.written[4..];
        let text = r#"[5,{"addr":["1.2.3.4",9091],"key":"server:dev"}]"#;
        assert_eq!(&sent[..4], &(text.len() as i32).to_le_bytes());
        assert_eq!(&sent[4..], text.as_bytes());
        for (script, why) in [
            (tracker_script(&["1"]), "answered 1"),
            (tracker_script(&["0", "0", "{}"]), "pending keys answered"),
            (tracker_script(&["nonsense"]), "expected"),
            (7i32.to_le_bytes().to_vec(), "not a TVM RPC tracker"),
            (tracker_script(&["0", "0"]), "failed to fill whole buffer"),
        ] {
            let e = converse(&script).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
        let mut huge = tracker_script(&[]);
        huge.extend_from_slice(&(MAX_MESSAGE + 1).to_le_bytes());
        assert!(converse(&huge).unwrap_err().to_string().contains("a reply of 1048577 bytes"));
        let mut negative = tracker_script(&[]);
        negative.extend_from_slice(&(-5i32).to_le_bytes());
        assert!(converse(&negative).unwrap_err().to_string().contains("a reply of -5 bytes"));
    }
}
