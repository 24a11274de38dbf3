//! Libraries that call this runtime's C API by name (system-lib builds: a static constructor calls
//! `TVMBackendRegisterSystemLibSymbol`, kernels call `TVMBackend*`), loaded by a host that keeps
//! this runtime local (Python's ctypes, the `tvmrt` package), where those names are not in the
//! global scope, or are another TVM runtime's (TVM's own Python loads its library globally).
//!
//! Making this runtime's image global would answer the names, but for the rest of the process:
//! every library loaded after it, TVM's own included, would bind its C API and C++ names to this
//! runtime's (TVM's then aborts, registering globals that are "already registered"). Instead the
//! library is loaded from a copy whose references to those names are renamed, each to a name of
//! the same length no C or C++ code can spell (it holds a `~`), and a small object made here
//! answers just those names, each an absolute symbol at this runtime's function. That object is
//! global, the runtime stays local, and no other library sees a name of ours: the two runtimes
//! stay apart in every order.
//!
//! Only the bytes of names change in the copy (the dynamic string table), so every offset, hash
//! and relocation of the library stays as it was; hash tables list only the names a library
//! defines, never those it refers to.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom};

const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const SHN_ABS: u16 = 0xfff1;
const STB_GLOBAL: u8 = 1;
const STT_FUNC: u8 = 2;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A name a library refers to but does not define, and where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    /// The file offset of the name's first byte (in the dynamic string table).
    pub at: usize,
}

/// The names a 64-bit little-endian ELF library refers to without defining them (its undefined
/// dynamic symbols), from its section headers: only the header, the section table and the
/// dynamic symbol and string tables are read (a library may hold hundreds of megabytes of
/// weights).
pub fn undefined_names(file: &mut (impl Read + Seek)) -> Result<Vec<Reference>> {
    let bad = || Error::value("not a 64-bit little-endian ELF library with a dynamic symbol table");
    let mut read_at = |at: u64, len: usize| -> Result<Vec<u8>> {
        if len > 1 << 30 {
            return Err(bad());
        }
        let mut b = vec![0u8; len];
        file.seek(SeekFrom::Start(at)).and_then(|_| file.read_exact(&mut b)).map_err(|_| bad())?;
        Ok(b)
    };
    let head = read_at(0, 64)?;
    if head.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err(bad());
    }
    let shoff = u64_at(&head, 0x28).ok_or_else(bad)?;
    let (shentsize, shnum) = (u16_at(&head, 0x3a).ok_or_else(bad)? as usize, u16_at(&head, 0x3c).ok_or_else(bad)?);
    if shentsize < 64 {
        return Err(bad());
    }
    let table = read_at(shoff, shentsize * usize::from(shnum))?;
    let section = |k: usize| -> Option<(u32, u64, usize, u32, usize)> {
        let s = k.checked_mul(shentsize)?;
        let kind = u32_at(&table, s + 4)?;
        let (offset, size) = (u64_at(&table, s + 0x18)?, u64_at(&table, s + 0x20)? as usize);
        let (link, entsize) = (u32_at(&table, s + 0x28)?, u64_at(&table, s + 0x38)? as usize);
        Some((kind, offset, size, link, entsize))
    };
    let Some((_, sym_off, sym_size, link, entsize)) =
        (0..usize::from(shnum)).filter_map(section).find(|s| s.0 == SHT_DYNSYM)
    else {
        return Ok(Vec::new());
    };
    let (_, str_off, str_size, _, _) = section(link as usize).ok_or_else(bad)?;
    if entsize < 24 {
        return Err(bad());
    }
    let (syms, strs) = (read_at(sym_off, sym_size)?, read_at(str_off, str_size)?);
    let mut out = Vec::new();
    for s in (0..syms.len().saturating_sub(entsize - 1)).step_by(entsize).skip(1) {
        let (name, shndx) = (u32_at(&syms, s).ok_or_else(bad)? as usize, u16_at(&syms, s + 6).ok_or_else(bad)?);
        if shndx != SHN_UNDEF || name == 0 || name >= strs.len() {
            continue;
        }
        let len = strs[name..].iter().position(|&c| c == 0).ok_or_else(bad)?;
        if let Ok(text) = std::str::from_utf8(&strs[name..name + len]) {
            out.push(Reference { name: text.to_string(), at: str_off as usize + name });
        }
    }
    Ok(out)
}

