//! NDArray handles: a handle is the DLTensor 16 bytes into the array object.

use super::{guard, out, TVMArrayHandle, TVMStreamHandle};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{payload_of, release, AnyObject, ObjRef, ObjectHeader};
use crate::tensor::ndarray::NDARRAY_TENSOR_OFFSET;
use crate::tensor::{raw, NDArray, RawTensor};
use std::ffi::{c_int, c_void};

fn header_of(h: TVMArrayHandle) -> *mut ObjectHeader {
    h.cast::<u8>().wrapping_sub(NDARRAY_TENSOR_OFFSET).cast()
}

/// The array behind a handle this runtime gave out.
#[inline]
unsafe fn array_of<'a>(h: TVMArrayHandle) -> Result<&'a NDArray> {
    if h.is_null() {
        return Err(not_an_array(true));
    }
    // SAFETY: array handles point 16 bytes into a live array object.
    match unsafe { payload_of::<NDArray>(header_of(h)) } {
        Some(a) => Ok(a),
        None => Err(not_an_array(false)),
    }
}

#[cold]
fn not_an_array(null: bool) -> Error {
    if null {
        return Error::value("array handle is null");
    }
    Error::type_err("the handle is not an NDArray")
}

pub(crate) fn handle_of(a: ObjRef<NDArray>) -> TVMArrayHandle {
    a.into_raw().cast::<u8>().wrapping_add(NDARRAY_TENSOR_OFFSET).cast()
}

unsafe fn host_slice<'a>(data: *const c_void, n: usize) -> Result<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Error::value(format!("null host buffer of {n} bytes")));
    }
    // SAFETY: the caller's buffer holds `n` bytes.
    Ok(unsafe { std::slice::from_raw_parts(data.cast(), n) })
}

/// Allocates an uninitialised (here: zeroed) array on a device (64-byte aligned on the CPU).
#[no_mangle]
pub unsafe extern "C" fn TVMArrayAlloc(
    shape: *const i64,
    ndim: c_int,
    dtype_code: c_int,
    dtype_bits: c_int,
    dtype_lanes: c_int,
    device_type: c_int,
    device_id: c_int,
    out_handle: *mut TVMArrayHandle,
) -> c_int {
    guard(|| {
        if !(0..=64).contains(&ndim) || (ndim > 0 && shape.is_null()) {
            return Err(Error::value(format!("TVMArrayAlloc: invalid shape (ndim {ndim})")));
        }
        let (code, bits, lanes) = (
            u8::try_from(dtype_code).map_err(|_| Error::value("invalid dtype code"))?,
            u8::try_from(dtype_bits).map_err(|_| Error::value("invalid dtype bits"))?,
            u16::try_from(dtype_lanes).map_err(|_| Error::value("invalid dtype lanes"))?,
        );
        // SAFETY: `shape` holds `ndim` values.
        let dims = if ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(shape, ndim as usize) } };
        let a = NDArray::empty(dims, DLDataType::new(code, bits, lanes), DLDevice { device_type, device_id })?;
        // SAFETY: caller's out-pointer.
        unsafe { out(out_handle, handle_of(a), "TVMArrayAlloc") }
    })
}

/// Releases the caller's reference to an array (NULL is a no-op); the memory goes with the last
/// reference (views and executors may hold others).
#[no_mangle]
pub unsafe extern "C" fn TVMArrayFree(handle: TVMArrayHandle) -> c_int {
    guard(|| {
        if !handle.is_null() {
            // SAFETY: the caller gives up its count of an array.
            unsafe {
                array_of(handle)?;
                release(header_of(handle));
            }
        }
        Ok(())
    })
}

