//! The memory an RPC session has handed out, and the only way a client reaches memory: a tensor
//! it names must lie inside an allocation the session made (`DevAllocData`) or an array it
//! returned, on that memory's device, or it is refused. Views of that memory are what calls
//! receive; copies in and out of it are the unsafe part of the RPC layer (its one unsafe room).

use super::wire::WireTensor;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::{raw, Buffer, NDArray};
use std::collections::HashMap;
use std::sync::Arc;

/// What keeps a region's memory alive.
enum Keeper {
    /// An allocation of the session (`DevAllocData`), freed by `DevFreeData`.
    Alloc(Arc<Buffer>),
    /// An array the session returned, alive until the client frees its handle.
    Array(ObjRef<NDArray>),
}

struct Region {
    len: usize,
    device: DLDevice,
    keeper: Keeper,
}

/// Memory the session handed out, by the handle the client knows it by (its `data` pointer).
#[derive(Default)]
pub struct Regions {
    regions: HashMap<u64, Region>,
}

impl Regions {
    /// Allocates `nbytes` on `device` for the client; returns the handle it names it by.
    pub fn alloc(&mut self, device: DLDevice, nbytes: usize) -> Result<u64> {
        // Every allocation has a handle of its own, an empty one too (empty buffers share one
        // address): one byte backs it, none of which the client may name.
        let buffer = Arc::new(Buffer::zeroed_on(device, nbytes.max(1))?);
        let handle = buffer.data_at(0, nbytes)? as u64;
        self.regions.insert(handle, Region { len: nbytes, device, keeper: Keeper::Alloc(buffer) });
        Ok(handle)
    }

    /// Frees an allocation `alloc` made (nothing else: not an array, not an unknown handle).
    pub fn free(&mut self, device: DLDevice, handle: u64) -> Result<()> {
        match self.regions.get(&handle) {
            Some(Region { keeper: Keeper::Alloc(_), device: d, .. }) if *d == device => {
                self.regions.remove(&handle);
                Ok(())
            }
            _ => Err(Error::value(format!("RPC: DevFreeData of {handle:#x}, which this session did not allocate"))),
        }
    }

    /// Registers an array returned to the client (its data is then memory the client may name).
    pub fn add_array(&mut self, array: &ObjRef<NDArray>) -> u64 {
        let handle = array.data_ptr() as u64;
        let region = Region { len: array.nbytes(), device: array.device(), keeper: Keeper::Array(array.clone()) };
        // Two arrays over the same memory: keep the larger, whose bounds cover the other's.
        match self.regions.get(&handle) {
            Some(r) if r.len >= region.len => {}
            _ => {
                self.regions.insert(handle, region);
            }
        }
        handle
    }

    /// Forgets the array `array` registered, unless the memory is also an allocation or another
    /// array the client still holds.
    pub fn remove_array(&mut self, array: &ObjRef<NDArray>) {
        let handle = array.data_ptr() as u64;
        if matches!(self.regions.get(&handle), Some(Region { keeper: Keeper::Array(a), .. }) if ObjRef::ptr_eq(a, array))
        {
            self.regions.remove(&handle);
        }
    }

