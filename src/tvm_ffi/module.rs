//! What the C++ module object (`cxx/ffi_module.cc`) asks of the module of ours it holds.
//!
//! libtvm_ffi's loader appends a library module to our executable's `imports_` itself; those
//! are taken into our module's imports before every lookup, so the Relax VM finds its kernels
//! through them as it does in a library we loaded ourselves.

// The callbacks below have one caller, cxx/ffi_module.cc; their contracts are in cxx/bridge.h.
#![allow(clippy::missing_safety_doc)]

use super::api::{index, Api, Handle};
use super::cells::{call_global, cell, Cells};
use super::values::{function_out, module_in, module_out};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::{AnyObject, ObjRef};
use std::ffi::{c_char, c_int, c_void};

extern "C" {
    /// Where a module object of ours keeps its import array.
    fn tvmrt_ffi_module_imports_slot(handle: Handle) -> *mut Handle;
}

/// Takes what libtvm_ffi appended to a proxy's import array into our module's imports (one
/// thread at a time: lookups from many threads would otherwise take an import twice).
fn adopt_imports(api: &'static Api, m: &ObjRef<Module>, handle: Handle) -> Result<()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a proxy of ours: its slot holds an array object.
    let array = unsafe { *tvmrt_ffi_module_imports_slot(handle) };
    let arr = cell(index::ARRAY, array as u64);
    let n = call_global(api, "ffi.ArraySize", &[arr])?.value as usize;
    let have = m.imports().len();
    for i in have..n {
        let item = Cells(api, vec![call_global(api, "ffi.ArrayGetItem", &[arr, cell(index::INT, i as u64)])?]);
        if item.1[0].type_index != index::MODULE {
            return Err(Error::type_err("an import that is not a module"));
        }
        // SAFETY: a live module object (the cell's count).
        let dep = unsafe { module_in(api, item.1[0].value as Handle)? };
        Module::import(m, dep)?;
    }
    Ok(())
}

/// Replaces a proxy's import array with one listing our module's imports.
fn publish_imports(api: &'static Api, m: &ObjRef<Module>, handle: Handle) -> Result<()> {
    let mut items = Cells(api, Vec::new());
    for dep in m.imports() {
        items.1.push(cell(index::MODULE, module_out(api, &dep)? as u64));
    }
    let fresh = call_global(api, "ffi.Array", &items.1)?;
    // SAFETY: a proxy of ours: the slot holds one count of its array, replaced by the new one.
    unsafe {
        let slot = tvmrt_ffi_module_imports_slot(handle);
        let old = std::mem::replace(&mut *slot, fresh.value as Handle);
        if !old.is_null() {
            (api.dec_ref)(old);
        }
    }
    Ok(())
}

// ---- What the C++ object calls. `module` is the count of ours it holds (borrowed here), `handle`
// the object itself; their one caller is cxx/ffi_module.cc, which passes them as they are. ----

unsafe fn ours(module: *mut c_void) -> Result<ObjRef<Module>> {
    // SAFETY: the proxy's own count keeps it alive; this takes another.
    let o = unsafe { AnyObject::retain_raw(module.cast()) }.ok_or_else(|| Error::value("a released module"))?;
    o.downcast::<Module>().map_err(|_| Error::type_err("not a module"))
}

fn name_of<'a>(name: *const c_char, len: usize) -> Result<&'a str> {
    // SAFETY: the C++ caller's bytes, alive for the call.
    let b = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) } };
    std::str::from_utf8(b).map_err(|_| Error::value("a function name is not UTF-8"))
}

fn status(r: Result<()>) -> c_int {
    crate::capi::guard(|| r)
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_property_mask(module: *mut c_void) -> c_int {
    // SAFETY: the proxy's module.
    crate::capi::guard_value(0, || Ok(unsafe { ours(module)? }.property_mask()))
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_get_function(
    module: *mut c_void,
    handle: Handle,
    name: *const c_char,
    len: usize,
    out: *mut Handle,
) -> c_int {
    crate::capi::guard(|| {
        let api = super::api::require()?;
        // SAFETY: the proxy's module.
        let m = unsafe { ours(module)? };
        adopt_imports(api, &m, handle)?;
        let f = Module::get_function(&m, name_of(name, len)?, false)?;
        let f = match f {
            Some(f) => function_out(api, f)?,
            None => std::ptr::null_mut(),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { *out = f };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_implements(
    module: *mut c_void,
    _handle: Handle,
    name: *const c_char,
    len: usize,
    found: *mut c_int,
) -> c_int {
    crate::capi::guard(|| {
        // SAFETY: the proxy's module.
        let m = unsafe { ours(module)? };
        let f = Module::get_function(&m, name_of(name, len)?, false)?;
        // SAFETY: the caller's out-pointer.
        unsafe { *found = f.is_some() as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_import(module: *mut c_void, handle: Handle, other: Handle) -> c_int {
    status((|| {
        let api = super::api::require()?;
        // SAFETY: the proxy's module; `other` is the host's live module object.
        let (m, dep) = unsafe { (ours(module)?, module_in(api, other)?) };
        adopt_imports(api, &m, handle)?;
        Module::import(&m, dep)?;
        publish_imports(api, &m, handle)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_clear_imports(module: *mut c_void, handle: Handle) -> c_int {
    status((|| {
        let api = super::api::require()?;
        // SAFETY: the proxy's module.
        let m = unsafe { ours(module)? };
        m.clear_imports();
        publish_imports(api, &m, handle)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_empty_array(out: *mut Handle) -> c_int {
    status((|| {
        let api = super::api::require()?;
        let a = call_global(api, "ffi.Array", &[])?;
        // SAFETY: the caller's out-pointer.
        unsafe { *out = a.value as Handle };
        Ok(())
    })())
}

/// The proxy's end: its count of our module and of its two objects.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_ffi_module_release(module: *mut c_void, imports: Handle, cache: Handle) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the counts the proxy held.
        unsafe {
            drop(AnyObject::from_raw(module.cast()));
            if let Some(api) = super::api::api() {
                for h in [imports, cache] {
                    if !h.is_null() {
                        (api.dec_ref)(h);
                    }
                }
            }
        }
    });
}
