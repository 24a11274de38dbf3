//! Modules: load, look up functions, import, free.

use super::{borrow, c_str, guard, out, TVMFunctionHandle, TVMModuleHandle};
use crate::error::Error;
use crate::library;
use crate::module::Module;
use crate::object::{release, AnyObject, ObjRef, ObjectHeader};
use std::ffi::{c_char, c_int};

unsafe fn module_ref(h: TVMModuleHandle) -> crate::error::Result<ObjRef<Module>> {
    // SAFETY: a live handle from the caller; checked to be a module first.
    unsafe {
        if let Err(e) = borrow::<Module>(h, "Module") {
            return host_module(h).ok_or(e)?;
        }
        AnyObject::retain_raw(h.cast::<ObjectHeader>())
            .and_then(|o| o.downcast::<Module>().ok())
            .ok_or_else(|| Error::type_err("the handle is not a Module"))
    }
}

/// A C++ host's own module (a plug-in's, made by its own code and passed to the C API as upstream
/// allows) held through a stand-in of this runtime; `None` when `h` is no host module.
unsafe fn host_module(h: TVMModuleHandle) -> Option<crate::error::Result<ObjRef<Module>>> {
    let header = h.cast::<ObjectHeader>();
    // SAFETY: a live handle from the caller, as every handle it passes.
    let is_host_module = !header.is_null()
        && unsafe { (*header).type_index } == crate::object::type_index::MODULE
        && !unsafe { crate::object::native::is_native(header) };
    if !is_host_module {
        return None;
    }
    // SAFETY: a live object of upstream's module type, which the C++ layer wraps.
    let stand_in = unsafe { crate::cxx_abi::tvmrt_cxx_native_module(h) };
    // SAFETY: one count of a module of ours, or null with the last error set.
    Some(match unsafe { AnyObject::from_raw(stand_in.cast()) } {
        Some(m) => m.downcast::<Module>().map_err(|_| Error::internal("a host module's stand-in is no Module")),
        None => Err(Error::foreign(crate::last_error::get())),
    })
}

/// Loads a module (a shared library from `export_library`); `format` may be empty to take it
/// from the file extension.
#[no_mangle]
pub unsafe extern "C" fn TVMModLoadFromFile(
    file_name: *const c_char,
    format: *const c_char,
    out_handle: *mut TVMModuleHandle,
) -> c_int {
    guard(|| {
        super::init();
        // SAFETY: caller's strings and out-pointer.
        unsafe {
            let path = c_str(file_name, "file name")?;
            let fmt = if format.is_null() { "" } else { c_str(format, "format")? };
            let m = library::load_file(path, fmt)?;
            out(out_handle, m.into_raw().cast(), "TVMModLoadFromFile")
        }
    })
}

/// Adds `dep` to `mod`'s imports.
#[no_mangle]
pub unsafe extern "C" fn TVMModImport(module: TVMModuleHandle, dep: TVMModuleHandle) -> c_int {
    guard(|| {
        // SAFETY: caller's handles.
        let (m, d) = unsafe { (module_ref(module)?, module_ref(dep)?) };
        Module::import(&m, d)
    })
}

/// Looks up a function; `*out` is NULL (and the call succeeds) when there is none.
#[no_mangle]
pub unsafe extern "C" fn TVMModGetFunction(
    module: TVMModuleHandle,
    func_name: *const c_char,
    query_imports: c_int,
    out_handle: *mut TVMFunctionHandle,
) -> c_int {
    guard(|| {
        // SAFETY: caller's handle, string and out-pointer.
        unsafe {
            let m = module_ref(module)?;
            let name = c_str(func_name, "function name")?;
            let f = Module::get_function(&m, name, query_imports != 0)?;
            out(out_handle, f.map_or(std::ptr::null_mut(), |f| f.into_raw().cast()), "TVMModGetFunction")
        }
    })
}

/// Releases the caller's reference to a module (NULL is a no-op). Functions and executors
/// obtained from it keep what they need alive.
#[no_mangle]
pub unsafe extern "C" fn TVMModFree(module: TVMModuleHandle) -> c_int {
    guard(|| {
        if !module.is_null() {
            // SAFETY: the caller gives up its count of a module.
            unsafe {
                borrow::<Module>(module, "Module")?;
                release(module.cast());
            }
        }
        Ok(())
    })
}
