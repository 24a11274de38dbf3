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
        borrow::<Module>(h, "Module")?;
        AnyObject::retain_raw(h.cast::<ObjectHeader>())
            .and_then(|o| o.downcast::<Module>().ok())
            .ok_or_else(|| Error::type_err("the handle is not a Module"))
    }
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
