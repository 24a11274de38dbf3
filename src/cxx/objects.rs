//! Objects for the C++ layer: telling the core's objects from a host's, the type indices of a
//! host's classes (`Object::GetOrAllocRuntimeTypeIndex`), and what `DeviceAPI::Get` asks of the
//! device layer.

use crate::capi::{c_str, guard, out};
use crate::object::type_table::table;
use std::ffi::{c_char, c_int, c_void};

/// Whether `obj` is an object of this runtime rather than one a C++ host made with upstream's
/// layouts (used by the C++ layer, `cxx/containers.cc`, to convert containers at the boundary).
#[no_mangle]
pub unsafe extern "C" fn tvmrt_object_is_native(obj: *const c_void) -> c_int {
    // SAFETY: the C++ layer passes live object handles.
    std::panic::catch_unwind(|| unsafe { crate::object::native::is_native(obj.cast()) } as c_int).unwrap_or(0)
}

/// The index of a host's object type, allocated on first use with upstream's rules (the C++
/// layer's `Object::GetOrAllocRuntimeTypeIndex`; `static_tindex` is 12, upstream's `kDynamic`, for a dynamic one).
#[no_mangle]
pub unsafe extern "C" fn tvmrt_type_index_alloc(
    type_key: *const c_char,
    static_tindex: u32,
    parent_tindex: u32,
    num_child_slots: u32,
    child_slots_can_overflow: c_int,
    out_tindex: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: the C++ layer's string and out-pointer.
        unsafe {
            let key = c_str(type_key, "type key")?;
            let index =
                table().alloc(key, static_tindex, parent_tindex, num_child_slots, child_slots_can_overflow != 0)?;
            out(out_tindex, index, "tvmrt_type_index_alloc")
        }
    })
}

/// Refuses a memory scope the device layer does not serve (the C++ layer's `NDArray::Empty` and
/// `CopyTo` with a scope), with the device layer's own message.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_check_memory_scope(scope: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: the C++ layer's NUL-terminated string.
        let scope = unsafe { c_str(scope, "memory scope") }?;
        crate::device::check_memory_scope(scope)
    })
}

/// Whether the device layer serves `device_type` (`DeviceAPI::Get`): 0 with `served` set, or -1
/// with upstream's error ("Device API <name> is not enabled.") when it does not and the caller
/// does not allow a missing one.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_device_api_check(device_type: c_int, allow_missing: c_int, served: *mut c_int) -> c_int {
    guard(|| {
        let ok = crate::device::api(device_type).is_ok();
        if !ok && allow_missing == 0 {
            return Err(crate::error::Error::tvm(format!(
                "Device API {} is not enabled.",
                crate::device::type_name(device_type)
            )));
        }
        // SAFETY: the C++ layer's out-pointer.
        unsafe { out(served, c_int::from(ok), "tvmrt_device_api_check") }
    })
}

/// The calling thread's current stream of a device (`DeviceAPI::GetCurrentStream`).
#[no_mangle]
pub unsafe extern "C" fn tvmrt_current_stream(device_type: c_int, device_id: c_int, stream: *mut *mut c_void) -> c_int {
    guard(|| {
        let s = crate::device::api(device_type)?.current_stream(device_id)?;
        // SAFETY: the C++ layer's out-pointer.
        unsafe { out(stream, s, "tvmrt_current_stream") }
    })
}
