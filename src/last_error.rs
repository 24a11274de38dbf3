//! The thread's last error, as `TVMGetLastError` returns it. The C string stays valid until the
//! next error is set on the same thread.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Replaces the thread's message (interior NULs are cut: C cannot see past them anyway).
pub fn set(msg: &str) {
    let msg = msg.split('\0').next().unwrap_or_default();
    let c = CString::new(msg).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = c);
}

/// The thread's message as text.
pub fn get() -> String {
    LAST_ERROR.with(|slot| slot.borrow().to_string_lossy().into_owned())
}

/// The thread's message for C; valid until the next `set` on this thread.
pub fn as_ptr() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}
