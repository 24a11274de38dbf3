//! Device memory and streams, through each device type's API (`crate::device`). Streams: each
//! device has one in-order queue, so a stream is NULL and synchronising waits for that queue.

use super::{c_str, guard, out, TVMStreamHandle};
use crate::device;
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::tensor::{raw, RawTensor};
use std::ffi::{c_char, c_int, c_void};

fn device_of(device_type: c_int, device_id: c_int) -> Result<&'static dyn device::DeviceApi> {
    device::api_of(DLDevice { device_type, device_id })
}

/// Allocates `nbytes` (zeroed) on a device (aligned to at least 64 bytes on the CPU); free with
/// TVMDeviceFreeDataSpace.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceAllocDataSpace(
    dev: DLDevice,
    nbytes: usize,
    alignment: usize,
    _type_hint: DLDataType,
    out_data: *mut *mut c_void,
) -> c_int {
    guard(|| {
        let api = device_of(dev.device_type, dev.device_id)?;
        let p = api.alloc(dev.device_id, nbytes, alignment)?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_data, p, "TVMDeviceAllocDataSpace") }.inspect_err(|_| {
            // SAFETY: allocated just above and not handed out.
            let _ = unsafe { api.free(dev.device_id, p) };
        })
    })
}

/// Allocates a compact tensor's bytes on a device (scope NULL, "" or "global"); free with
/// TVMDeviceFreeDataSpace.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceAllocDataSpaceWithScope(
    dev: DLDevice,
    ndim: c_int,
    shape: *const i64,
    dtype: DLDataType,
    mem_scope: *const c_char,
    out_data: *mut *mut c_void,
) -> c_int {
    guard(|| {
        let api = device_of(dev.device_type, dev.device_id)?;
        if !mem_scope.is_null() {
            // SAFETY: caller's string.
            device::check_memory_scope(unsafe { c_str(mem_scope, "memory scope") }?)?;
        }
        if !(0..=64).contains(&ndim) || (ndim > 0 && shape.is_null()) {
            return Err(Error::value(format!("invalid shape (ndim {ndim})")));
        }
        // SAFETY: `shape` holds `ndim` values.
        let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(shape, ndim as usize) } };
        let p = api.alloc(dev.device_id, crate::dtype::tensor_bytes(dims, dtype)?, dtype.alignment())?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_data, p, "TVMDeviceAllocDataSpaceWithScope") }.inspect_err(|_| {
            // SAFETY: allocated just above and not handed out.
            let _ = unsafe { api.free(dev.device_id, p) };
        })
    })
}

/// Frees memory from TVMDeviceAllocDataSpace(WithScope); NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceFreeDataSpace(dev: DLDevice, ptr: *mut c_void) -> c_int {
    guard(|| {
        let api = device_of(dev.device_type, dev.device_id)?;
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: memory from TVMDeviceAllocDataSpace on this device (the caller's promise).
        unsafe { api.free(dev.device_id, ptr) }
    })
}

/// Copies tensor to tensor, as TVMArrayCopyFromTo.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceCopyDataFromTo(
    from: *mut DLTensor,
    to: *mut DLTensor,
    _stream: TVMStreamHandle,
) -> c_int {
    guard(|| {
        // SAFETY: caller's tensors.
        unsafe { raw::copy_tensor(RawTensor::from_ptr(from)?, RawTensor::from_ptr(to)?) }
    })
}

/// Streams are the device's one queue: `*out` is NULL.
#[no_mangle]
pub unsafe extern "C" fn TVMStreamCreate(
    device_type: c_int,
    device_id: c_int,
    out_stream: *mut TVMStreamHandle,
) -> c_int {
    guard(|| {
        device_of(device_type, device_id)?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_stream, std::ptr::null_mut(), "TVMStreamCreate") }
    })
}

/// Nothing to free (streams are NULL).
#[no_mangle]
pub extern "C" fn TVMStreamFree(device_type: c_int, device_id: c_int, _stream: TVMStreamHandle) -> c_int {
    guard(|| device_of(device_type, device_id).map(|_| ()))
}

/// Work always goes on the device's one queue.
#[no_mangle]
pub extern "C" fn TVMSetStream(device_type: c_int, device_id: c_int, _stream: TVMStreamHandle) -> c_int {
    guard(|| device_of(device_type, device_id).map(|_| ()))
}

/// Waits until the device has finished everything queued on it (at once on the CPU). A stream
/// other than NULL is refused, as upstream's OpenCL.
#[no_mangle]
pub extern "C" fn TVMSynchronize(device_type: c_int, device_id: c_int, stream: TVMStreamHandle) -> c_int {
    guard(|| {
        let api = device_of(device_type, device_id)?;
        if !stream.is_null() && !device::is_host(DLDevice { device_type, device_id }) {
            return Err(Error::value("TVMSynchronize: streams are not used on this device (pass NULL)"));
        }
        api.sync(device_id)
    })
}

/// One queue per device: the two streams are the same, nothing to order.
#[no_mangle]
pub extern "C" fn TVMStreamStreamSynchronize(
    device_type: c_int,
    device_id: c_int,
    _src: TVMStreamHandle,
    _dst: TVMStreamHandle,
) -> c_int {
    guard(|| device_of(device_type, device_id).map(|_| ()))
}
