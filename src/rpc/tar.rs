//! Tar archives read by entry type, for the objects a client uploads to be linked on the device
//! (`export_library` writes a `.tar` of `.o` files when it has no cross compiler). Only regular
//! files and directories are taken, under relative names that stay inside the folder they are
//! unpacked into; any other member (a symbolic or hard link, a device, a FIFO) or name (absolute,
//! with `..`) refuses the whole archive with a message naming the member, before anything is
//! written. Reads ustar, GNU (long names) and pax (`path`, `size`) headers; every field is
//! bounded by the bytes that arrived.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::path::{Component, Path, PathBuf};

const BLOCK: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Relative, with normal components only.
    pub name: PathBuf,
    pub kind: Kind,
    pub data: &'a [u8],
}

fn bad(msg: impl Into<String>) -> Error {
    Error::value(format!("a tar archive the server does not unpack: {}", msg.into()))
}

/// A NUL-terminated field.
fn text(field: &[u8]) -> &[u8] {
    field.split(|b| *b == 0).next().unwrap_or(&[])
}

/// A numeric field: octal digits (spaces and NULs around them), or GNU's base-256 (high bit set).
fn number(field: &[u8], what: &str) -> Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(*b)))
                .ok_or_else(|| bad(format!("a {what} too large")))?;
        }
        return Ok(v);
    }
    let digits = text(field);
    let digits = std::str::from_utf8(digits).map_err(|_| bad(format!("a {what} that is not a number")))?.trim();
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 8).map_err(|_| bad(format!("a {what} '{digits}' that is not octal")))
}

/// A member's name, checked: relative, normal components only (`.` dropped), not empty.
fn checked_name(raw: &[u8]) -> Result<PathBuf> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let name = std::str::from_utf8(raw).map_err(|_| bad(format!("the member name {shown:?} is not UTF-8")))?;
    let path = Path::new(name);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad(format!("the member '{shown}' has an absolute name")))
            }
            Component::ParentDir => return Err(bad(format!("the member '{shown}' has '..' in its name"))),
        }
    }
    Ok(out)
}

/// The value of `key` in a pax extended header's records (`"<len> <key>=<value>\n"`).
fn pax_value<'a>(records: &'a [u8], key: &str) -> Result<Option<&'a [u8]>> {
    let mut rest = records;
    let mut found = None;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ').ok_or_else(|| bad("a malformed pax record"))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|&n| n > space + 1 && n <= rest.len())
            .ok_or_else(|| bad("a pax record of a bad length"))?;
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").ok_or_else(|| bad("a pax record without its newline"))?;
        let eq = record.iter().position(|b| *b == b'=').ok_or_else(|| bad("a pax record without '='"))?;
        if &record[..eq] == key.as_bytes() {
            found = Some(&record[eq + 1..]);
        }
        rest = &rest[len..];
    }
    Ok(found)
}

