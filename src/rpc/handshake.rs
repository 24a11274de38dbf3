//! The socket handshake before any packet: the client sends the RPC magic and its key
//! (`client:<match key> [options]`), the server answers with the magic and its own key
//! (`server:<key>`) when the match key is its own, or a mismatch code.
//!
//! The server's side is a parser with no socket in it ([`ClientHello`], then [`answer`]): bytes in as they
//! arrive, a verdict out, so a listening server can feed many connections at once, each against a
//! deadline of its own, and a client that dribbles its bytes holds up nobody. Everything in a key
//! is bounded before it is used: a key longer than [`MAX_KEY`] is not a key, and the options a
//! client asks for are checked against their ranges ([`SessionOptions::parse`]).

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::time::Duration;

pub const RPC_MAGIC: i32 = 0xFF271;
pub const RPC_DUPLICATE: i32 = 0xFF272;
pub const RPC_MISMATCH: i32 = 0xFF273;
/// A key longer than this is not a key.
pub const MAX_KEY: usize = 4096;
/// The longest session a client may ask for with `-timeout=` (a week): anything longer is
/// refused, not cut short, so a client never runs under a limit it did not ask for.
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a client asked of its session in the options after its key.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOptions {
    /// `-timeout=<seconds>`: the session is ended past it.
    pub timeout: Option<Duration>,
}

impl SessionOptions {
    /// The options of a key's words after the first. `-timeout=` takes seconds in
    /// (0, [`MAX_SESSION_TIMEOUT`]]; anything else there (not a number, not finite, zero, negative,
    /// too long) is an error saying so. Other options are not this server's and are ignored, as
    /// upstream's servers do.
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> std::result::Result<SessionOptions, String> {
        let mut timeout = None;
        for word in words {
            let Some(text) = word.strip_prefix("-timeout=") else { continue };
            let seconds: f64 = text.parse().map_err(|_| format!("-timeout={text} is not a number of seconds"))?;
            let max = MAX_SESSION_TIMEOUT.as_secs_f64();
            if !(seconds > 0.0 && seconds <= max) {
                return Err(format!("-timeout={text}: a session's timeout is more than 0 and at most {max} seconds"));
            }
            timeout = Some(Duration::from_secs_f64(seconds));
        }
        Ok(SessionOptions { timeout })
    }
}

/// What a connection's first bytes say.
#[derive(Debug, Clone, PartialEq)]
pub enum Hello {
    /// Not enough bytes yet.
    Pending,
    /// Not an RPC client (another magic, a key of no size we take): closed without a word.
    NotAClient,
    /// A client's key, whole (`client:<match key> [options]`).
    Complete(String),
}

/// The server's side of one connection's handshake: its first bytes, fed as they arrive.
#[derive(Default)]
pub struct ClientHello {
    got: Vec<u8>,
    hello: Option<Hello>,
}

impl ClientHello {
    pub fn new() -> ClientHello {
        ClientHello::default()
    }

    /// How many more bytes the handshake can use: reading more than this would take bytes of the
    /// session's first packet.
    pub fn wants(&self) -> usize {
        if self.hello.is_some() {
            return 0;
        }
        match self.got.len() {
            n if n < 8 => 8 - n,
            n => (key_len(&self.got) + 8).saturating_sub(n),
        }
    }

    /// Takes the bytes that arrived (at most [`wants`](Self::wants) of them are used) and says
    /// where the handshake stands.
    pub fn feed(&mut self, bytes: &[u8]) -> &Hello {
        let mut rest = bytes;
        // The header first, then (its length known) the key.
        while self.hello.is_none() && !rest.is_empty() {
            let take = rest.len().min(self.wants());
            if take == 0 {
                break;
            }
            self.got.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            self.hello = self.decide();
        }
        self.hello.as_ref().unwrap_or(&Hello::Pending)
    }

    pub fn hello(&self) -> &Hello {
        self.hello.as_ref().unwrap_or(&Hello::Pending)
    }

    fn decide(&self) -> Option<Hello> {
        if self.got.len() >= 4 && i32::from_le_bytes(word(&self.got, 0)) != RPC_MAGIC {
            return Some(Hello::NotAClient);
        }
        if self.got.len() < 8 {
            return None;
        }
        let n = i32::from_le_bytes(word(&self.got, 4));
        if n < 0 || n as usize > MAX_KEY {
            return Some(Hello::NotAClient);
        }
        if self.got.len() < 8 + n as usize {
            return None;
        }
        Some(Hello::Complete(String::from_utf8_lossy(&self.got[8..]).into_owned()))
    }
}

