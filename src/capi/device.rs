//! Device memory and streams. Only the CPU exists here: streams are null, synchronisation is
//! immediate, any other device type is an error.

use super::{c_str, guard, out, TVMStreamHandle};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::tensor::{raw, RawTensor};
use std::ffi::{c_char, c_int, c_void};

fn check_device(device_type: c_int) -> Result<()> {
    if device_type == kDLCPU || device_type == kDLCUDAHost {
        Ok(())
    } else {
        Err(Error::value(format!(
            "Device API for device type {device_type} is not enabled (this runtime serves the CPU)"
        )))
    }
}

fn alloc(nbytes: usize, alignment: usize) -> Result<*mut c_void> {
    let align = alignment.max(64).next_power_of_two();
    let mut p = std::ptr::null_mut();
    // SAFETY: posix_memalign with a power-of-two alignment that is a multiple of the pointer size.
    let rc = unsafe { libc::posix_memalign(&mut p, align, nbytes.max(1)) };
    if rc != 0 {
        return Err(Error::tvm(format!("out of memory allocating {nbytes} bytes")));
    }
    Ok(p)
}

/// Allocates `nbytes` on the CPU, aligned to max(alignment, 64); free with TVMDeviceFreeDataSpace.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceAllocDataSpace(
    dev: DLDevice,
    nbytes: usize,
    alignment: usize,
    _type_hint: DLDataType,
    out_data: *mut *mut c_void,
) -> c_int {
    guard(|| {
        check_device(dev.device_type)?;
        let p = alloc(nbytes, alignment)?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_data, p, "TVMDeviceAllocDataSpace") }.inspect_err(|_| {
            // SAFETY: allocated just above and not handed out.
            unsafe { libc::free(p) }
        })
    })
}

/// Allocates a compact tensor's bytes on the CPU (scope NULL, "" or "global"); free with
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
        check_device(dev.device_type)?;
        if !mem_scope.is_null() {
            // SAFETY: caller's string.
            let scope = unsafe { c_str(mem_scope, "memory scope") }?;
            if !scope.is_empty() && scope != "global" {
                return Err(Error::value(format!("memory scope '{scope}' is not supported on the CPU")));
            }
        }
        if !(0..=64).contains(&ndim) || (ndim > 0 && shape.is_null()) {
            return Err(Error::value(format!("invalid shape (ndim {ndim})")));
        }
        // SAFETY: `shape` holds `ndim` values.
        let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(shape, ndim as usize) } };
        let p = alloc(crate::dtype::tensor_bytes(dims, dtype)?, dtype.alignment())?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_data, p, "TVMDeviceAllocDataSpaceWithScope") }
    })
}

/// Frees memory from TVMDeviceAllocDataSpace(WithScope); NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn TVMDeviceFreeDataSpace(dev: DLDevice, ptr: *mut c_void) -> c_int {
    guard(|| {
        check_device(dev.device_type)?;
        // SAFETY: memory from TVMDeviceAllocDataSpace (posix_memalign), or null.
        unsafe { libc::free(ptr) };
        Ok(())
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

/// CPU streams do not exist: `*out` is NULL. Other devices: error.
#[no_mangle]
pub unsafe extern "C" fn TVMStreamCreate(
    device_type: c_int,
    _device_id: c_int,
    out_stream: *mut TVMStreamHandle,
) -> c_int {
    guard(|| {
        check_device(device_type)?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_stream, std::ptr::null_mut(), "TVMStreamCreate") }
    })
}

/// No-op on the CPU; other devices: error.
#[no_mangle]
pub extern "C" fn TVMStreamFree(device_type: c_int, _device_id: c_int, _stream: TVMStreamHandle) -> c_int {
    guard(|| check_device(device_type))
}

/// No-op on the CPU; other devices: error.
#[no_mangle]
pub extern "C" fn TVMSetStream(device_type: c_int, _device_id: c_int, _stream: TVMStreamHandle) -> c_int {
    guard(|| check_device(device_type))
}

/// CPU work is synchronous: returns 0. Other devices: error ("not enabled").
#[no_mangle]
pub extern "C" fn TVMSynchronize(device_type: c_int, _device_id: c_int, _stream: TVMStreamHandle) -> c_int {
    guard(|| check_device(device_type))
}

/// No-op on the CPU; other devices: error.
#[no_mangle]
pub extern "C" fn TVMStreamStreamSynchronize(
    device_type: c_int,
    _device_id: c_int,
    _src: TVMStreamHandle,
    _dst: TVMStreamHandle,
) -> c_int {
    guard(|| check_device(device_type))
}
