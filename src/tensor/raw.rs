//! Reading and copying `DLTensor`s that come from outside (a host program, Python, a kernel).
//! The one place that dereferences tensor structs we did not build.

use crate::device::{self, Place};
use crate::dlpack::{DLDataType, DLDevice, DLTensor};
use crate::dtype::tensor_bytes;
use crate::error::{Error, Result};

/// A borrowed view of a caller's `DLTensor`, valid for the duration of one call.
#[derive(Clone, Copy)]
pub struct RawTensor<'a> {
    t: &'a DLTensor,
}

/// A caller's tensor to bind with zero-copy (`set_input_zero_copy`, `set_output_zero_copy`), and
/// the caller's promise about its memory.
#[derive(Clone, Copy)]
pub struct ZeroCopy<'a> {
    tensor: RawTensor<'a>,
}

impl<'a> ZeroCopy<'a> {
    /// # Safety
    /// The tensor's data must stay valid for reading and writing its bytes for as long as it is
    /// bound (until the binding is replaced or its holder is freed), and the caller must not use
    /// it while the holder runs: TVM's zero-copy contract.
    pub unsafe fn new(tensor: RawTensor<'a>) -> ZeroCopy<'a> {
        ZeroCopy { tensor }
    }

    pub fn tensor(&self) -> RawTensor<'a> {
        self.tensor
    }
}

impl<'a> RawTensor<'a> {
    /// # Safety
    /// `ptr` must be null or point at a `DLTensor` whose `shape` (and `strides`, when set) hold
    /// `ndim` elements, and whose `data` (from `byte_offset`), when not null, addresses the
    /// tensor's bytes, readable and not written by anyone else, all for `'a` — what the packed-call
    /// contract promises for arguments. Writing the bytes takes a promise of its own (the `unsafe`
    /// copy functions below).
    #[inline]
    pub unsafe fn from_ptr(ptr: *const DLTensor) -> Result<RawTensor<'a>> {
        // SAFETY: per the contract.
        match unsafe { ptr.as_ref() } {
            Some(t) if (0..=64).contains(&t.ndim) && (t.ndim == 0 || !t.shape.is_null()) => Ok(RawTensor { t }),
            t => Err(malformed(t)),
        }
    }

    #[inline]
    pub fn shape(&self) -> &'a [i64] {
        if self.t.ndim == 0 {
            return &[];
        }
        // SAFETY: `from_ptr`'s contract: `shape` holds `ndim` values.
        unsafe { std::slice::from_raw_parts(self.t.shape, self.t.ndim as usize) }
    }

    /// Whether the tensor has exactly `shape`: compared in line, element by element (slice
    /// equality calls `memcmp`, which costs more than the few dimensions it compares).
    #[inline]
    pub fn has_shape(&self, shape: &[i64]) -> bool {
        let mine = self.shape();
        mine.len() == shape.len() && mine.iter().zip(shape).all(|(a, b)| a == b)
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
    #[inline]
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

    /// Where the tensor's first byte is, for copies on any device.
    #[inline]
    pub fn place(&self) -> Place {
        Place { data: self.t.data, offset: self.t.byte_offset as usize, device: self.t.device, shape: None }
            .with_shape(self.shape())
    }

    /// The byte size of a tensor this runtime can copy: compact, with data unless empty.
    fn copyable_bytes(&self, what: &str) -> Result<usize> {
        self.check_compact(what)?;
        let n = self.nbytes()?;
        self.check_data(what, n)?;
        Ok(n)
    }

    /// Whether this runtime can copy the tensor, whose byte size the caller has matched to `n`
    /// (from its shape and dtype): as [`Self::copyable_bytes`], without computing the size again.
    #[inline]
    fn check_copyable(&self, what: &str, n: usize) -> Result<()> {
        debug_assert!(self.nbytes().is_ok_and(|m| m == n), "{what}: the caller matched the size");
        self.check_compact(what)?;
        self.check_data(what, n)
    }

    #[inline]
    fn check_compact(&self, what: &str) -> Result<()> {
        if !self.is_compact() {
            return Err(not_compact(what));
        }
        Ok(())
    }

    #[inline]
    fn check_data(&self, what: &str, n: usize) -> Result<()> {
        if n > 0 && self.t.data.is_null() {
            return Err(null_data(what));
        }
        Ok(())
    }
}

#[cold]
fn malformed(t: Option<&DLTensor>) -> Error {
    match t {
        None => Error::value("null tensor handle"),
        Some(t) => Error::value(format!("malformed tensor: ndim {} with shape {:p}", t.ndim, t.shape)),
    }
}

