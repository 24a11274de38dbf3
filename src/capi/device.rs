//! Device memory and streams, through each device type's API (`crate::device`). Streams: each
//! device has one in-order queue, so a stream is NULL and synchronising waits for that queue.

use super::{c_str, guard, out, TVMStreamHandle};
use crate::device;
use crate::device::texture::Texture;
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

/// Allocates a compact tensor's bytes on a device (scope NULL, "" or "global"), or an image for
/// it in a texture scope on a device with images; free with TVMDeviceFreeDataSpace.
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
        let texture = if mem_scope.is_null() {
            None
        } else {
            // SAFETY: caller's string.
            Texture::of_scope(unsafe { c_str(mem_scope, "memory scope") }?)?
        };
        if !(0..=64).contains(&ndim) || (ndim > 0 && shape.is_null()) {
            return Err(Error::value(format!("invalid shape (ndim {ndim})")));
        }
        // SAFETY: `shape` holds `ndim` values.
        let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(shape, ndim as usize) } };
        let p = match texture {
            None => api.alloc(dev.device_id, crate::dtype::tensor_bytes(dims, dtype)?, dtype.alignment())?,
            Some(t) => {
                crate::dtype::tensor_bytes(dims, dtype)?;
                api.alloc_texture(dev.device_id, t, dims, dtype)?
            }
        };
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

/// A new stream on the device: a command queue of its own on OpenCL; NULL on the CPU, which has
/// none (see `DeviceApi`'s streams).
#[no_mangle]
pub unsafe extern "C" fn TVMStreamCreate(
    device_type: c_int,
    device_id: c_int,
    out_stream: *mut TVMStreamHandle,
) -> c_int {
    guard(|| {
        let stream = device_of(device_type, device_id)?.create_stream(device_id)?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_stream, stream, "TVMStreamCreate") }
    })
}

/// Waits for the stream's work and releases it (NULL: nothing to free).
#[no_mangle]
pub extern "C" fn TVMStreamFree(device_type: c_int, device_id: c_int, stream: TVMStreamHandle) -> c_int {
    guard(|| device_of(device_type, device_id)?.free_stream(device_id, stream))
}

/// Makes `stream` the calling thread's current stream on the device: the work this library
/// queues from the thread (executor runs, copies) goes on it. NULL: the device's own queue.
#[no_mangle]
pub extern "C" fn TVMSetStream(device_type: c_int, device_id: c_int, stream: TVMStreamHandle) -> c_int {
    guard(|| device_of(device_type, device_id)?.set_stream(device_id, stream))
}

/// Waits until the device has finished the work on `stream` (NULL: the calling thread's current
/// stream; at once on the CPU).
#[no_mangle]
pub extern "C" fn TVMSynchronize(device_type: c_int, device_id: c_int, stream: TVMStreamHandle) -> c_int {
    guard(|| device_of(device_type, device_id)?.sync_stream(device_id, stream))
}

/// Orders the work queued on `dst` from now on after the work queued on `src` so far.
#[no_mangle]
pub extern "C" fn TVMStreamStreamSynchronize(
    device_type: c_int,
    device_id: c_int,
    src: TVMStreamHandle,
    dst: TVMStreamHandle,
) -> c_int {
    guard(|| device_of(device_type, device_id)?.sync_stream_from_to(device_id, src, dst))
}
