//! The NDArray object: TVM's container layout (header, DLTensor at +16, manager_ctx at +64, shape
//! object at +72) followed by what keeps the data alive.

use super::buffer::Buffer;
use super::raw::{self, RawTensor};
use crate::dlpack::{kDLCPU, DLDataType, DLDevice, DLManagedTensor, DLTensor};
use crate::dtype::tensor_bytes;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::Arc;

/// What keeps an array's memory alive.
pub enum Owner {
    /// Memory of this runtime (a pool slot, a weight, a fresh allocation).
    Buffer(Arc<Buffer>),
    /// Memory the caller (or a loaded library) owns for longer than the array.
    External,
    /// A DLPack tensor whose deleter runs when the array goes.
    DLPack(*mut DLManagedTensor),
    /// Bytes of a file mapped read-only (shared with every process mapping it): never written.
    Mapped(Arc<super::buffer::FileMap>),
    /// One count of another runtime's object that keeps the bytes alive (a tvm-ffi host's
    /// tensor), given back by `release` when the array goes.
    Counted { handle: *mut c_void, release: unsafe fn(*mut c_void) },
}

#[repr(C)]
pub struct NDArray {
    /// C hosts hold this tensor's address and may write it, as may [`NDArray::retarget`]: it is
    /// read through the cell, never through a long-lived reference.
    tensor: UnsafeCell<DLTensor>,
    manager_ctx: *mut c_void,
    shape_obj: *mut c_void,
    /// The dimensions the tensor's `shape` points at: at least one element (a 0-d array's is a
    /// zero past its `ndim`), so the pointer always addresses memory.
    shape: Dims,
    owner: Owner,
}

/// Up to this many dimensions live inside the array's object: most arrays cost one allocation.
const INLINE_DIMS: usize = 6;

/// An array's dimensions, in its object or (rarely, for high ranks) a block of their own. In a
/// cell: a C host holds `shape` as `int64_t*` and may write through it.
enum Dims {
    Inline(UnsafeCell<[i64; INLINE_DIMS]>),
    Heap(Box<[UnsafeCell<i64>]>),
}

impl Dims {
    fn of(shape: &[i64]) -> Dims {
        if shape.len() <= INLINE_DIMS {
            let mut dims = [0; INLINE_DIMS];
            dims[..shape.len()].copy_from_slice(shape);
            Dims::Inline(UnsafeCell::new(dims))
        } else {
            Dims::Heap(shape.iter().map(|&d| UnsafeCell::new(d)).collect())
        }
    }

    fn len(&self) -> usize {
        match self {
            Dims::Inline(_) => INLINE_DIMS,
            Dims::Heap(d) => d.len(),
        }
    }

    fn as_ptr(&self) -> *mut i64 {
        match self {
            Dims::Inline(d) => d.get().cast(),
            Dims::Heap(d) => UnsafeCell::raw_get(d.as_ptr()),
        }
    }
}

crate::object::object_type!(NDArray, crate::object::type_index::NDARRAY);

// SAFETY: the raw pointers address memory the `owner` keeps alive (or memory a caller bound to an
// executor, see `retarget`); only the tensor's data pointer changes after construction, by
// `retarget`, under its contract.
unsafe impl Send for NDArray {}
// SAFETY: as above.
unsafe impl Sync for NDArray {}

const _: () = assert!(std::mem::offset_of!(NDArray, manager_ctx) == 48);

/// An NDArray handle (`DLTensor*`, type code 13) is its object's header address plus this: the
/// tensor is the payload's first field, right after the 16-byte header.
pub const NDARRAY_TENSOR_OFFSET: usize = 16;
const _: () = assert!(std::mem::offset_of!(NDArray, tensor) == 0);

impl Drop for NDArray {
    fn drop(&mut self) {
        match self.owner {
            Owner::DLPack(managed) => {
                // SAFETY: we took the managed tensor over in `from_dlpack`; its deleter runs once.
                unsafe {
                    if let Some(deleter) = (*managed).deleter {
                        deleter(managed);
                    }
                }
            }
            // SAFETY: the count `over_counted` took over, given back once.
            Owner::Counted { handle, release } => unsafe { release(handle) },
            _ => {}
        }
    }
}