/// Copies `nbytes` host bytes into a compact array on any device; `nbytes` must equal the array's
/// size. Returns once the array holds them. Not synchronised with other writers of the array.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayCopyFromBytes(handle: TVMArrayHandle, data: *mut c_void, nbytes: usize) -> c_int {
    guard(|| {
        // SAFETY: caller's tensor and buffer.
        unsafe { raw::copy_from_bytes(RawTensor::from_ptr(handle)?, host_slice(data, nbytes)?) }
    })
}

/// Copies a compact array on any device out into `nbytes` host bytes (after the work queued on
/// it); `nbytes` must equal its size.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayCopyToBytes(handle: TVMArrayHandle, data: *mut c_void, nbytes: usize) -> c_int {
    guard(|| {
        if nbytes > 0 && data.is_null() {
            return Err(Error::value(format!("null host buffer of {nbytes} bytes")));
        }
        // SAFETY: caller's tensor and a buffer of `nbytes`.
        unsafe {
            let dst = if nbytes == 0 { &mut [][..] } else { std::slice::from_raw_parts_mut(data.cast::<u8>(), nbytes) };
            raw::copy_to_bytes(RawTensor::from_ptr(handle)?, dst)
        }
    })
}

/// Copies array to array (any `DLTensor*`, host or device); byte sizes must match, shapes are not
/// compared. Streams are not used: copies go on the device's one queue, in order.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayCopyFromTo(
    from: TVMArrayHandle,
    to: TVMArrayHandle,
    _stream: TVMStreamHandle,
) -> c_int {
    guard(|| {
        // SAFETY: caller's tensors.
        unsafe { raw::copy_tensor(RawTensor::from_ptr(from)?, RawTensor::from_ptr(to)?) }
    })
}

/// The type index of the array object (2), as Python asks for every returned array.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayGetTypeIndex(handle: TVMArrayHandle, out_index: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: caller's handle and out-pointer.
        unsafe {
            array_of(handle)?; // the handle must be an array of ours
            out(out_index, crate::object::type_index::NDARRAY, "TVMArrayGetTypeIndex")
        }
    })
}

/// Wraps a DLPack tensor without copying; the new array calls its deleter when freed.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayFromDLPack(from: *mut DLManagedTensor, out_handle: *mut TVMArrayHandle) -> c_int {
    guard(|| {
        if from.is_null() {
            return Err(Error::value("TVMArrayFromDLPack: null tensor"));
        }
        // SAFETY: the caller hands the managed tensor over.
        unsafe {
            let a = NDArray::from_dlpack(from)?;
            out(out_handle, handle_of(a), "TVMArrayFromDLPack")
        }
    })
}

unsafe extern "C" fn dlpack_deleter(t: *mut DLManagedTensor) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: made by `TVMArrayToDLPack`: a boxed tensor whose context holds one count.
        unsafe {
            let b = Box::from_raw(t);
            drop(AnyObject::from_raw(b.manager_ctx.cast()));
        }
    });
}

/// Exports an array as DLPack; the array stays alive until the tensor's deleter runs.
#[no_mangle]
pub unsafe extern "C" fn TVMArrayToDLPack(from: TVMArrayHandle, out_tensor: *mut *mut DLManagedTensor) -> c_int {
    guard(|| {
        // SAFETY: caller's handle and out-pointer.
        unsafe {
            let a = array_of(from)?;
            let keep = AnyObject::retain_raw(header_of(from)).ok_or_else(|| Error::value("null array"))?;
            let managed = Box::new(DLManagedTensor {
                dl_tensor: *a.dl_tensor(),
                manager_ctx: keep.into_raw().cast(),
                deleter: Some(dlpack_deleter),
            });
            out(out_tensor, Box::into_raw(managed), "TVMArrayToDLPack")
        }
    })
}

/// Calls a DLPack tensor's deleter (NULL is a no-op).
#[no_mangle]
pub unsafe extern "C" fn TVMDLManagedTensorCallDeleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: a managed tensor handed to us for deletion.
        unsafe {
            if let Some(d) = (*t).deleter {
                d(t)
            }
        }
    });
}
