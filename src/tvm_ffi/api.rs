//! Upstream's `libtvm_ffi.so`, when the host process has loaded it: its C functions, found once.
//!
//! The library is looked for among those already loaded (never loaded by us: a host that does not
//! use tvm-ffi does not need it). Every function comes from that library's own handle, so a name
//! this runtime also exports (`TVMFFIErrorSetRaisedFromCStrParts`) resolves to libtvm_ffi's.
//! Only tvm-ffi's C ABI is used, the part that stays put across apache-tvm-ffi 0.1.x.

use crate::dlpack::{DLManagedTensor, SafeCall, TVMByteArray, TVMFFIAny};
use crate::error::{Error, Result};
use once_cell::sync::OnceCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;

pub type Handle = *mut c_void;

/// The object header every tvm-ffi object starts with (`TVMFFIObject`), 24 bytes; an object's
/// cell (a string's bytes, a shape, a tensor's `DLTensor`, a function's call) follows it.
pub const HEADER_SIZE: usize = 24;

/// tvm-ffi's type indices (`TVMFFITypeIndex`).
pub mod index {
    pub const NONE: i32 = 0;
    pub const INT: i32 = 1;
    pub const BOOL: i32 = 2;
    pub const FLOAT: i32 = 3;
    pub const OPAQUE_PTR: i32 = 4;
    pub const DATA_TYPE: i32 = 5;
    pub const DEVICE: i32 = 6;
    pub const DL_TENSOR_PTR: i32 = 7;
    pub const RAW_STR: i32 = 8;
    pub const BYTE_ARRAY_PTR: i32 = 9;
    pub const SMALL_STR: i32 = 11;
    pub const SMALL_BYTES: i32 = 12;
    pub const STATIC_OBJECT_BEGIN: i32 = 64;
    pub const STR: i32 = 65;
    pub const BYTES: i32 = 66;
    pub const ERROR: i32 = 67;
    pub const FUNCTION: i32 = 68;
    pub const SHAPE: i32 = 69;
    pub const TENSOR: i32 = 70;
    pub const ARRAY: i32 = 71;
    pub const MODULE: i32 = 73;
}

type Status = c_int;

/// The functions of libtvm_ffi's C ABI this runtime calls.
pub struct Api {
    pub inc_ref: unsafe extern "C" fn(Handle) -> Status,
    pub dec_ref: unsafe extern "C" fn(Handle) -> Status,
    pub function_create:
        unsafe extern "C" fn(*mut c_void, SafeCall, Option<unsafe extern "C" fn(*mut c_void)>, *mut Handle) -> Status,
    function_get_global: unsafe extern "C" fn(*const TVMByteArray, *mut Handle) -> Status,
    function_set_global: unsafe extern "C" fn(*const TVMByteArray, Handle, c_int) -> Status,
    error_move_from_raised: unsafe extern "C" fn(*mut Handle),
    pub error_set_raised_from_cstr: unsafe extern "C" fn(*const c_char, *const c_char),
    pub tensor_from_dlpack: unsafe extern "C" fn(*mut DLManagedTensor, i32, i32, *mut Handle) -> Status,
    pub tensor_to_dlpack: unsafe extern "C" fn(Handle, *mut *mut DLManagedTensor) -> Status,
    pub string_from_byte_array: unsafe extern "C" fn(*const TVMByteArray, *mut TVMFFIAny) -> Status,
    pub bytes_from_byte_array: unsafe extern "C" fn(*const TVMByteArray, *mut TVMFFIAny) -> Status,
    pub register_context_symbol: unsafe extern "C" fn(*const c_char, *mut c_void) -> Status,
    pub error_set_raised_from_parts: unsafe extern "C" fn(*const c_char, *const *const c_char, i32),
    /// What kernels of libraries libtvm_ffi loads must reach in libtvm_ffi itself (the module a
    /// library's context points at is its own), by slot name; `TVMFFIHandleInitOnce` came in 0.1.5.
    pub own_context: Vec<(&'static str, *mut c_void)>,
    /// Global functions looked up once (libtvm_ffi's `ffi.Array`, `ffi.Shape`, ...).
    globals: Mutex<HashMap<&'static str, usize>>,
}

// SAFETY: function pointers and handles to immortal global functions.
unsafe impl Send for Api {}
// SAFETY: as above; the cache is behind a lock.
unsafe impl Sync for Api {}

static API: OnceCell<Option<Api>> = OnceCell::new();

/// libtvm_ffi's functions, when the process has it.
pub fn api() -> Option<&'static Api> {
    API.get_or_init(|| {
        // SAFETY: looking a loaded library up and taking its symbols with their C ABI types.
        unsafe { find_library().and_then(|h| Api::from_library(h)) }
    })
    .as_ref()
}

