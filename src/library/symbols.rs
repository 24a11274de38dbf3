//! Where operator symbols come from: a dlopen'ed shared library or the system-library table that
//! `--system-lib` objects fill from their static constructors. Reading and writing the data
//! symbols a library exports happens here.

use crate::error::{Error, Result};
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

pub trait SymbolSource: Send + Sync {
    fn lookup(&self, name: &str) -> Option<*mut c_void>;
    fn describe(&self) -> String;
    /// A digest of the file the code was loaded from, as it was loaded; `None` for code that is
    /// not a file of its own (the system library).
    fn file_digest(&self) -> Option<u64> {
        None
    }
}

pub struct Dso {
    lib: libloading::os::unix::Library,
    path: String,
    /// The file `dlopen` loaded, held open: its bytes stay readable after the path is replaced
    /// (an atomic redeploy), so its digest is that of the code that runs.
    file: Option<std::fs::File>,
    digest: std::sync::OnceLock<Option<u64>>,
}

/// The file's identity: the same device and inode is the same file.
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl Dso {
    pub fn open(path: &str) -> Result<Dso> {
        let named_file = std::path::Path::new(path).is_file();
        if named_file {
            super::elf::check_complete(path)?;
        }
        // The file is opened before dlopen, and is the one dlopen loaded if the path still names
        // it afterwards; a path replaced in between is tried again.
        for _ in 0..3 {
            let file = named_file.then(|| std::fs::File::open(path).ok()).flatten();
            // RTLD_LOCAL keeps two models' same-named kernels apart; RTLD_LAZY as upstream.
            // SAFETY: loading runs the library's constructors; loading a model library is exactly
            // what the caller asked for.
            let lib = unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_LAZY | libc::RTLD_LOCAL) }
                .map_err(|e| Error::value(format!("cannot load library '{path}': {e}")))?;
            let same = match (&file, std::fs::metadata(path)) {
                (Some(f), Ok(now)) => f.metadata().is_ok_and(|held| identity(&held) == identity(&now)),
                _ => true,
            };
            if same {
                return Ok(Dso { lib, path: path.to_string(), file, digest: std::sync::OnceLock::new() });
            }
        }
        Err(Error::value(format!("cannot load library '{path}': the file keeps being replaced while it loads")))
    }
}

impl SymbolSource for Dso {
    fn lookup(&self, name: &str) -> Option<*mut c_void> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        // SAFETY: we only take the address; its use is decided by the caller.
        unsafe { self.lib.get::<*mut c_void>(&cname) }.ok().map(|s| *s).filter(|p| !p.is_null())
    }

    fn describe(&self) -> String {
        self.path.clone()
    }

    /// Read once, from the file held open since loading.
    fn file_digest(&self) -> Option<u64> {
        *self.digest.get_or_init(|| {
            use std::os::unix::fs::FileExt;
            let file = self.file.as_ref()?;
            let len = file.metadata().ok()?.len() as usize;
            let mut bytes = vec![0u8; len];
            file.read_exact_at(&mut bytes, 0).ok()?;
            Some(crate::digest::xxh64(&bytes))
        })
    }
}

static SYSTEM_LIB: Lazy<Mutex<HashMap<String, usize>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// `TVMBackendRegisterSystemLibSymbol`.
pub fn register_system_symbol(name: &str, ptr: *mut c_void) {
    SYSTEM_LIB.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), ptr as usize);
}

pub struct SystemLib {
    pub prefix: String,
}

impl SymbolSource for SystemLib {
    fn lookup(&self, name: &str) -> Option<*mut c_void> {
        let table = SYSTEM_LIB.lock().unwrap_or_else(|e| e.into_inner());
        table.get(&format!("{}{name}", self.prefix)).or_else(|| table.get(name)).map(|&p| p as *mut c_void)
    }

    fn describe(&self) -> String {
        format!("system library '{}'", self.prefix)
    }
}

/// Whether `addr`, an address `lookup` found, is a function rather than data. Answers from the
/// dynamic symbol table; symbols it cannot see (a system library linked into the host) pass.
pub fn is_function(addr: usize) -> bool {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    const STT_FUNC: u8 = 2;
    const STT_GNU_IFUNC: u8 = 10;
    // SAFETY: dladdr1 only reads the loader's tables; both out-pointers are ours.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *mut c_void = std::ptr::null_mut();
        if libc::dladdr1(addr as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) == 0 || sym.is_null() {
            return true;
        }
        let sym = &*sym.cast::<libc::Elf64_Sym>();
        if sym.st_value as usize + info.dli_fbase as usize != addr && info.dli_saddr as usize != addr {
            return true;
        }
        matches!(sym.st_info & 0xf, STT_FUNC | STT_GNU_IFUNC)
    }
}

/// Stores `value` into a pointer-sized data symbol (the model's context slots).
///
/// # Safety
/// `slot` must be the address of a writable pointer-sized global, as TVM's codegen emits them.
pub unsafe fn write_slot(slot: *mut c_void, value: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { slot.cast::<*mut c_void>().write(value) }
}

/// Reads the `__tvm_dev_mblob` byte array at `addr`: a u64 length, then that many bytes.
///
/// # Safety
/// `addr` must be the address of a module blob exported by a loaded library.
pub unsafe fn read_blob<'a>(addr: *const u8) -> &'a [u8] {
    // SAFETY: per the contract, the blob starts with its length.
    unsafe {
        let len = addr.cast::<u64>().read_unaligned() as usize;
        std::slice::from_raw_parts(addr.add(8), len)
    }
}

/// Reads a NUL-terminated string symbol (`__tvm_main__`).
///
/// # Safety
/// `addr` must be the address of a NUL-terminated string in a loaded library.
pub unsafe fn read_c_str(addr: *const c_void) -> String {
    // SAFETY: per the contract.
    unsafe { std::ffi::CStr::from_ptr(addr.cast()) }.to_string_lossy().into_owned()
}
