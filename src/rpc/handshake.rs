//! The socket handshake before any packet: the client sends the RPC magic and its key
//! (`client:<match key> [options]`), the server answers with the magic and its own key
//! (`server:<key>`) when the match key is its own, or a mismatch code.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::time::Duration;

pub const RPC_MAGIC: i32 = 0xFF271;
pub const RPC_DUPLICATE: i32 = 0xFF272;
pub const RPC_MISMATCH: i32 = 0xFF273;
/// A key longer than this is not a key.
const MAX_KEY: i32 = 4096;

/// What the server learnt from a client it accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The client's key, as sent (`client:...`).
    pub client_key: String,
    /// `-timeout=<seconds>` from the client's options, if any.
    pub timeout: Option<Duration>,
}

fn read_i32(s: &mut impl Read) -> Result<i32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b).map_err(|e| Error::tvm(format!("RPC handshake: {e}")))?;
    Ok(i32::from_le_bytes(b))
}

/// The parts in one write (one segment on the wire, as peers reading with a timeout expect).
fn write_all(s: &mut impl Write, parts: &[&[u8]]) -> Result<()> {
    s.write_all(&parts.concat()).map_err(|e| Error::tvm(format!("RPC handshake: {e}")))
}

/// The server's side: `Ok(None)` for a client to drop without a word (not an RPC client), or a
/// client whose key is not ours (told so with the mismatch code).
pub fn accept(s: &mut (impl Read + Write), match_key: &str, server_key: &str) -> Result<Option<Accepted>> {
    if read_i32(s)? != RPC_MAGIC {
        return Ok(None);
    }
    let n = read_i32(s)?;
    if !(0..=MAX_KEY).contains(&n) {
        return Ok(None);
    }
    let mut key = vec![0u8; n as usize];
    s.read_exact(&mut key).map_err(|e| Error::tvm(format!("RPC handshake: {e}")))?;
    let key = String::from_utf8_lossy(&key).into_owned();
    let mut words = key.split_whitespace();
    if words.next() != Some(format!("client:{match_key}").as_str()) {
        write_all(s, &[&RPC_MISMATCH.to_le_bytes()])?;
        return Ok(None);
    }
    let timeout = words
        .filter_map(|w| w.strip_prefix("-timeout="))
        .filter_map(|t| t.parse::<f64>().ok())
        .find(|t| *t > 0.0)
        .map(Duration::from_secs_f64);
    let reply = format!("server:{server_key}");
    write_all(s, &[&RPC_MAGIC.to_le_bytes(), &(reply.len() as i32).to_le_bytes(), reply.as_bytes()])?;
    Ok(Some(Accepted { client_key: key, timeout }))
}

/// The client's side: sends `client:<key>`; returns the server's key.
pub fn connect(s: &mut (impl Read + Write), key: &str, url: &str) -> Result<String> {
    let key = format!("client:{key}");
    write_all(s, &[&RPC_MAGIC.to_le_bytes(), &(key.len() as i32).to_le_bytes(), key.as_bytes()])?;
    match read_i32(s)? {
        RPC_MAGIC => {}
        RPC_MISMATCH => return Err(Error::tvm(format!("URL {url} cannot find server that matches key={key}"))),
        RPC_DUPLICATE => return Err(Error::tvm(format!("URL {url} server already have key={key}"))),
        _ => return Err(Error::tvm(format!("URL {url} is not TVM RPC server"))),
    }
    let n = read_i32(s)?;
    if !(0..=MAX_KEY).contains(&n) {
        return Err(Error::tvm(format!("URL {url}: a server key of {n} bytes")));
    }
    let mut remote = vec![0u8; n as usize];
    s.read_exact(&mut remote).map_err(|e| Error::tvm(format!("RPC handshake: {e}")))?;
    Ok(String::from_utf8_lossy(&remote).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn keys_match_or_the_client_is_told() {
        let (mut c, mut s) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || accept(&mut s, "x1", "x1").unwrap());
        assert_eq!(connect(&mut c, "x1 -timeout=2", "u").unwrap(), "server:x1");
        let a = server.join().unwrap().unwrap();
        assert_eq!((a.client_key.as_str(), a.timeout), ("client:x1 -timeout=2", Some(Duration::from_secs(2))));
        let (mut c, mut s) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || accept(&mut s, "x1", "x1").unwrap());
        let e = connect(&mut c, "other", "u").unwrap_err().to_string();
        assert!(e.contains("cannot find server that matches key=client:other"), "{e}");
        assert!(server.join().unwrap().is_none());
        // Not an RPC client: dropped without a reply.
        let (mut c, mut s) = UnixStream::pair().unwrap();
        c.write_all(&7i32.to_le_bytes()).unwrap();
        assert!(accept(&mut s, "", "").unwrap().is_none());
    }
}
