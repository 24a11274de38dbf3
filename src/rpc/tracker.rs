//! A server's side of TVM's RPC tracker: it announces itself and the key it serves, and offers a
//! fresh match key for each session; a client asks the tracker for a server by key. Messages are
//! `i32 length` + JSON after the tracker's magic.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const TRACKER_MAGIC: i32 = 0x2F271;
const PUT: i64 = 3;
const UPDATE_INFO: i64 = 5;
const GET_PENDING_MATCHKEYS: i64 = 7;
const SUCCESS: i64 = 0;
/// A tracker reply longer than this is not one.
const MAX_MESSAGE: i32 = 1 << 20;

pub struct Tracker {
    stream: TcpStream,
    addr: String,
}

impl Tracker {
    /// Connects and checks the tracker's magic.
    pub fn connect(addr: &str) -> Result<Tracker> {
        let io = |e: std::io::Error| Error::tvm(format!("RPC tracker {addr}: {e}"));
        let mut stream = TcpStream::connect(addr).map_err(io)?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(io)?;
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
        let io = |e: std::io::Error| Error::tvm(format!("RPC tracker {}: {e}", self.addr));
        let text = message.to_string();
        self.stream.write_all(&(text.len() as i32).to_le_bytes()).map_err(io)?;
        self.stream.write_all(text.as_bytes()).map_err(io)?;
        let mut b = [0u8; 4];
        self.stream.read_exact(&mut b).map_err(io)?;
        let n = i32::from_le_bytes(b);
        if !(0..=MAX_MESSAGE).contains(&n) {
            return Err(Error::tvm(format!("RPC tracker {}: a reply of {n} bytes", self.addr)));
        }
        let mut reply = vec![0u8; n as usize];
        self.stream.read_exact(&mut reply).map_err(io)?;
        serde_json::from_slice(&reply).map_err(|e| Error::tvm(format!("RPC tracker {}: {e}", self.addr)))
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