#[cold]
fn not_compact(what: &str) -> Error {
    Error::value(format!("{what}: only compact (row-major, no strides) tensors are supported"))
}

#[cold]
fn null_data(what: &str) -> Error {
    Error::value(format!("{what}: tensor data is null"))
}

fn host_place(p: *const u8) -> Place {
    Place { data: p.cast_mut().cast(), offset: 0, device: DLDevice::CPU, shape: None }
}

/// Copies `bytes` into `to`; the sizes must match exactly.
///
/// # Safety
/// `to`'s bytes must be writable, and nobody else may access them during the call.
pub unsafe fn copy_from_bytes(to: RawTensor<'_>, bytes: &[u8]) -> Result<()> {
    let n = to.copyable_bytes("copy from bytes")?;
    if n != bytes.len() {
        return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
    }
    // SAFETY: `to` is a valid tensor of `n` bytes on its device (checked above, and the caller's
    // promise); the source is a slice.
    unsafe { device::copy(host_place(bytes.as_ptr()), to.place(), n) }
}

/// Copies `from` out into `out`; the sizes must match exactly.
pub fn copy_to_bytes(from: RawTensor<'_>, out: &mut [u8]) -> Result<()> {
    let n = from.copyable_bytes("copy to bytes")?;
    if n != out.len() {
        return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} requested", out.len())));
    }
    // SAFETY: as in `copy_from_bytes`; `out` is ours to write.
    unsafe { device::copy(from.place(), host_place(out.as_mut_ptr()), n) }
}

