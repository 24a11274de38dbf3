//! The part of Triton's C API (`tritonserver.h`, `tritonbackend.h`, backend API 1.19) this backend
//! calls, declared here from its documented signatures.
//!
//! The functions are found in the server's process when the backend is initialised (`dlsym` over
//! the global scope, where `tritonserver` has `libtritonserver.so`), not linked: the library then
//! has no undefined symbols a loader must satisfy, and the crate's tests link without Triton.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

/// Triton's objects, opaque to the backend.
pub type Error = c_void;
pub type Message = c_void;
pub type Backend = c_void;
pub type Model = c_void;
pub type Instance = c_void;
pub type Request = c_void;
pub type Input = c_void;
pub type Response = c_void;
pub type Output = c_void;

/// The API version this backend was written for; Triton's must have the same major version and
/// at least this minor.
pub const API_MAJOR: u32 = 1;
pub const API_MINOR: u32 = 19;

/// `TRITONSERVER_Error_Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    Unknown = 0,
    Internal = 1,
    NotFound = 2,
    InvalidArg = 3,
    Unavailable = 4,
    Unsupported = 5,
}

/// `TRITONSERVER_MemoryType`.
pub const MEMORY_CPU: u32 = 0;
pub const MEMORY_CPU_PINNED: u32 = 1;
/// `TRITONSERVER_LogLevel`.
pub const LOG_INFO: u32 = 0;
pub const LOG_WARN: u32 = 1;
pub const LOG_ERROR: u32 = 2;
/// `TRITONSERVER_REQUEST_RELEASE_ALL`, `TRITONSERVER_RESPONSE_COMPLETE_FINAL`.
pub const RELEASE_ALL: u32 = 1;
pub const COMPLETE_FINAL: u32 = 1;

type Err = *mut Error;

macro_rules! triton_api {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// Triton's functions, as found in the server's process.
        #[allow(non_snake_case)]
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Api {
            fn resolve() -> Result<Api, String> {
                Ok(Api {
                    $($name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: a NUL-terminated name looked up in the global scope.
                        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
                        if f.is_null() {
                            return Err(format!("{} is not in this process", stringify!($name)));
                        }
                        // SAFETY: the symbol is Triton's function of this signature (tritonserver.h,
                        // tritonbackend.h), the process's only definition of the name.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(f) }
                    },)*
                })
            }
        }
    };
}

