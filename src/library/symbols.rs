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
            let lib = load(path)?;
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

/// `dlopen`s a model library. RTLD_LOCAL keeps two models' same-named kernels apart. RTLD_NOW
/// (upstream loads lazily) resolves every symbol before any code of the library runs: a symbol
/// nowhere to be found is an error here, not a "symbol lookup error" that ends the process at
/// the first call.
///
/// A system-lib build calls this runtime's C API by name (`TVMBackendRegisterSystemLibSymbol`
/// from a static constructor, `TVMBackend*` from its kernels). Hosts that link the runtime have
/// those names in the global scope; one that loaded it locally (Python's ctypes, our package)
/// does not: the runtime's own image is then made global and the load tried again, unless the
/// names are another TVM runtime's there already (TVM's own Python package, loaded globally),
/// which the library would call instead: that is refused.
fn load(path: &str) -> Result<libloading::os::unix::Library> {
    let open = || {
        // SAFETY: loading runs the library's constructors; loading a model library is exactly
        // what the caller asked for.
        unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_LOCAL) }
    };
    let failed = |e: &dyn std::fmt::Display| Error::value(format!("cannot load library '{path}': {e}"));
    let err = match open() {
        Ok(lib) => return Ok(lib),
        Err(e) => e,
    };
    let text = err.to_string();
    let Some(name) = text.split("undefined symbol: ").nth(1).map(|r| r.split([' ', ',', '(']).next().unwrap_or(r))
    else {
        return Err(failed(&err));
    };
    let Some(ours) = own_symbol(name) else { return Err(failed(&err)) };
    make_own_image_global().map_err(|e| failed(&format!("{text} (and the runtime could not provide it: {e})")))?;
    let cname = std::ffi::CString::new(name).map_err(|_| failed(&err))?;
    // SAFETY: a lookup in the global scope by a NUL-terminated name.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr()) };
    if global != ours {
        return Err(Error::value(format!(
            "cannot load library '{path}': it calls the TVM runtime's C API by name ({name}: a system-lib build), \
             and in this process that name is another TVM runtime's (loaded globally before this one, as TVM's \
             own Python package does): load it in a process without the other runtime, or build it without \
             system-lib"
        )));
    }
    open().map_err(|e| failed(&e))
}

/// The address of `name` in this runtime's own image, if it exports it.
fn own_symbol(name: &str) -> Option<*mut c_void> {
    let cname = std::ffi::CString::new(name).ok()?;
    let image = own_image().ok()?;
    // SAFETY: a lookup in a handle of our own image (RTLD_NOLOAD: no new load) by name.
    let addr = unsafe {
        let h = libc::dlopen(image.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return None;
        }
        let a = libc::dlsym(h, cname.as_ptr());
        libc::dlclose(h);
        a
    };
    (!addr.is_null()).then_some(addr)
}

/// The file name of the image this runtime was loaded from.
fn own_image() -> Result<std::ffi::CString> {
    // SAFETY: Dl_info is plain data (pointers and integers): all zeros is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address inside a loaded image (this function's own).
    let found = unsafe { libc::dladdr(own_image as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err(Error::tvm("the runtime's own image is not known to the loader"));
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    Ok(unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_owned())
}

/// Makes this runtime's image global (symbols of libraries loaded later resolve to it); once,
/// for the process's life.
fn make_own_image_global() -> Result<()> {
    let image = own_image()?;
    // SAFETY: RTLD_NOLOAD re-opens an image already loaded, changing only its scope; the handle is
    // kept (never closed) since the image stays for the process's life anyway.
    let h = unsafe { libc::dlopen(image.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_GLOBAL) };
    if h.is_null() {
        // SAFETY: dlerror's message, if any, is a NUL-terminated string of the loader's.
        let why = unsafe {
            let why = libc::dlerror();
            if why.is_null() {
                "unknown".to_string()
            } else {
                std::ffi::CStr::from_ptr(why).to_string_lossy().into_owned()
            }
        };
        return Err(Error::tvm(format!("dlopen(RTLD_GLOBAL): {why}")));
    }
    Ok(())
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

/// Has forks take the table of system-lib symbols.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&*SYSTEM_LIB);
}