fn check_cpu(device: DLDevice) -> Result<()> {
    if device.device_type != kDLCPU {
        return Err(Error::value(format!(
            "a DLPack tensor on device type {} cannot be imported: only CPU tensors are",
            device.device_type
        )));
    }
    Ok(())
}

/// Whether another runtime's tensor can be an array's memory as it is: on the CPU, compact, and
/// aligned as ours (`refused` says why not otherwise).
fn shareable(t: RawTensor<'_>, refused: &str) -> Result<()> {
    check_cpu(t.device())?;
    if !t.is_compact() || t.data_ptr() as usize % 64 != 0 {
        return Err(Error::value(refused));
    }
    Ok(())
}

impl NDArray {
    fn build(data: *mut c_void, shape: &[i64], dtype: DLDataType, device: DLDevice, owner: Owner) -> ObjRef<NDArray> {
        Self::build_at(data, 0, shape, dtype, device, owner)
    }

    /// As [`NDArray::build`], the bytes `byte_offset` past `data`: upstream's form of a view at an
    /// offset that is not a multiple of the alignment. Kernels are handed `data` (upstream's read
    /// it and leave the offset alone; copies out of the array add it).
    fn build_at(
        data: *mut c_void,
        byte_offset: u64,
        shape: &[i64],
        dtype: DLDataType,
        device: DLDevice,
        owner: Owner,
    ) -> ObjRef<NDArray> {
        // Kernels and shape functions read `shape[0]` before they check the rank: a 0-d array's
        // shape points at a real (zero) element, as upstream's does, never at a dangling address
        // (inline dimensions always have one).
        let tensor = DLTensor {
            data,
            device,
            ndim: shape.len() as i32,
            dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset,
        };
        let array = ObjRef::new(NDArray {
            tensor: UnsafeCell::new(tensor),
            manager_ctx: std::ptr::null_mut(),
            shape_obj: std::ptr::null_mut(),
            shape: Dims::of(shape),
            owner,
        });
        // SAFETY: the object is in its final place now (objects never move), and nobody else
        // holds it yet: the tensor's shape can point into it.
        unsafe { (*array.tensor.get()).shape = array.shape.as_ptr() };
        array
    }

    /// A new zeroed array on `device`.
    pub fn empty(shape: &[i64], dtype: DLDataType, device: DLDevice) -> Result<ObjRef<NDArray>> {
        dtype.validate_for_alloc()?;
        let buf = Arc::new(Buffer::zeroed_on(device, tensor_bytes(shape, dtype)?)?);
        Ok(Self::build(buf.as_ptr().cast(), shape, dtype, device, Owner::Buffer(buf)))
    }

    /// A new zeroed array on `device` in memory scope `scope` (an image for a texture scope).
    pub fn empty_in(shape: &[i64], dtype: DLDataType, device: DLDevice, scope: &str) -> Result<ObjRef<NDArray>> {
        let Some(texture) = crate::device::texture::Texture::of_scope(scope)? else {
            return NDArray::empty(shape, dtype, device);
        };
        dtype.validate_for_alloc()?;
        tensor_bytes(shape, dtype)?;
        let buf = Arc::new(Buffer::texture_on(device, texture, shape, dtype)?);
        Ok(Self::build(buf.as_ptr().cast(), shape, dtype, device, Owner::Buffer(buf)))
    }

