//! Generic objects: type indices and reference counts.

use super::{c_str, function::is_ret_bytes, guard, out, TVMObjectHandle};
use crate::dlpack::TVMByteArray;
use crate::error::Error;
use crate::object::type_table::table;
use crate::object::{release, ObjectHeader};
use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::Ordering;

#[inline]
unsafe fn header<'a>(h: TVMObjectHandle) -> crate::error::Result<&'a ObjectHeader> {
    // SAFETY: a live handle from the caller.
    unsafe { h.cast::<ObjectHeader>().as_ref() }.ok_or_else(|| Error::value("object handle is null"))
}

/// The type index of an object (TVM 0.16's static indices: Module 1, NDArray 2, String 3,
/// Array 4, Map 5, ShapeTuple 6, PackedFunc 7).
#[no_mangle]
pub unsafe extern "C" fn TVMObjectGetTypeIndex(obj: TVMObjectHandle, out_tindex: *mut u32) -> c_int {
    // SAFETY: caller's handle and out-pointer.
    guard(|| unsafe { out(out_tindex, header(obj)?.type_index, "TVMObjectGetTypeIndex") })
}

/// Takes one more reference to an object.
#[no_mangle]
pub unsafe extern "C" fn TVMObjectRetain(obj: TVMObjectHandle) -> c_int {
    // SAFETY: caller's live handle.
    match unsafe { obj.cast::<ObjectHeader>().as_ref() } {
        Some(h) => {
            h.ref_counter.fetch_add(1, Ordering::Relaxed);
            0
        }
        // An increment cannot fail or panic. Only a null handle takes the guarded path, in a C
        // function of its own that cannot unwind, so the retain needs no stack frame: the same
        // atomic update as upstream's.
        None => retain_null(),
    }
}

#[cold]
#[inline(never)]
extern "C" fn retain_null() -> c_int {
    // SAFETY: null, which `header` reports.
    guard(|| unsafe { header(std::ptr::null_mut()) }.map(|_| ()))
}

/// Drops one count; NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn TVMObjectFree(obj: TVMObjectHandle) -> c_int {
    guard(|| {
        if !obj.is_null() {
            // SAFETY: the caller gives up its count.
            unsafe { release(obj.cast()) };
        }
        Ok(())
    })
}

/// The type index of a type key; unknown keys (and "runtime.Object") are an error.
#[no_mangle]
pub unsafe extern "C" fn TVMObjectTypeKey2Index(type_key: *const c_char, out_tindex: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: caller's string and out-pointer.
        unsafe {
            let key = c_str(type_key, "type key")?;
            out(out_tindex, table().key_to_index(key)?, "TVMObjectTypeKey2Index")
        }
    })
}

/// The key of a type index, as a `malloc`ed string the caller frees with `free`.
#[no_mangle]
pub unsafe extern "C" fn TVMObjectTypeIndex2Key(tindex: u32, out_type_key: *mut *mut c_char) -> c_int {
    guard(|| {
        let key = CString::new(table().index_to_key(tindex)?).map_err(|_| Error::value("type key with NUL"))?;
        // SAFETY: strdup copies into malloc'ed memory that the caller frees.
        let p = unsafe { libc::strdup(key.as_ptr()) };
        if p.is_null() {
            return Err(Error::tvm("out of memory"));
        }
        // SAFETY: caller's out-pointer.
        unsafe { out(out_type_key, p, "TVMObjectTypeIndex2Key") }
    })
}

/// Whether type `child` is `parent` or derives from it.
#[no_mangle]
pub unsafe extern "C" fn TVMObjectDerivedFrom(
    child_type_index: u32,
    parent_type_index: u32,
    is_derived: *mut c_int,
) -> c_int {
    guard(|| {
        let d = table().derived_from(child_type_index, parent_type_index)? as c_int;
        // SAFETY: caller's out-pointer.
        unsafe { out(is_derived, d, "TVMObjectDerivedFrom") }
    })
}

/// Byte arrays returned by `TVMFuncCall` live in thread-local storage: nothing to free.
#[no_mangle]
pub unsafe extern "C" fn TVMByteArrayFree(arr: *mut TVMByteArray) -> c_int {
    guard(|| {
        if !arr.is_null() && !is_ret_bytes(arr) {
            return Err(Error::value("TVMByteArrayFree: not a byte array returned by this runtime"));
        }
        Ok(())
    })
}
