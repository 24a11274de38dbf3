//! The C boundary. Every exported function converts and checks its arguments, calls one safe
//! function of the core, and turns the outcome into TVM's convention: 0, or -1 with the message
//! in `TVMGetLastError`. A panic never crosses: it becomes an `InternalError`.

#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod array;
pub mod backend;
pub mod device;
pub mod error;
pub mod ffi;
pub mod function;
pub mod module;
pub mod object;

use crate::error::{Error, Result};
use crate::last_error;
use crate::object::{payload_of, ObjectHeader, ObjectType};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Handle typedefs of `c_runtime_api.h`.
pub type TVMModuleHandle = *mut c_void;
pub type TVMFunctionHandle = *mut c_void;
pub type TVMRetValueHandle = *mut c_void;
pub type TVMStreamHandle = *mut c_void;
pub type TVMObjectHandle = *mut c_void;
pub type TVMArrayHandle = *mut crate::dlpack::DLTensor;

/// The runtime's one init point: puts the built-in global functions in the registry and gives the
/// library loader the table of callbacks compiled code uses. Idempotent and cheap after the first
/// call. Every C entry that reads the registry or loads a library calls it; Rust users of the
/// crate call it once before anything else.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // First: a fork while another thread is in here then waits for it to finish.
        crate::backend::fork::install_with(crate::backend::fork::Hooks { before: init, after: |_| {} });
        handle_forks();
        crate::globals::register_all(&mut |name, f| {
            // The table is empty or holds only what hosts registered: built-ins do not replace those.
            let _ = crate::packed::registry::register(name, f, false);
        });
        let slots: Vec<_> = backend::context_functions().into_iter().chain(ffi::context_functions()).collect();
        crate::library::install_callbacks(&slots);
        for (key, loader) in crate::executor::factory::LOADERS
            .iter()
            .chain(crate::library::opencl::LOADERS)
            .chain(crate::vm::LOADERS)
            .chain(crate::aot::LOADERS)
        {
            crate::library::blob::install_loader(key, *loader);
        }
        for (container, key, loader) in crate::relax::LOADERS {
            crate::library::blob::install_container_loader(*container, key, *loader);
        }
        crate::rpc::install();
    });
}

/// Has every fork take the runtime's process-wide locks (and those of objects, which register as
/// they are made), and reads the settings a run reads once, so that no thread is inside reading
/// them at a fork: a child would wait for it for ever (see `backend::fork`).
fn handle_forks() {
    crate::backend::thread_pool::handle_forks();
    crate::packed::registry::handle_forks();
    crate::object::native::handle_forks();
    crate::object::type_table::handle_forks();
    crate::tensor::weight::handle_forks();
    crate::library::handle_forks();
    crate::executor::handle_forks();
}

/// Runs `f` inside the panic boundary and maps its outcome to a C status.
#[inline]
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(e),
        Err(panic) => panicked(panic),
    }
}

/// Records `e` as the thread's last error; returns -1.
#[cold]
pub(crate) fn fail(e: Error) -> c_int {
    if !e.is_python_pending() {
        last_error::set_with_kind(&e.to_c_message(), e.kind());
    }
    -1
}

#[cold]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> c_int {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    last_error::set(&format!("InternalError: the runtime panicked: {what}"));
    -1
}

/// The panic boundary for functions that compute their own status (hot paths that avoid
/// building a `Result` for the common case).
#[inline]
pub(crate) fn guard_status(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(panicked)
}

/// Like `guard` for functions that return a value instead of a status.
pub(crate) fn guard_value<T>(fallback: T, f: impl FnOnce() -> Result<T>) -> T {
    let mut out = None;
    guard(|| {
        out = Some(f()?);
        Ok(())
    });
    out.unwrap_or(fallback)
}

/// A C string argument.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::value(format!("{what} is null")));
    }
    // SAFETY: non-null C strings from callers are NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Error::value(format!("{what} is not UTF-8")))
}

/// Writes through an out-pointer, refusing null.
pub(crate) unsafe fn out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(Error::value(format!("{what}: null output pointer")));
    }
    // SAFETY: non-null out-pointers from callers point at writable storage.
    unsafe { p.write(v) };
    Ok(())
}

/// The payload of a borrowed handle that must be a `T`.
pub(crate) unsafe fn borrow<'a, T: ObjectType>(h: *mut c_void, what: &str) -> Result<&'a T> {
    if h.is_null() {
        return Err(Error::value(format!("{what} handle is null")));
    }
    // SAFETY: non-null handles from callers are live objects for the call.
    unsafe { payload_of::<T>(h.cast::<ObjectHeader>()) }
        .ok_or_else(|| Error::type_err(format!("the handle is not a {what}")))
}
