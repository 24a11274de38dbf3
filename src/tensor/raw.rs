//! Reading and copying `DLTensor`s that come from outside (a host program, Python, a kernel).
//! The one place that dereferences tensor structs we did not build.

use crate::dlpack::{kDLCPU, kDLCUDAHost, DLDataType, DLDevice, DLTensor};
use crate::dtype::tensor_bytes;
use crate::error::{Error, Result};

/// A borrowed view of a caller's `DLTensor`, valid for the duration of one call.
#[derive(Clone, Copy)]
pub struct RawTensor<'a> {
    t: &'a DLTensor,
}

impl<'a> RawTensor<'a> {
    /// # Safety
    /// `ptr` must be null or point at a `DLTensor` whose `shape` (and `strides`, when set) hold
    /// `ndim` elements, and whose `data` (from `byte_offset`), when not null, addresses the
    /// tensor's bytes, readable and not written by anyone else, all for `'a` — what the packed-call
    /// contract promises for arguments. Writing the bytes takes a promise of its own (the `unsafe`
    /// copy functions below).
    pub unsafe fn from_ptr(ptr: *const DLTensor) -> Result<RawTensor<'a>> {
        // SAFETY: per the contract.
        let t = unsafe { ptr.as_ref() }.ok_or_else(|| Error::value("null tensor handle"))?;
        if t.ndim < 0 || t.ndim > 64 || (t.ndim > 0 && t.shape.is_null()) {
            return Err(Error::value(format!("malformed tensor: ndim {} with shape {:p}", t.ndim, t.shape)));
        }
        Ok(RawTensor { t })
    }

    pub fn shape(&self) -> &'a [i64] {
        if self.t.ndim == 0 {
            return &[];
        }
        // SAFETY: `from_ptr`'s contract: `shape` holds `ndim` values.
        unsafe { std::slice::from_raw_parts(self.t.shape, self.t.ndim as usize) }
    }

    pub fn dtype(&self) -> DLDataType {
        self.t.dtype
    }

    pub fn device(&self) -> DLDevice {
        self.t.device
    }

    pub fn as_ptr(&self) -> *const DLTensor {
        self.t
    }

    /// Address of the first element.
    pub fn data_ptr(&self) -> *mut u8 {
        self.t.data.cast::<u8>().wrapping_add(self.t.byte_offset as usize)
    }

    pub fn nbytes(&self) -> Result<usize> {
        tensor_bytes(self.shape(), self.t.dtype)
    }

    /// Row-major with no gaps: `strides` null, or equal to the compact strides.
    pub fn is_compact(&self) -> bool {
        if self.t.strides.is_null() {
            return true;
        }
        // SAFETY: `from_ptr`'s contract: `strides`, when set, holds `ndim` values.
        let strides = unsafe { std::slice::from_raw_parts(self.t.strides, self.t.ndim as usize) };
        let mut expected = 1i64;
        for (dim, stride) in self.shape().iter().zip(strides).rev() {
            if *dim != 1 && *stride != expected {
                return false;
            }
            expected = expected.saturating_mul(*dim);
        }
        true
    }

    /// Host memory in the one layout this runtime copies: on the CPU and compact.
    fn check_host(&self, what: &str) -> Result<()> {
        let dev = self.t.device.device_type;
        if dev != kDLCPU && dev != kDLCUDAHost {
            return Err(Error::value(format!("{what}: device type {dev} is not enabled in this CPU runtime")));
        }
        if !self.is_compact() {
            return Err(Error::value(format!("{what}: only compact (row-major, no strides) tensors are supported")));
        }
        Ok(())
    }

    fn host_bytes(&self, what: &str) -> Result<usize> {
        self.check_host(what)?;
        let n = self.nbytes()?;
        if n > 0 && self.t.data.is_null() {
            return Err(Error::value(format!("{what}: tensor data is null")));
        }
        Ok(n)
    }
}

/// Copies `bytes` into `to`; the sizes must match exactly.
///
/// # Safety
/// `to`'s bytes must be writable, and nobody else may access them during the call.
pub unsafe fn copy_from_bytes(to: RawTensor<'_>, bytes: &[u8]) -> Result<()> {
    let n = to.host_bytes("copy from bytes")?;
    if n != bytes.len() {
        return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
    }
    // SAFETY: `to` is a valid host tensor of `n` bytes (checked above); the source is a slice.
    unsafe { std::ptr::copy(bytes.as_ptr(), to.data_ptr(), n) };
    Ok(())
}

/// Copies `from` out into `out`; the sizes must match exactly.
pub fn copy_to_bytes(from: RawTensor<'_>, out: &mut [u8]) -> Result<()> {
    let n = from.host_bytes("copy to bytes")?;
    if n != out.len() {
        return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} requested", out.len())));
    }
    // SAFETY: as in `copy_from_bytes`.
    unsafe { std::ptr::copy(from.data_ptr(), out.as_mut_ptr(), n) };
    Ok(())
}

/// Copies `n` bytes of `from` (whose shape and dtype the caller has matched to `n`) to `to`.
///
/// # Safety
/// `to` must be null or valid for writing `n` bytes.
pub unsafe fn copy_to_own(from: RawTensor<'_>, to: *mut u8, n: usize) -> Result<()> {
    from.check_host("copy source")?;
    if n == 0 {
        return Ok(());
    }
    if from.t.data.is_null() || to.is_null() {
        return Err(Error::value("tensor data is null"));
    }
    // SAFETY: `from` is a valid host tensor of `n` bytes (per the caller's match); `to` holds `n`
    // per this function's contract.
    unsafe { std::ptr::copy(from.data_ptr(), to, n) };
    Ok(())
}

/// Copies `n` bytes at `from` into `to`, whose shape and dtype the caller has matched to `n`.
///
/// # Safety
/// `from` must be null or valid for reading `n` bytes.
pub unsafe fn copy_from_own(from: *const u8, to: RawTensor<'_>, n: usize) -> Result<()> {
    to.check_host("copy destination")?;
    if n == 0 {
        return Ok(());
    }
    if from.is_null() || to.t.data.is_null() {
        return Err(Error::value("tensor data is null"));
    }
    // SAFETY: `to` is a valid host tensor of `n` bytes (per the caller's match); `from` holds `n`
    // per this function's contract.
    unsafe { std::ptr::copy(from, to.data_ptr(), n) };
    Ok(())
}

/// Copies tensor to tensor; byte sizes must match (shapes and dtypes are not compared, as upstream).
///
/// # Safety
/// `to`'s bytes must be writable, and nobody else may access them during the call.
pub unsafe fn copy_tensor(from: RawTensor<'_>, to: RawTensor<'_>) -> Result<()> {
    let n = from.host_bytes("copy source")?;
    let m = to.host_bytes("copy destination")?;
    if n != m {
        return Err(Error::value(format!(
            "cannot copy {n} bytes ({} {:?}) into {m} bytes ({} {:?})",
            from.dtype(),
            from.shape(),
            to.dtype(),
            to.shape()
        )));
    }
    // SAFETY: both are valid host tensors of `n` bytes; `copy` tolerates overlap.
    unsafe { std::ptr::copy(from.data_ptr(), to.data_ptr(), n) };
    Ok(())
}