/// The name `name` is renamed to: as long, its last three bytes `~` and two of `tag` (base 36),
/// which no C or C++ name holds.
pub fn renamed(name: &str, tag: usize) -> Option<String> {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if name.len() < 4 || tag >= 36 * 36 || !name.is_ascii() {
        return None;
    }
    let mut bytes = name.as_bytes()[..name.len() - 3].to_vec();
    bytes.extend([b'~', DIGITS[tag / 36], DIGITS[tag % 36]]);
    Some(String::from_utf8(bytes).expect("ASCII"))
}

/// `elf` with each reference's name overwritten by its new name (of the same length); refused
/// when a name is not where the references say (the file changed since they were read).
pub fn with_renamed(elf: &[u8], renames: &[(Reference, String)]) -> Result<Vec<u8>> {
    let mut out = elf.to_vec();
    for (r, new) in renames {
        let end = r.at.checked_add(r.name.len()).filter(|_| r.name.len() == new.len());
        match end.and_then(|end| out.get_mut(r.at..end)) {
            Some(bytes) if bytes == r.name.as_bytes() => bytes.copy_from_slice(new.as_bytes()),
            _ => return Err(Error::value(format!("the file changed while it was read (the name '{}')", r.name))),
        }
    }
    Ok(out)
}

/// SysV ELF hash (`DT_HASH`).
fn elf_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(u32::from(c));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

