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
}

pub struct Dso {
    lib: libloading::os::unix::Library,
    path: String,
}

impl Dso {
    pub fn open(path: &str) -> Result<Dso> {
        if std::path::Path::new(path).is_file() {
            super::elf::check_complete(path)?;
        }
        // RTLD_LOCAL keeps two models' same-named kernels apart; RTLD_LAZY as upstream.
        // SAFETY: loading runs the library's constructors; loading a model library is exactly
        // what the caller asked for.
        let lib = unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_LAZY | libc::RTLD_LOCAL) }
            .map_err(|e| Error::value(format!("cannot load library '{path}': {e}")))?;
        Ok(Dso { lib, path: path.to_string() })
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
