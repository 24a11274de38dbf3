//! Modules a C++ host defined (its own `ModuleNode` subclasses), held by this runtime when the host
//! hands one over: imported into a loaded library, or passed as an argument. Their functions are
//! found through the host's own virtual `GetFunction`, called by the C++ layer (`cxx/modules.cc`),
//! whose exceptions stop there.

use crate::capi::{guard, out, TVMModuleHandle};
use crate::error::{Error, Result};
use crate::last_error;
use crate::module::{KeptImports, Module, ModuleNode};
use crate::object::{release, ObjRef, ObjectHeader};
use crate::packed::PackedFunc;
use std::any::Any;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::cxx_abi::{
    tvmrt_cxx_host_module_clear_imports, tvmrt_cxx_host_module_get_function, tvmrt_cxx_host_module_import,
    tvmrt_cxx_host_module_imports, tvmrt_cxx_host_module_save, tvmrt_cxx_host_module_text,
    tvmrt_cxx_host_module_type_key,
};

struct HostModule {
    /// The host's object; this holds one count of it.
    obj: *mut ObjectHeader,
    type_key: String,
}

// SAFETY: upstream's modules are shared between threads by contract; the count is atomic.
unsafe impl Send for HostModule {}
// SAFETY: as above.
unsafe impl Sync for HostModule {}

impl Drop for HostModule {
    fn drop(&mut self) {
        // SAFETY: the count taken in `tvmrt_module_from_host`.
        unsafe { release(self.obj) }
    }
}

impl ModuleNode for HostModule {
    fn type_key(&self) -> &str {
        &self.type_key
    }

    fn get_function(&self, _: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let cname = c_string(name)?;
        let mut f: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live host module (we hold a count), a C string, an out-pointer.
        if unsafe { tvmrt_cxx_host_module_get_function(self.obj.cast(), cname.as_ptr(), &mut f) } != 0 {
            return Err(Error::foreign(last_error::get()));
        }
        if f.is_null() {
            return Ok(None);
        }
        // SAFETY: the C++ layer hands over one count of a function of this runtime.
        let func = unsafe { crate::object::AnyObject::from_raw(f.cast()) }
            .ok_or_else(|| Error::internal("a host module gave a null function"))?;
        func.downcast::<PackedFunc>().map(Some).map_err(|_| Error::internal("a host module gave a foreign function"))
    }

    fn source(&self, format: &str) -> Result<String> {
        self.text(0, format)
    }

    fn format(&self) -> Result<String> {
        self.text(1, "")
    }

    fn save_to_file(&self, path: &str, format: &str) -> Result<()> {
        let (path, format) = (c_string(path)?, c_string(format)?);
        // SAFETY: a live host module (we hold a count) and two C strings.
        status(unsafe { tvmrt_cxx_host_module_save(self.obj.cast(), path.as_ptr(), format.as_ptr()) })
    }

    fn kept_imports(&self) -> Option<&dyn KeptImports> {
        Some(self)
    }

    fn stands_for(&self) -> Option<usize> {
        Some(self.obj as usize)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The host's `imports_` is the list: its own code walks it, and every stand-in for the module
/// sees the same one.
impl KeptImports for HostModule {
    fn list(&self) -> Vec<ObjRef<Module>> {
        // SAFETY: a live host module; a null buffer of capacity 0 asks for the count.
        let n = unsafe { tvmrt_cxx_host_module_imports(self.obj.cast(), std::ptr::null_mut(), 0) };
        let mut handles = vec![std::ptr::null_mut::<c_void>(); n];
        // SAFETY: as above, with room for `n` handles, each a new count of a module of ours.
        let got = unsafe { tvmrt_cxx_host_module_imports(self.obj.cast(), handles.as_mut_ptr(), n) };
        handles
            .into_iter()
            .take(got.min(n))
            // SAFETY: each handle is one count of a live module, taken over here.
            .filter_map(|h| unsafe { crate::object::AnyObject::from_raw(h.cast()) })
            .filter_map(|o| o.downcast::<Module>().ok())
            .collect()
    }

    fn push(&self, dep: &ObjRef<Module>) -> Result<()> {
        // SAFETY: a live host module and a live module of ours, borrowed for the call.
        status(unsafe { tvmrt_cxx_host_module_import(self.obj.cast(), dep.as_ptr().cast()) })
    }

    fn clear(&self) {
        // SAFETY: a live host module.
        unsafe { tvmrt_cxx_host_module_clear_imports(self.obj.cast()) }
    }
}

impl HostModule {
    /// The host's `GetSource(format)` (what 0) or `GetFormat()` (what 1).
    fn text(&self, what: c_int, format: &str) -> Result<String> {
        let format = c_string(format)?;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live host module, a C string, an out-pointer.
        status(unsafe { tvmrt_cxx_host_module_text(self.obj.cast(), what, format.as_ptr(), &mut out) })?;
        if out.is_null() {
            return Err(Error::internal("a host module's text came back null"));
        }
        // SAFETY: a NUL-terminated copy the C++ layer made with malloc, ours to free.
        let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        // SAFETY: as above, freed once.
        unsafe { libc::free(out.cast()) };
        Ok(text)
    }
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::value(format!("'{}' holds a NUL", s.escape_debug())))
}

/// A C status from the C++ layer: its last error on failure.
fn status(rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::foreign(last_error::get()))
    }
}

/// A module of this runtime standing for the host's module `obj` (which must be a live
/// `ModuleNode` of the host); the new module holds a count of it.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_module_from_host(obj: *mut c_void, out_handle: *mut TVMModuleHandle) -> c_int {
    guard(|| {
        if obj.is_null() {
            return Err(Error::value("host module is null"));
        }
        // SAFETY: the C++ layer passes a live host module and keeps it alive for the call.
        let m = unsafe { wrap(obj) };
        // SAFETY: the caller's out-pointer.
        unsafe { out(out_handle, m.into_raw().cast(), "tvmrt_module_from_host") }
    })
}

/// A stand-in for the host module at `obj`, holding a count of it.
///
/// # Safety
/// `obj` is a live `ModuleNode` of the host (its object header).
unsafe fn wrap(obj: *mut c_void) -> ObjRef<Module> {
    // SAFETY: the caller's live host module.
    let key = unsafe { tvmrt_cxx_host_module_type_key(obj) };
    let type_key = if key.is_null() {
        "host".into()
    } else {
        // SAFETY: `type_key()` returns a NUL-terminated string that lives as long as the module.
        unsafe { CStr::from_ptr(key) }.to_string_lossy().into()
    };
    let header = obj.cast::<ObjectHeader>();
    // SAFETY: a live object; this takes the count `HostModule` releases.
    unsafe { (*header).ref_counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) };
    Module::new(HostModule { obj: header, type_key })
}

/// The host's own module that `module` stands for (borrowed), or null when `module` is not a
/// stand-in: the C++ layer hands a host its own object back, so its casts to its own class hold.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_module_host_object(module: *mut c_void) -> *mut c_void {
    let found = std::panic::catch_unwind(|| {
        // SAFETY: the C++ layer passes a live module handle.
        let m = unsafe { crate::object::payload_of::<Module>(module.cast()) }?;
        m.node::<HostModule>().map(|h| h.obj.cast::<c_void>())
    });
    found.ok().flatten().unwrap_or(std::ptr::null_mut())
}