    /// A view of `buf` from `offset` with a shape and dtype; it keeps `buf` alive.
    pub fn view_of(buf: &Arc<Buffer>, offset: usize, shape: &[i64], dtype: DLDataType) -> Result<ObjRef<NDArray>> {
        let need = tensor_bytes(shape, dtype)?;
        if offset.checked_add(need).is_none_or(|end| end > buf.len()) {
            return Err(Error::value(format!(
                "a view of {need} bytes ({dtype} {shape:?}) at offset {offset} does not fit a buffer of {} bytes",
                buf.len()
            )));
        }
        if offset % super::buffer::ALIGNMENT != 0 && crate::device::is_host(buf.device()) {
            // Upstream hands kernels the block's aligned address and the offset as `byte_offset`
            // (a VM's `AllocTensor` may place a tensor anywhere): kernels vectorised on the
            // alignment of `data` fault on an unaligned one. Same bytes as upstream's, whatever
            // its kernels make of the offset (tests/vm_hostile.rs).
            buf.data_at(offset, need)?;
            return Ok(Self::build_at(
                buf.as_ptr().cast(),
                offset as u64,
                shape,
                dtype,
                buf.device(),
                Owner::Buffer(buf.clone()),
            ));
        }
        let data = buf.data_at(offset, need)?;
        Ok(Self::build(data, shape, dtype, buf.device(), Owner::Buffer(buf.clone())))
    }

    /// An array over memory someone else keeps alive for longer (a caller's zero-copy tensor).
    ///
    /// # Safety
    /// `data` must address the array's bytes, valid for reading and writing for as long as the
    /// array (or any view of it) lives.
    pub unsafe fn external(data: *mut c_void, shape: &[i64], dtype: DLDataType, device: DLDevice) -> ObjRef<NDArray> {
        Self::build(data, shape, dtype, device, Owner::External)
    }

    /// An array over a caller's tensor bound with TVM's zero-copy contract (its memory stays valid
    /// while bound): compact tensors only.
    pub fn over_zero_copy(z: super::raw::ZeroCopy<'_>) -> Result<ObjRef<NDArray>> {
        let t = z.tensor();
        if !t.is_compact() {
            return Err(Error::value("a zero-copy tensor must be compact (no strides)"));
        }
        // SAFETY: the zero-copy contract: the caller keeps the bytes valid, and leaves them alone,
        // for as long as the binding (which this array serves) lasts.
        Ok(unsafe { Self::external(t.data_ptr().cast(), t.shape(), t.dtype(), t.device()) })
    }

    /// An array over `bytes` of a mapped file (read-only, shared with every process mapping it):
    /// the bytes must be exactly the array's size and 64-byte aligned, as kernels assume.
    pub fn over_mapped(
        map: &Arc<super::buffer::FileMap>,
        bytes: &[u8],
        shape: &[i64],
        dtype: DLDataType,
    ) -> Result<ObjRef<NDArray>> {
        let need = tensor_bytes(shape, dtype)?;
        if need != bytes.len()
            || !map.contains(bytes.as_ptr())
            || (!bytes.is_empty() && !map.contains(&bytes[bytes.len() - 1]))
        {
            return Err(Error::value("a mapped array must be exactly its bytes, inside the mapping"));
        }
        if bytes.as_ptr() as usize % crate::host_memory::ALIGNMENT != 0 {
            return Err(Error::value("a mapped array's bytes must be 64-byte aligned (align the file)"));
        }
        Ok(Self::build(bytes.as_ptr().cast_mut().cast(), shape, dtype, DLDevice::CPU, Owner::Mapped(map.clone())))
    }

    /// Whether the array's bytes are a mapped file's (read-only: a copy must be made to write).
    pub fn is_mapped(&self) -> bool {
        matches!(self.owner, Owner::Mapped(_))
    }

    /// An array holding a copy of `bytes`, which must be exactly its size.
    pub fn from_bytes(shape: &[i64], dtype: DLDataType, bytes: &[u8]) -> Result<ObjRef<NDArray>> {
        let need = tensor_bytes(shape, dtype)?;
        if need != bytes.len() {
            return Err(Error::value(format!("{dtype} {shape:?} needs {need} bytes, {} given", bytes.len())));
        }
        let buf = Arc::new(Buffer::from_bytes(bytes)?);
        Ok(Self::build(buf.as_ptr().cast(), shape, dtype, DLDevice::CPU, Owner::Buffer(buf)))
    }

