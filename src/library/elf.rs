//! A look at a shared object's ELF headers before `dlopen` maps it. The loader maps segments by
//! the offsets the headers give; a file cut short inside one maps pages past its end, and the
//! first touch of them (a relocation, a constructor) kills the process with SIGBUS. Checking that
//! every loadable segment lies inside the file turns that into an error.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom};

const PT_LOAD: u32 = 1;
/// Program headers read at most: real libraries have a dozen.
const MAX_PHNUM: u16 = 4096;

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What `export_library` writes when the file name ends in `.tar` (object files, for a host to
/// link: the cross-compiling route) or what an `ar` archive is: code no loader can run as it is.
/// Named here, where dlopen would answer "invalid ELF header".
fn refuse_archives(path: &str, file: &mut std::fs::File, head: &[u8]) -> Result<()> {
    let mut ustar = [0u8; 5];
    let tar = file.seek(SeekFrom::Start(257)).is_ok() && file.read_exact(&mut ustar).is_ok() && &ustar == b"ustar";
    if tar {
        return Err(Error::value(format!(
            "cannot load library '{path}': it is a tar archive of object files (export_library's .tar form, for \
             linking elsewhere); link them into a shared library first: mkdir objs && tar -xf {path} -C objs && \
             cc -shared -o lib.so objs/*.o (or export_library(\"lib.so\"))"
        )));
    }
    if head.starts_with(b"!<arch>\n") {
        return Err(Error::value(format!(
            "cannot load library '{path}': it is a static archive (.a); link it into a shared library first: \
             cc -shared -o lib.so -Wl,--whole-archive {path} -Wl,--no-whole-archive"
        )));
    }
    Ok(())
}

/// Checks that `path`, if it is a 64-bit little-endian ELF file, holds every byte its loadable
/// segments and section table claim. Files of another format are left to `dlopen` to judge.
pub fn check_complete(path: &str) -> Result<()> {
    let bad = |what: String| Error::value(format!("cannot load library '{path}': {what}"));
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut header = [0u8; 64];
    let got = file.read(&mut header).map_err(|e| Error::io(path, e))?;
    if got < 4 || &header[..4] != b"\x7fELF" {
        return refuse_archives(path, &mut file, &header[..got]);
    }
    // ELFCLASS64, ELFDATA2LSB: the only kind this x86-64 runtime can load anyway.
    if got < 64 || header[4] != 2 || header[5] != 1 {
        return if got < 64 && header[4] == 2 {
            Err(bad(format!("the file is truncated: {size} bytes, shorter than its ELF header")))
        } else {
            Ok(())
        };
    }
    let (phoff, shoff) = (le_u64(&header, 0x20), le_u64(&header, 0x28));
    let (phentsize, phnum) = (le_u16(&header, 0x36), le_u16(&header, 0x38));
    let (shentsize, shnum) = (le_u16(&header, 0x3a), le_u16(&header, 0x3c));
    let table_end = |off: u64, entsize: u16, num: u16| off.checked_add(u64::from(entsize) * u64::from(num));
    match table_end(shoff, shentsize, shnum) {
        Some(end) if end <= size => {}
        _ => {
            return Err(bad(format!(
                "the file is truncated: {size} bytes, but its section table ends at byte {}",
                shoff.saturating_add(u64::from(shentsize) * u64::from(shnum))
            )))
        }
    }
    if phentsize < 56 || phnum > MAX_PHNUM {
        return Err(bad(format!("malformed ELF program headers ({phnum} of {phentsize} bytes)")));
    }
    match table_end(phoff, phentsize, phnum) {
        Some(end) if end <= size => {}
        _ => return Err(bad(format!("the file is truncated: {size} bytes, shorter than its program headers"))),
    }
    let mut table = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff)).and_then(|_| file.read_exact(&mut table)).map_err(|e| Error::io(path, e))?;
    for (k, ph) in table.chunks_exact(usize::from(phentsize)).enumerate() {
        if le_u32(ph, 0) != PT_LOAD {
            continue;
        }
        let (offset, filesz) = (le_u64(ph, 0x08), le_u64(ph, 0x20));
        if offset.checked_add(filesz).is_none_or(|end| end > size) {
            return Err(bad(format!(
                "the file is truncated: {size} bytes, but loadable segment {k} spans bytes {offset}..{}",
                offset.saturating_add(filesz)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_libraries_pass_and_truncated_ones_are_named() {
        let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mlp_b1/lib.so");
        check_complete(lib).unwrap();
        let bytes = std::fs::read(lib).unwrap();
        let dir = std::env::temp_dir().join(format!("tvmrt-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for keep in [10, 40, 64, 200, bytes.len() / 2, bytes.len() - 1] {
            let cut = dir.join(format!("cut{keep}.so"));
            std::fs::write(&cut, &bytes[..keep]).unwrap();
            let e = check_complete(cut.to_str().unwrap()).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("truncated") || e.contains("malformed"), "{keep} bytes: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
