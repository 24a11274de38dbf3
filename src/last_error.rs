//! The thread's last error, as `TVMGetLastError` returns it: a message, or a Python exception
//! object a callback raised (kept with a reference until Python collects it, so it can be re-raised
//! unchanged on the other side of the C boundary). The C string stays valid until the next error
//! is set on the same thread.

#![deny(unsafe_code)]

use crate::error::ErrorKind;
use crate::python_env;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};

enum Slot {
    Message(CString),
    Python { object: *mut c_void, text: CString },
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Slot::Python { object, .. } = *self {
            // SAFETY: `set_python`'s contract made `object` a live Python object, and the slot
            // holds the reference it took.
            #[allow(unsafe_code)]
            unsafe {
                python_env::decref(object)
            };
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Slot> = RefCell::new(Slot::Message(CString::default()));
    /// The last error's finer kind: the C message names upstream's class (`InternalError` for the
    /// runtime's own failures); hosts that tell a wrong name from a wrong shape ask for this.
    static LAST_KIND: std::cell::Cell<ErrorKind> = const { std::cell::Cell::new(ErrorKind::TVMError) };
}

/// The finer kind of the thread's last error (`tvmrt.LastErrorKind`): the runtime's own for its
/// failures, the class a foreign message names (else `TVMError`).
pub fn kind() -> ErrorKind {
    LAST_KIND.with(std::cell::Cell::get)
}

/// Replaces the thread's message with a failure of the runtime's own, of `kind`.
pub fn set_with_kind(msg: &str, kind: ErrorKind) {
    set(msg);
    LAST_KIND.with(|k| k.set(kind));
}

fn replace(slot: Slot) {
    // Dropping the previous slot may call into Python: do it outside the borrow.
    let old = LAST_ERROR.with(|s| std::mem::replace(&mut *s.borrow_mut(), slot));
    drop(old);
}

/// Replaces the thread's message (interior NULs are cut: C cannot see past them anyway); its kind
/// is the class it names, if any.
pub fn set(msg: &str) {
    let msg = msg.split('\0').next().unwrap_or_default();
    let named = msg.split_once(": ").and_then(|(k, _)| ErrorKind::parse(k)).unwrap_or(ErrorKind::TVMError);
    LAST_KIND.with(|k| k.set(named));
    replace(Slot::Message(CString::new(msg).unwrap_or_default()));
}

/// Stores a Python exception object, taking a reference to it.
///
/// # Safety
/// `object` must be null or a live Python object of the interpreter that registered its C-API
/// functions (`TVMBackendRegisterEnvCAPI`).
#[allow(unsafe_code)]
pub unsafe fn set_python(object: *mut c_void) {
    if object.is_null() {
        return set("TVMError: a Python callback failed");
    }
    // SAFETY: per this function's contract.
    unsafe { python_env::incref(object) };
    let text = CString::new("TVMError: a Python exception was raised in a callback").expect("no NUL");
    replace(Slot::Python { object, text });
}

/// The stored Python exception (borrowed), or null.
pub fn python() -> *mut c_void {
    LAST_ERROR.with(|s| match &*s.borrow() {
        Slot::Python { object, .. } => *object,
        Slot::Message(_) => std::ptr::null_mut(),
    })
}

pub fn has_python() -> bool {
    !python().is_null()
}

/// Releases a stored Python exception, leaving an empty message.
pub fn drop_python() {
    if has_python() {
        set("");
    }
}

/// The thread's message as text.
pub fn get() -> String {
    LAST_ERROR.with(|s| match &*s.borrow() {
        Slot::Message(m) => m.to_string_lossy().into_owned(),
        Slot::Python { text, .. } => text.to_string_lossy().into_owned(),
    })
}

/// The thread's message for C; valid until the next `set` on this thread. (During thread exit,
/// after the slot is gone, an empty string.)
pub fn as_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|s| match &*s.borrow() {
            Slot::Message(m) => m.as_ptr(),
            Slot::Python { text, .. } => text.as_ptr(),
        })
        .unwrap_or(c"".as_ptr())
}