/// Copies the first `out.len()` bytes of the tensor to host memory (a scalar's, without copying
/// the rest of its array).
pub fn copy_prefix_to_bytes(from: RawTensor<'_>, out: &mut [u8]) -> Result<()> {
    let n = from.copyable_bytes("copy to bytes")?;
    if out.len() > n {
        return Err(Error::value(format!("the array holds {n} bytes, {} requested", out.len())));
    }
    if from.t.device.device_type == crate::dlpack::kDLCPU {
        // Host memory, read as it is (a VM reads a scalar per allocation: no device dispatch).
        // SAFETY: the tensor's data holds `n` >= `out.len()` readable bytes from its offset (it
        // is compact, with data: checked above); `out` is ours, and apart from the tensor.
        unsafe {
            std::ptr::copy_nonoverlapping(
                from.t.data.cast::<u8>().add(from.t.byte_offset as usize).cast_const(),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        return Ok(());
    }
    // SAFETY: as in `copy_to_bytes`, for the first `out.len()` of the tensor's `n` bytes.
    unsafe { device::copy(from.place(), host_place(out.as_mut_ptr()), out.len()) }
}

/// Copies tensor to tensor; byte sizes must match (shapes and dtypes are not compared, as upstream).
///
/// # Safety
/// `to`'s bytes must be writable, and nobody else may access them during the call.
pub unsafe fn copy_tensor(from: RawTensor<'_>, to: RawTensor<'_>) -> Result<()> {
    let n = from.copyable_bytes("copy source")?;
    let m = to.copyable_bytes("copy destination")?;
    if n != m {
        return Err(Error::value(format!(
            "cannot copy {n} bytes ({} {:?}) into {m} bytes ({} {:?})",
            from.dtype(),
            from.shape(),
            to.dtype(),
            to.shape()
        )));
    }
    // SAFETY: both are valid tensors of `n` bytes on their devices; host copies tolerate overlap.
    unsafe { device::copy(from.place(), to.place(), n) }
}

/// The host address of the tensor's first byte, when its memory is the host's.
fn host_data(t: &RawTensor<'_>) -> Option<*mut u8> {
    device::is_host(t.t.device).then(|| t.t.data.cast::<u8>().wrapping_add(t.t.byte_offset as usize))
}

/// As [`copy_to_place`] into host memory at `to`, when `from` is on the host too (every request's
/// input): no `Place` is built. `Ok(false)` when `from` is a device's: the caller copies through
/// [`copy_to_place`].
///
/// # Safety
/// `to` must be valid for writing `n` bytes, and `from`'s shape and dtype matched to `n`.
#[inline]
pub unsafe fn copy_between_hosts(from: RawTensor<'_>, to: *mut u8, n: usize) -> Result<bool> {
    let Some(src) = host_data(&from) else { return Ok(false) };
    from.check_copyable("copy source", n)?;
    if n > 0 {
        if to.is_null() {
            return Err(Error::value("tensor data is null"));
        }
        // SAFETY: `from` holds `n` bytes on the host (the caller's match; compact, data not null:
        // checked); `to` per this function's contract. Overlap is allowed, as in `device::copy`.
        unsafe { std::ptr::copy(src.cast_const(), to, n) };
    }
    Ok(true)
}

/// As [`copy_from_place`] from host memory at `from`, when `to` is on the host too (every
/// request's output copied out). `Ok(false)` when `to` is a device's.
///
/// # Safety
/// `from` must be valid for reading `n` bytes, and `to`'s shape and dtype matched to `n`.
#[inline]
pub unsafe fn copy_from_host(from: *const u8, to: RawTensor<'_>, n: usize) -> Result<bool> {
    let Some(dst) = host_data(&to) else { return Ok(false) };
    to.check_copyable("copy destination", n)?;
    if n > 0 {
        if from.is_null() {
            return Err(Error::value("tensor data is null"));
        }
        // SAFETY: `to` holds `n` writable bytes on the host (the caller's match and the
        // packed-call contract; compact, data not null: checked); `from` per this contract.
        unsafe { std::ptr::copy(from, dst, n) };
    }
    Ok(true)
}

/// Copies `n` bytes of `from` (whose shape and dtype the caller has matched to `n`) to `to`.
///
/// # Safety
/// `to` must be valid for writing `n` bytes on its device.
#[inline]
pub unsafe fn copy_to_place(from: RawTensor<'_>, to: Place, n: usize) -> Result<()> {
    from.check_copyable("copy source", n)?;
    if n == 0 {
        return Ok(());
    }
    if to.data.is_null() {
        return Err(Error::value("tensor data is null"));
    }
    // SAFETY: `from` holds `n` bytes (the caller's match); `to` per this function's contract.
    unsafe { device::copy(from.place(), to, n) }
}

/// Copies `n` bytes at `from` into `to`, whose shape and dtype the caller has matched to `n`.
///
/// # Safety
/// `from` must be valid for reading `n` bytes on its device.
#[inline]
pub unsafe fn copy_from_place(from: Place, to: RawTensor<'_>, n: usize) -> Result<()> {
    to.check_copyable("copy destination", n)?;
    if n == 0 {
        return Ok(());
    }
    if from.data.is_null() {
        return Err(Error::value("tensor data is null"));
    }
    // SAFETY: `to` holds `n` bytes (the caller's match); `from` per this function's contract.
    unsafe { device::copy(from, to.place(), n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(shape: &mut [i64], ndim: i32) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice::CPU,
            ndim,
            dtype: DLDataType::F32,
            shape: if shape.is_empty() { std::ptr::null_mut() } else { shape.as_mut_ptr() },
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    #[test]
    fn a_tensor_is_taken_with_0_to_64_dimensions_and_a_shape() {
        let mut dims = [1i64; 65];
        for (ndim, ok) in [(0, true), (1, true), (64, true), (65, false), (-1, false)] {
            let t = tensor(&mut dims, ndim);
            // SAFETY: `dims` holds 65 values, more than any ndim tried.
            let got = unsafe { RawTensor::from_ptr(&t) };
            assert_eq!(got.is_ok(), ok, "ndim {ndim}");
            if !ok {
                assert!(got.err().unwrap().to_string().contains(&format!("malformed tensor: ndim {ndim}")));
            }
        }
        // No shape: only a scalar may do without one.
        let scalar = tensor(&mut [], 0);
        // SAFETY: ndim 0 reads no shape.
        assert!(unsafe { RawTensor::from_ptr(&scalar) }.is_ok());
        let shapeless = tensor(&mut [], 2);
        // SAFETY: the null shape is what is checked.
        assert!(unsafe { RawTensor::from_ptr(&shapeless) }.is_err());
        // SAFETY: null is checked.
        let null = unsafe { RawTensor::from_ptr(std::ptr::null()) };
        assert!(null.err().unwrap().to_string().contains("null tensor handle"));
    }

    #[test]
    fn has_shape_compares_every_dimension_and_the_count() {
        let mut dims = [1i64, 1, 28, 28, 1];
        let t = tensor(&mut dims, 4);
        // SAFETY: `dims` holds more than 4 values.
        let t = unsafe { RawTensor::from_ptr(&t) }.unwrap();
        assert!(t.has_shape(&[1, 1, 28, 28]));
        // A prefix, a longer shape, one other dimension: all other shapes.
        assert!(!t.has_shape(&[1, 1, 28]));
        assert!(!t.has_shape(&[1, 1, 28, 28, 1]));
        assert!(!t.has_shape(&[1, 1, 28, 27]));
        assert!(!t.has_shape(&[]));
    }
}