triton_api! {
    TRITONSERVER_ErrorNew: fn(u32, *const c_char) -> Err;
    TRITONSERVER_ErrorDelete: fn(Err) -> ();
    TRITONSERVER_ErrorMessage: fn(Err) -> *const c_char;
    TRITONSERVER_MessageNewFromSerializedJson: fn(*mut *mut Message, *const c_char, usize) -> Err;
    TRITONSERVER_MessageSerializeToJson: fn(*mut Message, *mut *const c_char, *mut usize) -> Err;
    TRITONSERVER_MessageDelete: fn(*mut Message) -> Err;
    TRITONSERVER_LogMessage: fn(u32, *const c_char, i32, *const c_char) -> Err;
    TRITONBACKEND_ApiVersion: fn(*mut u32, *mut u32) -> Err;
    TRITONBACKEND_ModelName: fn(*mut Model, *mut *const c_char) -> Err;
    TRITONBACKEND_ModelVersion: fn(*mut Model, *mut u64) -> Err;
    TRITONBACKEND_ModelRepository: fn(*mut Model, *mut u32, *mut *const c_char) -> Err;
    TRITONBACKEND_ModelConfig: fn(*mut Model, u32, *mut *mut Message) -> Err;
    TRITONBACKEND_ModelAutoCompleteConfig: fn(*mut Model, *mut bool) -> Err;
    TRITONBACKEND_ModelSetConfig: fn(*mut Model, u32, *mut Message) -> Err;
    TRITONBACKEND_ModelState: fn(*mut Model, *mut *mut c_void) -> Err;
    TRITONBACKEND_ModelSetState: fn(*mut Model, *mut c_void) -> Err;
    TRITONBACKEND_ModelInstanceName: fn(*mut Instance, *mut *const c_char) -> Err;
    TRITONBACKEND_ModelInstanceKind: fn(*mut Instance, *mut u32) -> Err;
    TRITONBACKEND_ModelInstanceModel: fn(*mut Instance, *mut *mut Model) -> Err;
    TRITONBACKEND_ModelInstanceState: fn(*mut Instance, *mut *mut c_void) -> Err;
    TRITONBACKEND_ModelInstanceSetState: fn(*mut Instance, *mut c_void) -> Err;
    TRITONBACKEND_ModelInstanceReportStatistics: fn(*mut Instance, *mut Request, bool, u64, u64, u64, u64) -> Err;
    TRITONBACKEND_ModelInstanceReportBatchStatistics: fn(*mut Instance, u64, u64, u64, u64, u64) -> Err;
    TRITONBACKEND_RequestInputCount: fn(*mut Request, *mut u32) -> Err;
    TRITONBACKEND_RequestInputByIndex: fn(*mut Request, u32, *mut *mut Input) -> Err;
    TRITONBACKEND_RequestOutputCount: fn(*mut Request, *mut u32) -> Err;
    TRITONBACKEND_RequestOutputName: fn(*mut Request, u32, *mut *const c_char) -> Err;
    TRITONBACKEND_RequestRelease: fn(*mut Request, u32) -> Err;
    TRITONBACKEND_InputProperties:
        fn(*mut Input, *mut *const c_char, *mut u32, *mut *const i64, *mut u32, *mut u64, *mut u32) -> Err;
    TRITONBACKEND_InputBuffer: fn(*mut Input, u32, *mut *const c_void, *mut u64, *mut u32, *mut i64) -> Err;
    TRITONBACKEND_ResponseNew: fn(*mut *mut Response, *mut Request) -> Err;
    TRITONBACKEND_ResponseDelete: fn(*mut Response) -> Err;
    TRITONBACKEND_ResponseOutput: fn(*mut Response, *mut *mut Output, *const c_char, u32, *const i64, u32) -> Err;
    TRITONBACKEND_OutputBuffer: fn(*mut Output, *mut *mut c_void, u64, *mut u32, *mut i64) -> Err;
    TRITONBACKEND_ResponseSend: fn(*mut Response, u32, Err) -> Err;
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// Triton's functions: found once, at the backend's initialisation.
pub fn api() -> Result<&'static Api, String> {
    API.get_or_init(Api::resolve).as_ref().map_err(Clone::clone)
}

/// Triton's functions, after [`api`] found them (every entry point but the backend's
/// initialisation runs after it did).
pub fn triton() -> &'static Api {
    match API.get() {
        Some(Ok(api)) => api,
        _ => panic!("Triton's API used before the backend's initialisation found it"),
    }
}

/// An error object's message, and the object deleted (Triton gives its errors to their caller).
///
/// # Safety
/// `e` is an error Triton returned, not yet deleted.
pub unsafe fn take_error(e: Err) -> String {
    let t = triton();
    // SAFETY: the caller's error; its message lives until it is deleted, after the copy.
    let text = unsafe { CStr::from_ptr((t.TRITONSERVER_ErrorMessage)(e)) }.to_string_lossy().into_owned();
    // SAFETY: as above; deleted once.
    unsafe { (t.TRITONSERVER_ErrorDelete)(e) };
    text
}

/// A Triton error object for `message` (ownership goes to whoever receives it).
pub fn new_error(code: Code, message: &str) -> Err {
    let text = std::ffi::CString::new(message.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: a NUL-terminated message, copied by Triton.
    unsafe { (triton().TRITONSERVER_ErrorNew)(code as u32, text.as_ptr()) }
}

/// Writes `message` to Triton's log at `level`.
pub fn log(level: u32, message: &str) {
    let Ok(api) = api() else { return };
    let text = std::ffi::CString::new(message.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: NUL-terminated strings Triton copies; its error, if any, is ours to delete.
    let e = unsafe { (api.TRITONSERVER_LogMessage)(level, c"triton_tvm".as_ptr(), 0, text.as_ptr()) };
    if !e.is_null() {
        // SAFETY: the error just returned.
        unsafe { (api.TRITONSERVER_ErrorDelete)(e) };
    }
}