    /// Takes over a DLPack tensor without copying.
    ///
    /// # Safety
    /// `managed` must be a valid DLPack tensor that the caller hands over.
    pub unsafe fn from_dlpack(managed: *mut DLManagedTensor) -> Result<ObjRef<NDArray>> {
        // SAFETY: per the contract.
        let t = unsafe { RawTensor::from_ptr(&(*managed).dl_tensor) }?;
        shareable(t, "DLPack import needs a compact tensor aligned to 64 bytes")?;
        Ok(Self::build(t.data_ptr().cast(), t.shape(), t.dtype(), t.device(), Owner::DLPack(managed)))
    }

    /// An array over another runtime's tensor `t`, kept alive by the count of `handle` the
    /// array takes over (given back with `release`, also when this fails). Compact CPU tensors
    /// aligned to 64 bytes only, as for DLPack.
    ///
    /// # Safety
    /// `t` must be a well-formed tensor whose bytes live while `handle`'s count is held, and
    /// `release(handle)` must give back one count.
    pub unsafe fn over_counted(
        t: RawTensor<'_>,
        handle: *mut c_void,
        release: unsafe fn(*mut c_void),
    ) -> Result<ObjRef<NDArray>> {
        if let Err(e) = shareable(t, "a shared tensor must be compact and aligned to 64 bytes") {
            // SAFETY: the count the caller gave, not taken.
            unsafe { release(handle) };
            return Err(e);
        }
        let owner = Owner::Counted { handle, release };
        Ok(Self::build(t.data_ptr().cast(), t.shape(), t.dtype(), t.device(), owner))
    }

    #[inline]
    fn tensor(&self) -> &DLTensor {
        // SAFETY: written only by C hosts through the handle and by `retarget`, neither of which
        // may overlap a use of the array (their contracts).
        unsafe { &*self.tensor.get() }
    }

    pub fn dl_tensor(&self) -> &DLTensor {
        self.tensor()
    }

    /// The handle C callers get (`TVMArrayHandle`, type code 13).
    pub fn tensor_ptr(&self) -> *mut DLTensor {
        self.tensor.get()
    }

