//! Errors: the thread's last message.

use crate::last_error;
use std::ffi::{c_char, CStr};

/// The calling thread's last error message (empty if none). Valid until the next error on this
/// thread; successful calls do not clear it.
#[no_mangle]
pub extern "C" fn TVMGetLastError() -> *const c_char {
    last_error::as_ptr()
}

/// Sets the calling thread's last error (kernels call this through `__TVMAPISetLastError`).
#[no_mangle]
pub unsafe extern "C" fn TVMAPISetLastError(msg: *const c_char) {
    let _ = std::panic::catch_unwind(|| {
        let text = if msg.is_null() {
            String::new()
        } else {
            // SAFETY: callers pass NUL-terminated strings.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        last_error::set(&text);
    });
}

/// Stores a Python exception object (a callback's failure) for the caller to re-raise.
#[no_mangle]
pub unsafe extern "C" fn TVMAPISetLastPythonError(py_object: *mut std::ffi::c_void) {
    // SAFETY: TVM's Python package passes the exception object it raised (the entry's contract).
    let _ = std::panic::catch_unwind(|| unsafe { last_error::set_python(py_object) });
}

/// The stored Python exception (borrowed), or NULL when the last error is a message.
#[no_mangle]
pub extern "C" fn TVMGetLastPythonError() -> *mut std::ffi::c_void {
    std::panic::catch_unwind(last_error::python).unwrap_or(std::ptr::null_mut())
}

/// Releases the stored Python exception.
#[no_mangle]
pub extern "C" fn TVMDropLastPythonError() {
    let _ = std::panic::catch_unwind(last_error::drop_python);
}

/// No C++ backtrace is recorded: always NULL.
#[no_mangle]
pub extern "C" fn TVMGetLastBacktrace() -> *const c_char {
    std::ptr::null()
}
