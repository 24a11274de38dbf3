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