    /// An array over the memory `t` names, checked to lie inside memory this session handed out
    /// (on a device, at its start: kernels there take no byte offset).
    pub fn view(&self, t: &WireTensor) -> Result<ObjRef<NDArray>> {
        let region = self.regions.get(&t.data).ok_or_else(|| {
            Error::value(format!("RPC: a tensor at {:#x}, memory this session did not hand out", t.data))
        })?;
        if region.device != t.device {
            return Err(Error::value("RPC: a tensor on another device than its memory"));
        }
        let n = t.nbytes()?;
        let offset = usize::try_from(t.byte_offset).map_err(|_| Error::value("RPC: a huge byte offset"))?;
        if offset.checked_add(n).is_none_or(|end| end > region.len) {
            return Err(Error::value(format!(
                "RPC: {n} bytes at offset {offset} of a tensor over {} bytes",
                region.len
            )));
        }
        match &region.keeper {
            Keeper::Alloc(buffer) => {
                if offset != 0 && !crate::device::is_host(t.device) {
                    return Err(Error::value("RPC: a device tensor with a byte offset"));
                }
                NDArray::view_of(buffer, offset, &t.shape, t.dtype)
            }
            Keeper::Array(array) => match (offset, array.buffer()) {
                (0, _) => NDArray::create_view(array, &t.shape, t.dtype),
                (_, Some(buffer)) if crate::device::is_host(t.device) => {
                    let base = array.data_ptr() as usize - buffer.as_ptr() as usize;
                    NDArray::view_of(buffer, base + offset, &t.shape, t.dtype)
                }
                _ => Err(Error::value("RPC: a byte offset into an array that does not allow one")),
            },
        }
    }

    /// An array in texture memory `t` names, when it does: images are not byte-addressed, so such
    /// an array is copied whole (from offset 0, all its bytes) through its own shape, or not at all.
    fn texture_array(&self, t: &WireTensor, n: usize) -> Result<Option<ObjRef<NDArray>>> {
        let Some(Region { keeper: Keeper::Array(array), len, device }) = self.regions.get(&t.data) else {
            return Ok(None);
        };
        if array.buffer().and_then(|b| b.texture()).is_none() {
            return Ok(None);
        }
        if *device != t.device || t.byte_offset != 0 || n != *len {
            return Err(Error::value(format!(
                "RPC: an array in texture memory is copied whole ({len} bytes from offset 0), not {n} bytes from offset \
                 {}",
                t.byte_offset
            )));
        }
        Ok(Some(array.clone()))
    }

    /// Copies `bytes` into the memory `t` names, from its byte offset.
    pub fn write(&self, t: &WireTensor, bytes: &[u8]) -> Result<()> {
        if let Some(array) = self.texture_array(t, bytes.len())? {
            // SAFETY: an array this session handed out; one request at a time.
            return unsafe { array.copy_from_bytes(bytes) };
        }
        let view = self.checked_span(t, bytes.len())?;
        // SAFETY: the view lies inside memory this session handed out (checked); the session
        // serves one request at a time, and the client reaches that memory only through it.
        unsafe { raw::copy_from_bytes(view.raw(), bytes) }
    }

    /// Copies `out.len()` bytes out of the memory `t` names, from its byte offset.
    pub fn read(&self, t: &WireTensor, out: &mut [u8]) -> Result<()> {
        if let Some(array) = self.texture_array(t, out.len())? {
            return array.copy_to_bytes(out);
        }
        let view = self.checked_span(t, out.len())?;
        raw::copy_to_bytes(view.raw(), out)
    }

    /// Copies between two tensors of this session (`CopyAmongRemote`).
    pub fn copy(&self, from: &WireTensor, to: &WireTensor) -> Result<()> {
        let (a, b) = (self.view(from)?, self.view(to)?);
        // SAFETY: both lie inside memory this session handed out; one request at a time.
        unsafe { raw::copy_tensor(a.raw(), b.raw()) }
    }

    /// A view of `n` bytes from `t`'s byte offset: what a chunked copy addresses (the client
    /// overwrites the offset per chunk; the shape no longer says how much).
    fn checked_span(&self, t: &WireTensor, n: usize) -> Result<ObjRef<NDArray>> {
        let total = t.nbytes()?;
        if (t.byte_offset as u128) + (n as u128) > total as u128 {
            return Err(Error::value("CopyToRemote: overflow in tensor size"));
        }
        let bytes = WireTensor {
            dtype: crate::dlpack::DLDataType { code: crate::dlpack::kDLUInt, bits: 8, lanes: 1 },
            shape: vec![n as i64],
            ..t.clone()
        };
        self.view(&bytes)
    }
}