/// The same, failing with what to do when the process has no libtvm_ffi.
pub fn require() -> Result<&'static Api> {
    api().ok_or_else(|| {
        Error::value("libtvm_ffi.so is not loaded in this process (pip install apache-tvm-ffi, and load it first)")
    })
}

/// A handle of the loaded libtvm_ffi: by one of its names where the host loaded it globally,
/// else by file name among the loaded objects. Opened with RTLD_NOLOAD: never loaded by us.
unsafe fn find_library() -> Option<*mut c_void> {
    // SAFETY: dlsym/dladdr/dlopen on names and addresses the loader gives.
    unsafe {
        let probe = libc::dlsym(libc::RTLD_DEFAULT, c"TVMFFIFunctionSetGlobal".as_ptr());
        let path = if probe.is_null() {
            loaded_path_containing("libtvm_ffi.so")?
        } else {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(probe, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            CStr::from_ptr(info.dli_fname).to_owned()
        };
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        (!h.is_null()).then_some(h)
    }
}

/// The path of a loaded object whose name contains `needle`.
unsafe fn loaded_path_containing(needle: &str) -> Option<CString> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader's record; `data` is the search below.
        unsafe {
            let search = &mut *(data as *mut (&str, Option<CString>));
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let n = CStr::from_ptr(name);
                let file = n.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or_default();
                if file.windows(search.0.len()).any(|w| w == search.0.as_bytes()) {
                    search.1 = Some(n.to_owned());
                    return 1;
                }
            }
            0
        }
    }
    let mut search: (&str, Option<CString>) = (needle, None);
    // SAFETY: the callback only reads the records and writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut _ as *mut c_void) };
    search.1
}

/// `TVMFFIVersion`.
#[repr(C)]
#[derive(Default)]
struct Version {
    major: u32,
    minor: u32,
    patch: u32,
}

impl Api {
    unsafe fn from_library(h: *mut c_void) -> Option<Api> {
        // SAFETY: each name is a libtvm_ffi function of the C type it is read as.
        unsafe {
            let sym = |name: &CStr| {
                let p = libc::dlsym(h, name.as_ptr());
                (!p.is_null()).then_some(p)
            };
            // The C ABI below is 0.1.x's; another series may have changed it.
            let version: unsafe extern "C" fn(*mut Version) = function_pointer(sym(c"TVMFFIGetVersion")?);
            let mut v = Version::default();
            version(&mut v);
            if (v.major, v.minor) != (0, 1) {
                eprintln!(
                    "libtvm_runtime: libtvm_ffi {}.{}.{} is loaded; this runtime speaks tvm-ffi 0.1's C ABI and stays \
                     out of its registry",
                    v.major, v.minor, v.patch
                );
                return None;
            }
            macro_rules! f {
                ($name:literal) => {
                    function_pointer(sym($name)?)
                };
            }
            let mut own_context = Vec::new();
            for (slot, name) in [
                ("__TVMFFIFunctionCall", c"TVMFFIFunctionCall"),
                ("__TVMFFIErrorSetRaisedFromCStr", c"TVMFFIErrorSetRaisedFromCStr"),
                ("__TVMFFIEnvModLookupFromImports", c"TVMFFIEnvModLookupFromImports"),
                ("__TVMFFIHandleInitOnce", c"TVMFFIHandleInitOnce"),
            ] {
                if let Some(p) = sym(name) {
                    own_context.push((slot, p));
                }
            }
            Some(Api {
                inc_ref: f!(c"TVMFFIObjectIncRef"),
                dec_ref: f!(c"TVMFFIObjectDecRef"),
                function_create: f!(c"TVMFFIFunctionCreate"),
                function_get_global: f!(c"TVMFFIFunctionGetGlobal"),
                function_set_global: f!(c"TVMFFIFunctionSetGlobal"),
                error_move_from_raised: f!(c"TVMFFIErrorMoveFromRaised"),
                error_set_raised_from_cstr: f!(c"TVMFFIErrorSetRaisedFromCStr"),
                tensor_from_dlpack: f!(c"TVMFFITensorFromDLPack"),
                tensor_to_dlpack: f!(c"TVMFFITensorToDLPack"),
                string_from_byte_array: f!(c"TVMFFIStringFromByteArray"),
                bytes_from_byte_array: f!(c"TVMFFIBytesFromByteArray"),
                register_context_symbol: f!(c"TVMFFIEnvModRegisterContextSymbol"),
                error_set_raised_from_parts: f!(c"TVMFFIErrorSetRaisedFromCStrParts"),
                own_context,
                globals: Mutex::new(HashMap::new()),
            })
        }
    }