/// The archive's members, in order (directories included), or why it is refused.
pub fn entries(archive: &[u8]) -> Result<Vec<Entry<'_>>> {
    let mut out = Vec::new();
    let mut at = 0;
    // A long name (GNU `L`, pax `path`) or size (pax) for the next member.
    let mut next_name: Option<Vec<u8>> = None;
    let mut next_size: Option<u64> = None;
    while at + BLOCK <= archive.len() {
        let h = &archive[at..at + BLOCK];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let stored = number(&h[148..156], "checksum")?;
        let sum: u64 =
            h.iter().enumerate().map(|(i, b)| if (148..156).contains(&i) { 32 } else { u64::from(*b) }).sum();
        if stored != sum {
            return Err(bad(format!("a header at byte {at} with a wrong checksum")));
        }
        let size = match next_size.take() {
            Some(s) => s,
            None => number(&h[124..136], "size")?,
        };
        let start = at + BLOCK;
        let len = usize::try_from(size)
            .ok()
            .filter(|&n| n <= archive.len() - start)
            .ok_or_else(|| bad(format!("a member of {size} bytes where {} remain", archive.len() - start)))?;
        let data = &archive[start..start + len];
        at = start + len.div_ceil(BLOCK) * BLOCK;
        let ustar = &h[257..262] == b"ustar";
        let raw_name = match next_name.take() {
            Some(n) => n,
            None => {
                let name = text(&h[..100]);
                let prefix = if ustar { text(&h[345..500]) } else { &[] };
                if prefix.is_empty() {
                    name.to_vec()
                } else {
                    [prefix, b"/", name].concat()
                }
            }
        };
        let shown = String::from_utf8_lossy(&raw_name).into_owned();
        match h[156] {
            b'0' | 0 | b'7' => {
                let name = checked_name(&raw_name)?;
                if name.as_os_str().is_empty() {
                    return Err(bad(format!("a file member with no name ('{shown}')")));
                }
                out.push(Entry { name, kind: Kind::File, data });
            }
            b'5' => {
                let name = checked_name(&raw_name)?;
                // The archive's own top (`./`) names the folder unpacked into.
                if !name.as_os_str().is_empty() {
                    out.push(Entry { name, kind: Kind::Dir, data: &[] });
                }
            }
            b'L' => next_name = Some(text(data).to_vec()),
            b'x' => {
                next_name = pax_value(data, "path")?.map(<[u8]>::to_vec);
                if let Some(s) = pax_value(data, "size")? {
                    let s = std::str::from_utf8(s).ok().and_then(|s| s.parse().ok());
                    next_size = Some(s.ok_or_else(|| bad("a pax size that is not a number"))?);
                }
            }
            // A pax global header: nothing this reader needs.
            b'g' => {}
            b'1' => return Err(bad(format!("the member '{shown}' is a hard link"))),
            b'2' => return Err(bad(format!("the member '{shown}' is a symbolic link"))),
            b'3' | b'4' => return Err(bad(format!("the member '{shown}' is a device"))),
            b'6' => return Err(bad(format!("the member '{shown}' is a FIFO"))),
            t => return Err(bad(format!("the member '{shown}' is of type '{}'", t.escape_ascii()))),
        }
    }
    if next_name.is_some() || next_size.is_some() {
        return Err(bad("a long name or pax header with no member after it"));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A header block for a member (ustar), checksum filled.
    pub(crate) fn header(name: &[u8], kind: u8, size: usize, link: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..name.len()].copy_from_slice(name);
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link);
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    /// A member: name, type, data, link target.
    type Member<'a> = (&'a [u8], u8, &'a [u8], &'a [u8]);

    /// An archive of members.
    pub(crate) fn archive(members: &[Member<'_>]) -> Vec<u8> {
        let mut a = Vec::new();
        for (name, kind, data, link) in members {
            a.extend(header(name, *kind, data.len(), link));
            a.extend_from_slice(data);
            a.resize(a.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        a.resize(a.len() + 2 * BLOCK, 0);
        a
    }

    #[test]
    fn files_and_directories_are_read() {
        let a = archive(&[
            (b"./", b'5', b"", b""),
            (b"./lib0.o", b'0', b"\x7fELF0", b""),
            (b"d/", b'5', b"", b""),
            (b"d/x.o", 0, b"\x7fELF-x", b""),
        ]);
        let e = entries(&a).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].name.as_path(), e[0].kind, e[0].data), (Path::new("lib0.o"), Kind::File, &b"\x7fELF0"[..]));
        assert_eq!((e[1].name.as_path(), e[1].kind), (Path::new("d"), Kind::Dir));
        assert_eq!((e[2].name.as_path(), e[2].data), (Path::new("d/x.o"), &b"\x7fELF-x"[..]));
        assert_eq!(entries(&[]).unwrap(), vec![], "an empty archive");
    }

    #[test]
    fn the_system_tar_is_read_as_it_writes() {
        let dir = std::env::temp_dir().join(format!("tvmrt-tar-{}", std::process::id()));
        // Longer than a header's name field: a prefix (ustar), a long-name record (GNU), a pax
        // path.
        let long = format!("{}/{}", "d".repeat(60), "n".repeat(90));
        std::fs::create_dir_all(dir.join("in/sub").join(&long).parent().unwrap()).unwrap();
        std::fs::write(dir.join("in/a.o"), b"alpha").unwrap();
        std::fs::write(dir.join("in/sub").join(&long), vec![7u8; 1000]).unwrap();
        for format in ["gnu", "ustar", "pax"] {
            let out = dir.join(format!("{format}.tar"));
            let ok = std::process::Command::new("tar")
                .args(["--format", format, "-cf"])
                .arg(&out)
                .arg("-C")
                .arg(dir.join("in"))
                .args(["a.o", "sub"])
                .status()
                .unwrap();
            assert!(ok.success());
            let bytes = std::fs::read(&out).unwrap();
            let e = entries(&bytes).unwrap();
            let names: Vec<_> =
                e.iter().map(|e| (e.name.to_string_lossy().into_owned(), e.kind, e.data.len())).collect();
            assert_eq!(
                names,
                vec![
                    ("a.o".into(), Kind::File, 5),
                    ("sub".into(), Kind::Dir, 0),
                    (format!("sub/{}", "d".repeat(60)), Kind::Dir, 0),
                    (format!("sub/{long}"), Kind::File, 1000)
                ],
                "{format}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn links_devices_and_names_that_climb_are_refused() {
        let cases: [(&[u8], u8, &str); 8] = [
            (b"esc", b'2', "symbolic link"),
            (b"hard", b'1', "hard link"),
            (b"tty", b'3', "device"),
            (b"disk", b'4', "device"),
            (b"fifo", b'6', "FIFO"),
            (b"/etc/passwd", b'0', "absolute"),
            (b"../up.o", b'0', "'..'"),
            (b"a/../../up.o", b'0', "'..'"),
        ];
        for (name, kind, why) in cases {
            let a = archive(&[(b"ok.o", b'0', b"fine", b""), (name, kind, b"", b"/")]);
            let e = entries(&a).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(&*String::from_utf8_lossy(name)), "{why}: {e}");
        }
        let a = archive(&[(b"x", b'V', b"", b"")]);
        assert!(entries(&a).unwrap_err().to_string().contains("of type 'V'"));
    }

    #[test]
    fn damaged_archives_are_refused_not_misread() {
        let good = archive(&[(b"a.o", b'0', &[1u8; 700], b"")]);
        for cut in [BLOCK, BLOCK + 100, 2 * BLOCK - 1] {
            assert!(entries(&good[..cut]).unwrap_err().to_string().contains("remain"), "cut at {cut}");
        }
        let mut flipped = good.clone();
        flipped[3] ^= 1;
        assert!(entries(&flipped).unwrap_err().to_string().contains("checksum"));
        // A size past the archive, in octal and base-256.
        let mut huge = header(b"a.o", b'0', 0, b"");
        huge[124..136].copy_from_slice(&[0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        huge[148..156].copy_from_slice(b"        ");
        let sum: u32 = huge.iter().map(|b| u32::from(*b)).sum();
        huge[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        assert!(entries(&huge).is_err());
        // A GNU long name with no member after it.
        let a = archive(&[(b"././@LongLink", b'L', b"name\0", b"")]);
        assert!(entries(&a).unwrap_err().to_string().contains("no member after it"));
        // A size in base-256 (GNU's, for sizes octal cannot hold) is read as one.
        let mut big = header(b"a.o", b'0', 0, b"");
        let mut size = [0u8; 12];
        size[0] = 0x80;
        size[10..].copy_from_slice(&700u16.to_be_bytes());
        big[124..136].copy_from_slice(&size);
        big[148..156].copy_from_slice(b"        ");
        let sum: u32 = big.iter().map(|b| u32::from(*b)).sum();
        big[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        big.extend_from_slice(&[9u8; 700]);
        big.resize(big.len().div_ceil(BLOCK) * BLOCK + 2 * BLOCK, 0);
        let e = entries(&big).unwrap();
        assert_eq!((e[0].data.len(), e[0].data[699]), (700, 9));
        assert_eq!(number(&[0xff, 1], "size").unwrap(), 0x7f01, "the marker bit is not part of the value");
        // Record lengths that leave no room for a key are refused as such.
        for bad in [&b"2 x"[..], b"1 x", b"2 \n"] {
            let e = pax_value(bad, "path").unwrap_err().to_string();
            assert!(e.contains("bad length"), "{bad:?}: {e}");
        }
        assert!(pax_value(b"99 path=x\n", "path").is_err());
        assert!(pax_value(b"8 path=x\n", "path").is_err(), "no newline where the length ends");
        assert_eq!(pax_value(b"11 path=ab\n", "path").unwrap(), Some(&b"ab"[..]));
    }
}
