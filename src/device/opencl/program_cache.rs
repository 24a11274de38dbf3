//! A program cache on disk, so a process's first run skips `clBuildProgram` with no host code
//! (upstream needs the host to call `opencl.Get/SetPreCompiledPrograms` and keep the blob).
//!
//! Off unless asked for (`TVM_RT_OPENCL_PROGRAM_CACHE=<dir>`, or the packed function
//! `tvmrt.opencl.SetProgramCache(dir)`, "" turning it off): a library that writes files its host
//! did not ask for breaks sandboxed and read-only deployments, and most drivers keep a cache of
//! their own; the cache is for those whose driver does not (or whose driver's is off).
//!
//! A kernel built from source is stored after its first launch has finished: drivers compile part
//! of a kernel at launch (pocl its work-group functions), and a binary taken then holds it. The
//! first process pays for the driver's export of each binary (on pocl about as much as the build
//! again; on GPU drivers a copy); every later one builds nothing.
//!
//! An entry is one kernel's program on one device, named by a digest of its key: the device, its
//! version and driver version, the build options, and the kernel's name and source. The file
//! holds the key in full and a checksum of everything, so an entry that is truncated, corrupt,
//! for another device or driver, or a digest collision is never used: it is rebuilt from source
//! and written again. Entries are written whole (a temporary file renamed), so concurrent
//! processes see an old entry or a new one, never a mix.

use crate::digest::xxh64;
use crate::stream::{Reader, Writer};
use std::path::PathBuf;
use std::sync::{Mutex, Once};

const MAGIC: &[u8; 8] = b"TVMRTCLP";
const FORMAT: u32 = 1;

/// The directory set by the packed function: `None` when never set (the environment decides).
static CHOSEN: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

/// `tvmrt.opencl.SetProgramCache`: a directory, or `None` for no cache (over the environment).
pub fn set_dir(dir: Option<PathBuf>) {
    *CHOSEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
}

fn dir() -> Option<PathBuf> {
    if let Some(chosen) = CHOSEN.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return chosen;
    }
    std::env::var_os("TVM_RT_OPENCL_PROGRAM_CACHE").filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// One kernel's program on one device.
pub struct Entry {
    path: PathBuf,
    key: String,
}

impl Entry {
    /// The entry for `kernel` built from `source` on the device `device_key` describes, when the
    /// cache is on.
    pub fn new(device_key: &str, kernel: &str, source: &[u8]) -> Option<Entry> {
        let dir = dir()?;
        let key = format!(
            "{device_key}\nbuild options: (none)\nkernel: {kernel}\nsource: {} bytes, xxh64 {:016x}",
            source.len(),
            xxh64(source)
        );
        let path = dir.join(format!("{:016x}.clprogram", xxh64(key.as_bytes())));
        Some(Entry { path, key })
    }

    /// The stored binary, when the file is whole and is this entry's.
    pub fn load(&self) -> Option<Vec<u8>> {
        let bytes = std::fs::read(&self.path).ok()?;
        parse(&bytes, &self.key).map(<[u8]>::to_vec)
    }

    /// Stores `binary` (a failure to write is reported once per process and otherwise ignored:
    /// the program was built, the cache only saves the next process the build).
    pub fn store(&self, binary: &[u8]) {
        let written = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|e| e.to_string())
            .and_then(|()| crate::files::store(&self.path, &encode(&self.key, binary)).map_err(|e| e.to_string()));
        if let Err(e) = written {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                eprintln!("[tvm-runtime] warning: the OpenCL program cache cannot write {}: {e}", self.path.display())
            });
        }
    }
}

fn encode(key: &str, binary: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.bytes(MAGIC);
    w.bytes(&FORMAT.to_le_bytes());
    w.string(key);
    w.u64(binary.len() as u64);
    w.bytes(binary);
    let sum = xxh64(&w.buf);
    w.u64(sum);
    w.buf
}

/// The binary of an entry file for `key`; `None` for anything else.
fn parse<'a>(bytes: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if xxh64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = Reader::new(body, "OpenCL program cache entry");
    if r.bytes(8).ok()? != MAGIC || r.bytes(4).ok()? != FORMAT.to_le_bytes() || r.string().ok()? != key {
        return None;
    }
    let len = r.count(1).ok()?;
    let binary = r.bytes(len).ok()?;
    (r.is_at_end() && !binary.is_empty()).then_some(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_used_only_whole_and_for_its_key() {
        let file = encode("device: d\nkernel: k", b"\x7fELF binary");
        assert_eq!(parse(&file, "device: d\nkernel: k"), Some(&b"\x7fELF binary"[..]));
        assert_eq!(parse(&file, "device: e\nkernel: k"), None, "another device's entry");
        for cut in 0..file.len() {
            assert_eq!(parse(&file[..cut], "device: d\nkernel: k"), None, "cut at {cut}");
        }
        for at in 0..file.len() {
            let mut flipped = file.clone();
            flipped[at] ^= 0x10;
            assert_eq!(parse(&flipped, "device: d\nkernel: k"), None, "a bit flipped at {at}");
        }
        assert_eq!(parse(&encode("k", b""), "k"), None, "an empty binary");
    }

    /// The environment names the directory ("" none) until the packed function chooses; the
    /// only test in this process that touches either.
    #[test]
    fn the_environment_decides_until_the_function_does() {
        std::env::set_var("TVM_RT_OPENCL_PROGRAM_CACHE", "/tmp/tvmrt-programs");
        assert_eq!(dir(), Some(PathBuf::from("/tmp/tvmrt-programs")));
        std::env::set_var("TVM_RT_OPENCL_PROGRAM_CACHE", "");
        assert_eq!(dir(), None, "empty means off");
        set_dir(Some(PathBuf::from("/tmp/chosen")));
        assert_eq!(dir(), Some(PathBuf::from("/tmp/chosen")));
        std::env::set_var("TVM_RT_OPENCL_PROGRAM_CACHE", "/tmp/tvmrt-programs");
        set_dir(None);
        assert_eq!(dir(), None, "the function's 'off' is over the environment");
        *CHOSEN.lock().unwrap() = None;
        std::env::remove_var("TVM_RT_OPENCL_PROGRAM_CACHE");
        assert_eq!(dir(), None);
    }
}