    /// The error libtvm_ffi holds for this thread after a call returned -1, taken out of it.
    pub fn take_error(&self) -> Option<Error> {
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: an out-pointer; the error object comes with one count, released below.
        unsafe { (self.error_move_from_raised)(&mut e) };
        if e.is_null() {
            return None;
        }
        // SAFETY: an Error object: `TVMFFIErrorCell` (kind, message, backtrace byte arrays) after
        // its header.
        let text = unsafe {
            let cell = e.cast::<u8>().add(HEADER_SIZE).cast::<[TVMByteArray; 2]>();
            let [kind, message] = &*cell;
            let kind = bytes_of(kind);
            let message = bytes_of(message);
            format!("{}: {}", String::from_utf8_lossy(kind), String::from_utf8_lossy(message))
        };
        // SAFETY: our count of the error.
        unsafe { (self.dec_ref)(e) };
        Some(Error::foreign(text))
    }

    /// Raises `e` in libtvm_ffi for this thread (before a call returns -1 to it).
    pub fn raise(&self, e: &Error) {
        let text = e.to_c_message();
        let (kind, message) = text.split_once(": ").unwrap_or(("RuntimeError", &text));
        let kind = CString::new(kind.replace('\0', "")).unwrap_or_default();
        let message = CString::new(message.replace('\0', "")).unwrap_or_default();
        // SAFETY: two C strings, copied by the callee.
        unsafe { (self.error_set_raised_from_cstr)(kind.as_ptr(), message.as_ptr()) }
    }

    /// The status of a libtvm_ffi call as a result.
    pub fn check(&self, status: Status, what: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        Err(self.take_error().unwrap_or_else(|| Error::tvm(format!("{what} failed (status {status})"))))
    }

    /// The global function `name` of libtvm_ffi's registry (looked up once; null when missing).
    pub fn global(&self, name: &'static str) -> Result<Handle> {
        let mut cache = self.globals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&f) = cache.get(name) {
            return Ok(f as Handle);
        }
        let key = TVMByteArray { data: name.as_ptr().cast(), size: name.len() };
        let mut f: Handle = std::ptr::null_mut();
        // SAFETY: a byte array and an out-pointer; the count we get is kept for the process.
        self.check(unsafe { (self.function_get_global)(&key, &mut f) }, name)?;
        if f.is_null() {
            return Err(Error::attribute(format!("libtvm_ffi has no global function '{name}'")));
        }
        cache.insert(name, f as usize);
        Ok(f)
    }

    /// Registers `f` (the registry takes its own count) as `name`.
    ///
    /// # Safety
    /// `f` must be a live function object.
    pub unsafe fn set_global(&self, name: &str, f: Handle, allow_override: bool) -> Result<()> {
        let key = TVMByteArray { data: name.as_ptr().cast(), size: name.len() };
        // SAFETY: a byte array and a live function object.
        self.check(unsafe { (self.function_set_global)(&key, f, allow_override as c_int) }, name)
    }
}

/// A symbol's address as the function pointer type `F` it has.
///
/// # Safety
/// `p` must be a function of type `F`.
unsafe fn function_pointer<F: Copy>(p: *mut c_void) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: per the contract; same size, checked above.
    unsafe { std::mem::transmute_copy(&p) }
}

/// The bytes a `TVMFFIByteArray` describes.
///
/// # Safety
/// `a` must describe live bytes for the lifetime the caller picks.
pub unsafe fn bytes_of<'a>(a: &TVMByteArray) -> &'a [u8] {
    if a.data.is_null() || a.size == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(a.data.cast(), a.size) }
    }
}
