//! What an RPC server reads outside its sessions, as fuzz targets: a client's handshake (fed whole,
//! byte by byte and in halves, to one verdict; options within their bounds), a tracker's replies
//! to a server's conversation, and tar archives a client uploads (entries inside the archive,
//! names that stay inside the folder they unpack into).

#![forbid(unsafe_code)]

use super::Target;

/// Seeds of the targets an RPC server reads outside its sessions: handshakes (a client of the
/// key, with options, of another key), a tracker's side of a server's conversation, tar archives
/// (files, a directory, a long name).
pub(super) fn seeds(target: Target) -> Option<Vec<Vec<u8>>> {
    use crate::rpc::{handshake::client_hello, tracker::tracker_script};
    Some(match target {
        Target::Handshake => vec![
            client_hello("k"),
            client_hello("k -timeout=2.5 -other"),
            client_hello("other -timeout=1e3"),
            client_hello(""),
        ],
        Target::Tracker => vec![
            tracker_script(&["0", "0", "[\"k:0.5\"]"]),
            tracker_script(&["0", "0", "[]"]),
            tracker_script(&["0", "1"]),
        ],
        Target::Tar => {
            let file = |name: &[u8], kind: u8, data: &[u8]| {
                let mut h = vec![0u8; 512];
                h[..name.len()].copy_from_slice(name);
                h[100..107].copy_from_slice(b"0000644");
                h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
                h[156] = kind;
                h[257..263].copy_from_slice(b"ustar\0");
                h[148..156].copy_from_slice(b"        ");
                let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
                h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
                h.extend_from_slice(data);
                h.resize(h.len().div_ceil(512) * 512, 0);
                h
            };
            let end = vec![0u8; 1024];
            vec![
                [file(b"lib0.o", b'0', b"\x7fELF object"), end.clone()].concat(),
                [file(b"d/", b'5', b""), file(b"d/x.o", b'0', &[1; 700]), end.clone()].concat(),
                [file(b"././@LongLink", b'L', b"long/name.o\0"), file(b"long", b'0', b"data"), end].concat(),
            ]
        }
        _ => return None,
    })
}

/// A handshake's bytes fed whole, byte by byte and in halves reach one verdict; a client's key
/// accepted has options within their bounds. Accepted: a complete key.
pub(super) fn run_handshake(data: &[u8]) -> bool {
    use crate::rpc::handshake::{answer, ClientHello, Hello, Verdict, MAX_SESSION_TIMEOUT, RPC_MAGIC};
    let whole = ClientHello::new().feed(data).clone();
    let mut bytewise = ClientHello::new();
    for b in data {
        assert!(bytewise.wants() <= 8 + crate::rpc::handshake::MAX_KEY, "a handshake asking for more than a key");
        bytewise.feed(std::slice::from_ref(b));
    }
    assert_eq!(bytewise.hello(), &whole, "fed byte by byte");
    let mut halves = ClientHello::new();
    let (a, b) = data.split_at(data.len() / 2);
    halves.feed(a);
    assert_eq!(halves.feed(b), &whole, "fed in halves");
    let Hello::Complete(key) = whole else { return false };
    match answer(&key, "k", "srv") {
        Verdict::Accepted { reply, options } => {
            assert_eq!(reply[..4], RPC_MAGIC.to_le_bytes());
            assert!(options.timeout.is_none_or(|t| t > std::time::Duration::ZERO && t <= MAX_SESSION_TIMEOUT));
        }
        Verdict::Refused { reply, why } => {
            assert_eq!(reply[..4], RPC_MAGIC.to_le_bytes());
            assert!(why.contains("-timeout="), "{why}");
        }
        Verdict::Mismatch { reply } => assert_eq!(reply.len(), 4),
    }
    true
}

/// An archive's entries, when taken, are relative names of normal components only, their bytes
/// inside the archive. Accepted: the archive was taken.
pub(super) fn run_tar(data: &[u8]) -> bool {
    let Ok(entries) = crate::rpc::tar::entries(data) else { return false };
    let range = data.as_ptr_range();
    for e in &entries {
        assert!(e.name.components().all(|c| matches!(c, std::path::Component::Normal(_))), "{:?}", e.name);
        assert!(!e.name.as_os_str().is_empty() || e.kind == crate::rpc::tar::Kind::Dir);
        let inside = e.data.is_empty() || (range.contains(&e.data.as_ptr()) && e.data.as_ptr_range().end <= range.end);
        assert!(inside, "an entry's bytes outside the archive");
    }
    true
}