/// A shared object for machine `machine` (an ELF `e_machine`) defining each name as an absolute
/// symbol whose value is the address given: what the dynamic loader binds references to as
/// they are (glibc 2.28 and later add no load address to an absolute symbol). It has no code
/// and no data; one writable segment holds its tables.
pub fn object(machine: u16, soname: &str, symbols: &[(String, u64)]) -> Vec<u8> {
    let align8 = |n: usize| n.div_ceil(8) * 8;
    let count = symbols.len() + 1;
    // Layout: header, 3 program headers, symbols, strings, hash table, dynamic section.
    let phoff = 64;
    let symtab = phoff + 3 * 56;
    let strtab = symtab + count * 24;
    let mut strings = vec![0u8];
    let mut name_at = Vec::new();
    for (name, _) in symbols {
        name_at.push(strings.len() as u32);
        strings.extend(name.as_bytes());
        strings.push(0);
    }
    let soname_at = strings.len() as u32;
    strings.extend(soname.as_bytes());
    strings.push(0);
    let hash = align8(strtab + strings.len());
    let nbucket = count.max(1);
    let hash_len = 4 * (2 + nbucket + count);
    let dynamic = align8(hash + hash_len);
    let dyn_entries: [(u64, u64); 7] = [
        (4, hash as u64),           // DT_HASH
        (5, strtab as u64),         // DT_STRTAB
        (6, symtab as u64),         // DT_SYMTAB
        (10, strings.len() as u64), // DT_STRSZ
        (11, 24),                   // DT_SYMENT
        (14, u64::from(soname_at)), // DT_SONAME
        (0, 0),                     // DT_NULL
    ];
    let total = dynamic + dyn_entries.len() * 16;
    let mut b = vec![0u8; total];
    let put16 = |b: &mut Vec<u8>, at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    // ELF header: 64-bit, little-endian, version 1, System V ABI, a shared object.
    b[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
    put16(&mut b, 0x10, 3); // ET_DYN
    put16(&mut b, 0x12, machine);
    put32(&mut b, 0x14, 1);
    put64(&mut b, 0x20, phoff as u64);
    put16(&mut b, 0x34, 64);
    put16(&mut b, 0x36, 56);
    put16(&mut b, 0x38, 3);
    put16(&mut b, 0x3a, 64);
    // PT_LOAD (read and write: the loader relocates the dynamic section's addresses in place),
    // PT_DYNAMIC, and PT_GNU_STACK (without it the loader would make every stack executable).
    let phdrs: [(u32, u32, usize, usize, u64); 3] =
        [(1, 6, 0, total, 0x1000), (2, 6, dynamic, dyn_entries.len() * 16, 8), (0x6474_e551, 6, 0, 0, 16)];
    for (k, (kind, flags, offset, size, align)) in phdrs.into_iter().enumerate() {
        let p = phoff + k * 56;
        put32(&mut b, p, kind);
        put32(&mut b, p + 4, flags);
        put64(&mut b, p + 8, offset as u64);
        put64(&mut b, p + 0x10, offset as u64);
        put64(&mut b, p + 0x18, offset as u64);
        put64(&mut b, p + 0x20, size as u64);
        put64(&mut b, p + 0x28, size as u64);
        put64(&mut b, p + 0x30, align);
    }
    for (k, ((_, addr), &name)) in symbols.iter().zip(&name_at).enumerate() {
        let s = symtab + (k + 1) * 24;
        put32(&mut b, s, name);
        b[s + 4] = (STB_GLOBAL << 4) | STT_FUNC;
        put16(&mut b, s + 6, SHN_ABS);
        put64(&mut b, s + 8, *addr);
    }
    b[strtab..strtab + strings.len()].copy_from_slice(&strings);
    // The hash table: every symbol in its name's bucket, chained.
    put32(&mut b, hash, nbucket as u32);
    put32(&mut b, hash + 4, count as u32);
    let (buckets, chains) = (hash + 8, hash + 8 + 4 * nbucket);
    for (k, (name, _)) in symbols.iter().enumerate() {
        let index = (k + 1) as u32;
        let bucket = buckets + 4 * (elf_hash(name.as_bytes()) as usize % nbucket);
        let first = u32_at(&b, bucket).expect("inside");
        put32(&mut b, chains + 4 * index as usize, first);
        put32(&mut b, bucket, index);
    }
    for (k, (tag, value)) in dyn_entries.into_iter().enumerate() {
        put64(&mut b, dynamic + k * 16, tag);
        put64(&mut b, dynamic + k * 16 + 8, value);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_renamed_to_the_same_length_with_a_tilde() {
        assert_eq!(renamed("TVMBackendAllocWorkspace", 0).unwrap(), "TVMBackendAllocWorksp~00");
        assert_eq!(renamed("TVMFuncCall", 37).unwrap(), "TVMFuncC~11");
        assert!(renamed("abc", 0).is_none() && renamed("TVMFuncCall", 36 * 36).is_none());
    }

    #[test]
    fn an_object_lists_its_symbols_in_a_hash_table_the_loader_reads() {
        let syms = vec![("a~01".to_string(), 0x1234), ("bcd~02".to_string(), 0xdead_beef)];
        let o = object(62, "libx.so", &syms);
        assert_eq!(&o[..4], b"\x7fELF");
        // Every symbol is found through its bucket's chain.
        let hash = u64_at(&o, o.len() - 7 * 16 + 8).unwrap() as usize;
        let (symtab, strtab) = (64 + 3 * 56, 64 + 3 * 56 + 3 * 24);
        let nbucket = u32_at(&o, hash).unwrap() as usize;
        for (name, addr) in &syms {
            let mut i = u32_at(&o, hash + 8 + 4 * (elf_hash(name.as_bytes()) as usize % nbucket)).unwrap() as usize;
            let found = loop {
                assert_ne!(i, 0, "{name} not in its chain");
                let s = symtab + i * 24;
                let at = strtab + u32_at(&o, s).unwrap() as usize;
                if o[at..].starts_with(name.as_bytes()) && o[at + name.len()] == 0 {
                    break u64_at(&o, s + 8).unwrap();
                }
                i = u32_at(&o, hash + 8 + 4 * nbucket + 4 * i).unwrap() as usize;
            };
            assert_eq!(found, *addr);
        }
    }

    #[test]
    fn a_file_that_is_not_elf_has_no_names() {
        let mut text =
            std::io::Cursor::new(b"not an ELF file at all, just words, some more of them: 64 bytes".to_vec());
        assert!(undefined_names(&mut text).is_err());
        assert!(undefined_names(&mut std::io::Cursor::new(b"\x7fELF\x02\x01\x01".to_vec())).is_err());
    }

    #[test]
    fn a_model_librarys_references_are_read_and_renamed_in_place() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mlp_b1/lib.so");
        let bytes = std::fs::read(path).unwrap();
        let refs = undefined_names(&mut std::io::Cursor::new(&bytes)).unwrap();
        let names: Vec<&str> = refs.iter().map(|r| r.name.as_str()).collect();
        assert!(names.contains(&"memcpy") && names.contains(&"expf"), "{names:?}");
        for r in &refs {
            assert_eq!(&bytes[r.at..r.at + r.name.len()], r.name.as_bytes());
        }
        let r = refs.iter().find(|r| r.name == "memcpy").unwrap().clone();
        let copy = with_renamed(&bytes, &[(r.clone(), renamed(&r.name, 5).unwrap())]).unwrap();
        // A name that is not where it was read is refused, not written over.
        assert!(with_renamed(&copy, &[(r.clone(), renamed(&r.name, 6).unwrap())]).is_err());
        assert_eq!(copy.len(), bytes.len());
        let again = undefined_names(&mut std::io::Cursor::new(&copy)).unwrap();
        assert!(again.iter().any(|x| x.name == "mem~05" && x.at == r.at));
        assert!(!again.iter().any(|x| x.name == "memcpy"));
    }
}
