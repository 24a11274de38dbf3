//! Memory on a device other than the host: one allocation, freed when its owner goes, and the
//! regions of it handed to kernels (a kernel takes a tensor's `data` without an offset, so each
//! entry of an arena on a device is a region of its own, made once and freed with the arena).

use super::texture::Texture;
use super::{api_of, DeviceApi, Place};
use crate::dlpack::{DLDataType, DLDevice};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

pub struct DeviceMemory {
    device: DLDevice,
    api: &'static dyn DeviceApi,
    data: *mut c_void,
    len: usize,
    /// Regions made so far: (offset, len) -> handle. Arenas of a pool serve every member's
    /// layout, so a lookup per entry per run must not scan all of them.
    regions: Mutex<HashMap<(usize, usize), usize>>,
    /// An image: its texture scope and the tensor shape and dtype it was made for.
    texture: Option<(Texture, Box<[i64]>, DLDataType)>,
}

// SAFETY: device handles are plain values that any thread may pass to the device API, which is
// thread-safe; the region list is behind a mutex.
unsafe impl Send for DeviceMemory {}
// SAFETY: as above.
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    /// `len` zeroed bytes on `device`.
    pub fn zeroed(device: DLDevice, len: usize) -> Result<DeviceMemory> {
        let api = api_of(device)?;
        let data = api.alloc(device.device_id, len, crate::host_memory::ALIGNMENT)?;
        Ok(DeviceMemory { device, api, data, len, regions: Mutex::new(HashMap::new()), texture: None })
    }

    /// A zeroed image on `device` for a tensor of `shape` and `dtype` in `texture` (its `len`: the
    /// image's bytes, RGBA pixels). Copies in and out of it without a shape move the whole image.
    pub fn texture(device: DLDevice, texture: Texture, shape: &[i64], dtype: DLDataType) -> Result<DeviceMemory> {
        let api = api_of(device)?;
        let e = texture.extent(shape)?;
        let len = e
            .width
            .checked_mul(e.height)
            .and_then(|n| n.checked_mul(4 * dtype.element_bytes()))
            .ok_or_else(|| Error::value(format!("texture shape {shape:?} overflows")))?;
        let data = api.alloc_texture(device.device_id, texture, shape, dtype)?;
        Ok(DeviceMemory {
            device,
            api,
            data,
            len,
            regions: Mutex::new(HashMap::new()),
            texture: Some((texture, shape.into(), dtype)),
        })
    }

    /// The texture scope of an image, `None` for plain memory.
    pub fn texture_scope(&self) -> Option<Texture> {
        self.texture.as_ref().map(|t| t.0)
    }

    /// Memory a device API handed out elsewhere (an RPC server's array), freed through it when
    /// this goes.
    ///
    /// # Safety
    /// `data` must be a live handle of `device`'s API, `len` bytes, owned by nobody else.
    pub unsafe fn adopt(device: DLDevice, data: *mut c_void, len: usize) -> Result<DeviceMemory> {
        let api = api_of(device)?;
        Ok(DeviceMemory { device, api, data, len, regions: Mutex::new(HashMap::new()), texture: None })
    }

    pub fn device(&self) -> DLDevice {
        self.device
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The handle of the whole allocation (`DLTensor.data`).
    pub fn handle(&self) -> *mut c_void {
        self.data
    }

    /// Whether `handle` is this memory or one of its regions.
    pub fn owns(&self, handle: *mut c_void) -> bool {
        handle == self.data
            || self.regions.lock().unwrap_or_else(|e| e.into_inner()).values().any(|&h| h == handle as usize)
    }

    /// A handle kernels take for bytes `offset..offset + len` (the whole handle for offset 0),
    /// made on first request and kept until the memory is freed.
    pub fn region(&self, offset: usize, len: usize) -> Result<*mut c_void> {
        self.check(offset, len)?;
        if offset == 0 {
            return Ok(self.data);
        }
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&h) = regions.get(&(offset, len)) {
            return Ok(h as *mut c_void);
        }
        // SAFETY: our live allocation, which covers the range (checked above).
        let h = unsafe { self.api.region(self.device.device_id, self.data, offset, len) }?;
        regions.insert((offset, len), h as usize);
        Ok(h)
    }

    fn place(&self, offset: usize) -> Place {
        Place { data: self.data, offset, device: self.device, shape: None }
    }

    fn check(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::index(format!("{n} bytes at offset {offset} exceed {} bytes on the device", self.len))),
        }
    }

    /// Copies `bytes` in at `offset` (waits until the device has them).
    pub fn write(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.check(offset, bytes.len())?;
        let from = Place { data: bytes.as_ptr().cast_mut().cast(), offset: 0, device: DLDevice::CPU, shape: None };
        // SAFETY: both ranges checked; the host slice is only read.
        unsafe { self.api.copy(from, self.place(offset), bytes.len()) }
    }

    /// Copies `out.len()` bytes out from `offset` (after everything queued before).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        let to = Place { data: out.as_mut_ptr().cast(), offset: 0, device: DLDevice::CPU, shape: None };
        // SAFETY: both ranges checked; `out` is ours to write.
        unsafe { self.api.copy(self.place(offset), to, out.len()) }
    }

    /// New memory on the same device holding `len` bytes from `offset`.
    pub fn duplicate_range(&self, offset: usize, len: usize) -> Result<DeviceMemory> {
        self.check(offset, len)?;
        let copy = match &self.texture {
            Some((t, shape, dtype)) if offset == 0 && len == self.len => {
                DeviceMemory::texture(self.device, *t, shape, *dtype)?
            }
            Some((t, ..)) => {
                return Err(Error::value(format!("a part of an image ('{}') cannot be copied", t.scope())))
            }
            None => DeviceMemory::zeroed(self.device, len)?,
        };
        // SAFETY: both ranges checked, distinct allocations.
        unsafe { self.api.copy(self.place(offset), copy.place(0), len) }?;
        Ok(copy)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let id = self.device.device_id;
        for (_, h) in self.regions.get_mut().unwrap_or_else(|e| e.into_inner()).drain() {
            // SAFETY: a region of ours, freed once, before the memory it is part of.
            let _ = unsafe { self.api.free(id, h as *mut c_void) };
        }
        // SAFETY: our allocation, freed once.
        let _ = unsafe { self.api.free(id, self.data) };
    }
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceMemory({} bytes on {}({}))",
            self.len,
            super::type_name(self.device.device_type),
            self.device.device_id
        )
    }
}