/// What the server does with a client whose key arrived whole.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A client holding another key: send `reply` (the mismatch code), then close.
    Mismatch { reply: Vec<u8> },
    /// A client whose options cannot be served: send `reply` (the handshake's own), then tell it
    /// `why` in an exception packet answering its first packet, and close.
    Refused { reply: Vec<u8>, why: String },
    /// A client of this server: send `reply`; the session starts.
    Accepted { reply: Vec<u8>, options: SessionOptions },
}

/// The server's answer to `client_key` when it serves sessions of `match_key` and calls itself
/// `server_key`.
pub fn answer(client_key: &str, match_key: &str, server_key: &str) -> Verdict {
    let mut words = client_key.split_whitespace();
    if words.next() != Some(format!("client:{match_key}").as_str()) {
        return Verdict::Mismatch { reply: RPC_MISMATCH.to_le_bytes().to_vec() };
    }
    let parsed = SessionOptions::parse(words);
    let key = format!("server:{server_key}");
    let reply = [&RPC_MAGIC.to_le_bytes()[..], &(key.len() as i32).to_le_bytes(), key.as_bytes()].concat();
    match parsed {
        Ok(options) => Verdict::Accepted { reply, options },
        Err(why) => Verdict::Refused { reply, why },
    }
}

fn word(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

/// The key length of a header whose 8 bytes have arrived (0 for a length no key has: the verdict
/// says so before more is read).
fn key_len(head: &[u8]) -> usize {
    usize::try_from(i32::from_le_bytes(word(head, 4))).ok().filter(|&n| n <= MAX_KEY).unwrap_or(0)
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
    if !(0..=MAX_KEY as i32).contains(&n) {
        return Err(Error::tvm(format!("URL {url}: a server key of {n} bytes")));
    }
    let mut remote = vec![0u8; n as usize];
    s.read_exact(&mut remote).map_err(|e| Error::tvm(format!("RPC handshake: {e}")))?;
    Ok(String::from_utf8_lossy(&remote).into_owned())
}

/// A client's handshake bytes for `key` (`client:` is prefixed), as [`connect`] sends them.
pub fn client_hello(key: &str) -> Vec<u8> {
    let key = format!("client:{key}");
    [&RPC_MAGIC.to_le_bytes()[..], &(key.len() as i32).to_le_bytes(), key.as_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn hello_of(bytes: &[u8]) -> Hello {
        ClientHello::new().feed(bytes).clone()
    }

    fn verdict_of(key: &str) -> Verdict {
        let Hello::Complete(k) = hello_of(&client_hello(key)) else { panic!("{key}") };
        answer(&k, "k", "srv")
    }

    fn accepted_timeout(key: &str) -> Option<Duration> {
        match verdict_of(key) {
            Verdict::Accepted { options, .. } => options.timeout,
            v => panic!("{key}: {v:?}"),
        }
    }

    fn refusal(key: &str) -> String {
        match verdict_of(key) {
            Verdict::Refused { why, reply } => {
                assert_eq!(reply, [&RPC_MAGIC.to_le_bytes()[..], &10i32.to_le_bytes(), b"server:srv"].concat());
                why
            }
            v => panic!("{key}: {v:?}"),
        }
    }

    #[test]
    fn a_client_of_this_key_is_accepted_with_its_reply() {
        assert_eq!(
            hello_of(&client_hello("k -timeout=2.5 -other")),
            Hello::Complete("client:k -timeout=2.5 -other".into())
        );
        let Verdict::Accepted { reply, options } = verdict_of("k -timeout=2.5 -other") else { panic!() };
        assert_eq!(reply, [&RPC_MAGIC.to_le_bytes()[..], &10i32.to_le_bytes(), b"server:srv"].concat());
        assert_eq!(options.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(accepted_timeout("k"), None);
        assert_eq!(accepted_timeout("k -timeout=604800"), Some(MAX_SESSION_TIMEOUT), "the bound itself");
        assert_eq!(accepted_timeout("k -timeout=1e-3"), Some(Duration::from_millis(1)));
        assert_eq!(accepted_timeout("k -timeout=1 -timeout=3"), Some(Duration::from_secs(3)), "the last one");
    }

    #[test]
    fn timeouts_out_of_range_are_refused_with_a_reason() {
        for bad in ["inf", "-inf", "nan", "NaN", "1e20", "18446744073709551616", "604800.5", "0", "-0", "-1", ""] {
            let why = refusal(&format!("k -timeout={bad}"));
            assert!(why.contains(&format!("-timeout={bad}")), "{bad}: {why}");
        }
        assert!(refusal("k -timeout=abc").contains("not a number"));
        assert!(refusal("k -timeout=1e20").contains("at most 604800 seconds"));
        assert!(refusal("k -timeout=2 -timeout=inf").contains("inf"), "every occurrence is checked");
    }

    #[test]
    fn another_key_or_magic_or_size_is_no_session() {
        assert_eq!(verdict_of("other"), Verdict::Mismatch { reply: RPC_MISMATCH.to_le_bytes().to_vec() });
        assert!(matches!(verdict_of("kk"), Verdict::Mismatch { .. }), "a prefix is no match");
        assert!(matches!(answer("client:", "", ""), Verdict::Accepted { .. }), "the empty key");
        assert_eq!(hello_of(&7i32.to_le_bytes()), Hello::NotAClient);
        let mut long = RPC_MAGIC.to_le_bytes().to_vec();
        long.extend_from_slice(&(MAX_KEY as i32 + 1).to_le_bytes());
        assert_eq!(hello_of(&long), Hello::NotAClient);
        let mut negative = RPC_MAGIC.to_le_bytes().to_vec();
        negative.extend_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(hello_of(&negative), Hello::NotAClient);
        // A key of no bytes: whole at once (and no server's key).
        let mut empty = RPC_MAGIC.to_le_bytes().to_vec();
        empty.extend_from_slice(&0i32.to_le_bytes());
        assert_eq!(hello_of(&empty), Hello::Complete(String::new()));
        assert!(matches!(answer("", "", ""), Verdict::Mismatch { .. }));
        // The longest key taken.
        let key = format!("k{}", " ".repeat(MAX_KEY - "client:k".len()));
        assert!(matches!(hello_of(&client_hello(&key)), Hello::Complete(_)));
    }

    #[test]
    fn bytes_one_at_a_time_reach_the_same_hello_and_no_further() {
        let hello = client_hello("k -timeout=4");
        let mut h = ClientHello::new();
        for (i, b) in hello.iter().enumerate() {
            let header_left = 8usize.saturating_sub(i);
            assert_eq!(h.wants(), if header_left > 0 { header_left } else { hello.len() - i }, "after {i} bytes");
            let v = h.feed(std::slice::from_ref(b)).clone();
            assert_eq!(v == Hello::Pending, i + 1 < hello.len(), "after {} bytes: {v:?}", i + 1);
        }
        assert_eq!(h.hello(), &Hello::Complete("client:k -timeout=4".into()));
        assert_eq!(h.wants(), 0);
        // What follows the handshake (the session's first packet) is not taken.
        let mut more = hello.clone();
        more.extend_from_slice(b"first packet");
        assert_eq!(hello_of(&more), Hello::Complete("client:k -timeout=4".into()));
    }

    #[test]
    fn a_client_is_told_what_the_server_answered() {
        for (code, want) in [
            (RPC_MISMATCH, "cannot find server that matches key=client:k"),
            (RPC_DUPLICATE, "server already have key=client:k"),
            (0x1234, "is not TVM RPC server"),
        ] {
            let (mut c, mut s) = UnixStream::pair().unwrap();
            s.write_all(&code.to_le_bytes()).unwrap();
            let e = connect(&mut c, "k", "u").unwrap_err().to_string();
            assert!(e.contains(want), "{code:#x}: {e}");
        }
        let (mut c, mut s) = UnixStream::pair().unwrap();
        s.write_all(&[&RPC_MAGIC.to_le_bytes()[..], &(-1i32).to_le_bytes()].concat()).unwrap();
        assert!(connect(&mut c, "k", "u").unwrap_err().to_string().contains("a server key of -1 bytes"));
    }

    #[test]
    fn the_client_side_meets_the_server_side() {
        for (client, accepted) in [("x1 -timeout=2", true), ("other", false)] {
            let (mut c, mut s) = UnixStream::pair().unwrap();
            let server = std::thread::spawn(move || {
                let mut h = ClientHello::new();
                let mut b = [0u8; 1];
                while h.wants() > 0 {
                    s.read_exact(&mut b).unwrap();
                    h.feed(&b);
                }
                let Hello::Complete(key) = h.hello() else { panic!() };
                let (Verdict::Accepted { reply, .. } | Verdict::Mismatch { reply } | Verdict::Refused { reply, .. }) =
                    answer(key, "x1", "x1");
                s.write_all(&reply).unwrap();
            });
            let got = connect(&mut c, client, "u");
            server.join().unwrap();
            if accepted {
                assert_eq!(got.unwrap(), "server:x1");
            } else {
                let e = got.unwrap_err().to_string();
                assert!(e.contains("cannot find server that matches key=client:other"), "{e}");
            }
        }
    }
}
