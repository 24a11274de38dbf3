//! The Python C-API functions TVM's Python package registers (`TVMBackendRegisterEnvCAPI`), used
//! to keep a reference to a Python exception while it crosses the runtime.

use crate::error::{Error, Result};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

static PY_INCREF: AtomicUsize = AtomicUsize::new(0);
static PY_DECREF: AtomicUsize = AtomicUsize::new(0);
static GIL_ENSURE: AtomicUsize = AtomicUsize::new(0);
static GIL_RELEASE: AtomicUsize = AtomicUsize::new(0);
static CHECK_SIGNALS: AtomicUsize = AtomicUsize::new(0);

/// Records the address of Python C-API function `name`.
///
/// # Safety
/// `ptr` must be null or that very function of a Python interpreter that stays loaded: it is
/// called later with the function's C signature.
pub unsafe fn register(name: &str, ptr: *mut c_void) -> Result<()> {
    let slot = match name {
        "Py_IncRef" => &PY_INCREF,
        "Py_DecRef" => &PY_DECREF,
        "PyGILState_Ensure" => &GIL_ENSURE,
        "PyGILState_Release" => &GIL_RELEASE,
        "PyErr_CheckSignals" => &CHECK_SIGNALS,
        other => return Err(Error::value(format!("TVMBackendRegisterEnvCAPI: unknown name '{other}'"))),
    };
    slot.store(ptr as usize, Ordering::Release);
    Ok(())
}

/// Runs `f(object)` with the GIL held, if Python registered what that needs.
fn with_gil(refcount_fn: &AtomicUsize, object: *mut c_void) {
    let (f, ensure, release) =
        (refcount_fn.load(Ordering::Acquire), GIL_ENSURE.load(Ordering::Acquire), GIL_RELEASE.load(Ordering::Acquire));
    if f == 0 || ensure == 0 || release == 0 || object.is_null() {
        return;
    }
    // SAFETY: the addresses were registered (`register`'s contract) as these C-API functions, and
    // `object` is a live Python object (the callers' contract).
    unsafe {
        let ensure: unsafe extern "C" fn() -> c_int = std::mem::transmute(ensure);
        let release: unsafe extern "C" fn(c_int) = std::mem::transmute(release);
        let f: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(f);
        let state = ensure();
        f(object);
        release(state);
    }
}

/// # Safety
/// `object` must be null or a live Python object of the interpreter that registered the functions.
pub unsafe fn incref(object: *mut c_void) {
    with_gil(&PY_INCREF, object)
}

/// # Safety
/// As for [`incref`], and the caller gives up one reference it holds.
pub unsafe fn decref(object: *mut c_void) {
    with_gil(&PY_DECREF, object)
}