    pub fn raw(&self) -> RawTensor<'_> {
        // SAFETY: our own tensor: shape points at `self.shape`, strides null.
        unsafe { RawTensor::from_ptr(self.tensor.get()) }.expect("own tensors are well formed")
    }

    /// Points the array at other memory of its size: an executor's arrays of its entries follow
    /// the entries' zero-copy bindings, as upstream's (which hands out the entries themselves).
    ///
    /// # Safety
    /// `data` must hold the array's bytes for as long as the array points there: inside the
    /// buffer the array keeps alive, or caller memory bound with zero-copy (the caller's promise,
    /// as upstream). Nobody may use the array during the call.
    pub(crate) unsafe fn retarget(&self, data: *mut c_void) {
        // SAFETY: exclusive per the contract; only the data pointer changes.
        unsafe { (*self.tensor.get()).data = data }
    }

    pub fn shape(&self) -> &[i64] {
        let n = (self.tensor().ndim.max(0) as usize).min(self.shape.len());
        // SAFETY: our own dimensions, at least `n` of them; C hosts may not write them while the
        // array is in use.
        unsafe { std::slice::from_raw_parts(self.shape.as_ptr(), n) }
    }

    pub fn dtype(&self) -> DLDataType {
        self.tensor().dtype
    }

    pub fn device(&self) -> DLDevice {
        self.tensor().device
    }

    /// The first byte's address (host), or the device's handle: `data` plus `byte_offset`, which
    /// only host views at unaligned offsets carry.
    #[inline]
    pub fn data_ptr(&self) -> *mut u8 {
        let t = self.tensor();
        t.data.cast::<u8>().wrapping_add(t.byte_offset as usize)
    }

    pub fn nbytes(&self) -> usize {
        tensor_bytes(self.shape(), self.tensor().dtype).expect("checked at construction")
    }

    /// The buffer behind this array, when it is runtime memory.
    pub fn buffer(&self) -> Option<&Arc<Buffer>> {
        match &self.owner {
            Owner::Buffer(b) => Some(b),
            _ => None,
        }
    }

    /// Copies `bytes` into the array.
    ///
    /// # Safety
    /// Nobody else may access the array's memory during the call: an array can alias an
    /// executor's memory (`get_input`, `get_output`), which a run on another thread reads.
    pub unsafe fn copy_from_bytes(&self, bytes: &[u8]) -> Result<()> {
        // SAFETY: runtime or caller memory of this array's size, writable; exclusive per the contract.
        unsafe { raw::copy_from_bytes(self.raw(), bytes) }
    }

    pub fn copy_to_bytes(&self, out: &mut [u8]) -> Result<()> {
        raw::copy_to_bytes(self.raw(), out)
    }

    /// The first `out.len()` bytes, copied to the host.
    pub fn copy_prefix_to_bytes(&self, out: &mut [u8]) -> Result<()> {
        raw::copy_prefix_to_bytes(self.raw(), out)
    }

    /// The bytes, copied to the host.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.nbytes()];
        // A device read only fails when the device is gone; the array then reads as zeros.
        let _ = self.copy_to_bytes(&mut out);
        out
    }

    /// A new array with the same shape, dtype and contents, on the same device.
    pub fn deep_copy(&self) -> Result<ObjRef<NDArray>> {
        NDArray::copy_of(self.raw(), self.device())
    }

    /// A new array on `device` with `src`'s shape, dtype and contents.
    pub fn copy_of(src: RawTensor<'_>, device: DLDevice) -> Result<ObjRef<NDArray>> {
        let copy = NDArray::empty(src.shape(), src.dtype(), device)?;
        // SAFETY: `copy` is new: nobody else reaches its memory.
        unsafe { raw::copy_tensor(src, copy.raw()) }?;
        Ok(copy)
    }

    /// A view with another shape (no larger than this array), keeping this one alive.
    pub fn create_view(this: &ObjRef<NDArray>, shape: &[i64], dtype: DLDataType) -> Result<ObjRef<NDArray>> {
        let need = tensor_bytes(shape, dtype)?;
        if need > this.nbytes() {
            return Err(Error::value(format!(
                "Tries to create a view that has bigger memory than current one: {need} > {} bytes",
                this.nbytes()
            )));
        }
        let t = this.tensor();
        let (data, offset) = (t.data, t.byte_offset);
        match &this.owner {
            Owner::Buffer(b) => Ok(Self::build_at(data, offset, shape, dtype, this.device(), Owner::Buffer(b.clone()))),
            Owner::Mapped(m) => Ok(Self::build_at(data, offset, shape, dtype, this.device(), Owner::Mapped(m.clone()))),
            _ => Err(Error::value("views are only supported on arrays allocated by this runtime")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::kDLFloat;

    const F32: DLDataType = DLDataType { code: kDLFloat, bits: 32, lanes: 1 };

    /// The dimensions as a C host reads them: through the tensor's `shape` pointer.
    fn through_pointer(a: &NDArray) -> Vec<i64> {
        let t = a.dl_tensor();
        // SAFETY: our own tensor: `ndim` dimensions at `shape`.
        unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }.to_vec()
    }

    #[test]
    fn dimensions_inline_and_on_the_heap_read_the_same_both_ways() {
        for shape in [vec![], vec![3], vec![1, 2, 3, 1, 2, 1], vec![1, 2, 1, 1, 2, 1, 1, 2, 1]] {
            let a = NDArray::empty(&shape, F32, DLDevice::CPU).unwrap();
            assert_eq!(a.shape(), &shape[..]);
            assert_eq!(through_pointer(&a), shape);
            // A view keeps its own dimensions, whatever its source's.
            let v = NDArray::create_view(&a, &[shape.iter().product::<i64>()], F32).unwrap();
            assert_eq!(through_pointer(&v), [shape.iter().product::<i64>()]);
            assert_eq!(through_pointer(&a), shape);
        }
    }

    #[test]
    fn a_zero_d_array_points_at_a_real_zero() {
        let a = NDArray::empty(&[], F32, DLDevice::CPU).unwrap();
        // SAFETY: a 0-d array's shape still addresses one element (kernels read it).
        assert_eq!(unsafe { *a.dl_tensor().shape }, 0);
    }
}
