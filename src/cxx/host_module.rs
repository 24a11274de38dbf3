//! Modules a C++ host defined (its own `ModuleNode` subclasses), held by this runtime when the host
//! hands one over: imported into a loaded library, or passed as an argument. Their functions are
//! found through the host's own virtual `GetFunction`, called by the C++ layer (`cxx/modules.cc`),
//! whose exceptions stop there.

use crate::capi::{guard, out, TVMModuleHandle};
use crate::error::{Error, Result};
use crate::last_error;
use crate::module::{Module, ModuleNode};
use crate::object::{release, ObjRef, ObjectHeader};
use crate::packed::PackedFunc;
use std::any::Any;
use std::ffi::{c_int, c_void, CStr, CString};

use crate::cxx_abi::{tvmrt_cxx_host_module_get_function, tvmrt_cxx_host_module_type_key};

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
        let cname = CString::new(name).map_err(|_| Error::value("function names cannot hold NUL"))?;
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

    fn as_any(&self) -> &dyn Any {
        self
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
        let m = Module::new(HostModule { obj: header, type_key });
        // SAFETY: the caller's out-pointer.
        unsafe { out(out_handle, m.into_raw().cast(), "tvmrt_module_from_host") }
    })
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
