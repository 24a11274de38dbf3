//! Aligned memory: host memory (a [`HostBlock`]), or memory on a device (see
//! [`Buffer::zeroed_on`]); and files mapped read-only.

use crate::device::texture::Texture;
use crate::device::{self, DeviceMemory, Place};
use crate::dlpack::{DLDataType, DLDevice};
use crate::error::{Error, Result};
pub use crate::host_memory::ALIGNMENT;
use crate::host_memory::{check_size, HostBlock};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

enum Backing {
    /// Host memory, `ptr` its address: held for the memory, freed as the buffer drops.
    Host { _memory: HostBlock },
    /// Memory on a device: `ptr` is its handle, never dereferenced here.
    Device(DeviceMemory),
}

/// A file mapped read-only and private: its pages are shared with every process mapping the same
/// file through the page cache, and nothing written in memory can reach the file.
pub struct FileMap {
    ptr: NonNull<u8>,
    len: usize,
    path: String,
    /// The file, held open to tell whether it changed since it was mapped.
    file: std::fs::File,
    /// What it was when mapped: length and modification time (ns).
    stamp: (u64, i128),
}

/// What changes when a file is written or truncated: its length and modification time (not its
/// change time, which unlinking it, as renaming another file over it does, changes too).
fn file_stamp(meta: &std::fs::Metadata) -> (u64, i128) {
    use std::os::unix::fs::MetadataExt;
    (meta.len(), i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()))
}

// SAFETY: read-only memory.
unsafe impl Send for FileMap {}
// SAFETY: read-only memory.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps `path` read-only.
    ///
    /// # Safety
    /// The file must not be truncated or written while the map (or a weight made from it) lives:
    /// a truncated file makes reads of its mapped pages raise SIGBUS, and a written one changes
    /// bytes that are handed out as immutable. This is the contract of every file mapping (and
    /// what `load_params_from_file` documents for its callers).
    pub unsafe fn open(path: &str) -> Result<Arc<FileMap>> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let (stamp, len) = (file_stamp(&meta), meta.len() as usize);
        if len == 0 {
            return Err(Error::value(format!("{path} is empty")));
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a read-only private mapping of a file we opened; checked before use.
        let p =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(Error::value(format!("cannot map {path}: {}", std::io::Error::last_os_error())));
        }
        let ptr = NonNull::new(p.cast()).expect("mmap never returns null");
        Ok(Arc::new(FileMap { ptr, len, path: path.into(), file, stamp }))
    }

    /// Refuses a file that was written or truncated since it was mapped: its bytes, handed out as
    /// weights that never change, may have changed (and a truncated file's pages fault). A file
    /// replaced by renaming another over it is not this one: its mapping stays valid. One `fstat`.
    pub fn check_unchanged(&self) -> Result<()> {
        let now = self.file.metadata().map(|m| file_stamp(&m)).map_err(|e| Error::io(&self.path, e))?;
        if now == self.stamp {
            return Ok(());
        }
        Err(Error::value(format!(
            "the params file {} was written since it was mapped ({} bytes then, {} now): weights mapped from it \
             cannot be trusted; load it again (replace a mapped file by renaming a new one over it, never by \
             writing it in place)",
            self.path, self.stamp.0, now.0
        )))
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` mapped, readable bytes that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Gives the file's pages back to the page cache: this process's page tables forget them, and
    /// only the pages read afterwards come back (on first touch, from the cache). After a load
    /// has read every byte (a prepared file's weights are checked against their digest), the
    /// weights no kernel reads (those only the folded operators derived from) then cost this
    /// process no resident memory. The bytes never change: the mapping is private and read-only,
    /// so it holds no page of its own to lose.
    pub fn release_resident(&self) {
        // SAFETY: the mapping made in `open`, of `len` bytes; MADV_DONTNEED on a read-only private
        // file mapping only drops page-table entries (there are no private pages to discard).
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_DONTNEED) };
    }

    /// Whether `p` points into the mapping.
    pub fn contains(&self, p: *const u8) -> bool {
        let (lo, hi) = (self.ptr.as_ptr() as usize, self.ptr.as_ptr() as usize + self.len);
        (lo..hi).contains(&(p as usize))
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: mapped in `open` with this length, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Takes a buffer's memory back when its last user drops it (a pool reusing its blocks).
pub trait Recycle: Send + Sync {
    /// Called with a buffer over the same memory, without the hook.
    fn recycle(&self, buffer: Buffer);
}

/// Where a buffer's memory goes when it drops: held weakly, so a buffer outliving its pool frees
/// its memory itself. A clone of a reference, not an allocation per buffer.
pub type ReleaseHook = std::sync::Weak<dyn Recycle>;

/// An owned, zero-initialised block of memory: 64-byte aligned on the host, or on a device.
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Dropped with the buffer, or handed on whole to `release`.
    backing: ManuallyDrop<Backing>,
    release: Option<ReleaseHook>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: `backing` is taken or dropped exactly once, here, and never used after.
        let backing = unsafe { ManuallyDrop::take(&mut self.backing) };
        // Without a hook, or with its pool gone, the memory is freed with `backing`.
        if let Some(pool) = self.release.take().and_then(|hook| hook.upgrade()) {
            pool.recycle(Buffer::new(self.ptr, self.len, backing));
        }
    }
}

// SAFETY: a buffer is plain memory; concurrent access to its bytes goes through raw pointers, with
// the same rules as any C allocation (the executor serialises its own writers).
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    fn new(ptr: NonNull<u8>, len: usize, backing: Backing) -> Buffer {
        Buffer { ptr, len, backing: ManuallyDrop::new(backing), release: None }
    }

    /// This buffer, handing its memory to `hook` instead of freeing it when it drops.
    pub fn with_release_hook(mut self, hook: ReleaseHook) -> Buffer {
        self.release = Some(hook);
        self
    }

    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Result<Buffer> {
        let block = HostBlock::zeroed(len)?;
        let ptr = NonNull::new(block.as_ptr()).expect("host blocks are never null");
        Ok(Buffer::new(ptr, len, Backing::Host { _memory: block }))
    }

    /// A zeroed buffer of `len` bytes on `device` (host memory for the CPU).
    pub fn zeroed_on(device: DLDevice, len: usize) -> Result<Buffer> {
        if device::is_host(device) {
            return Buffer::zeroed(len);
        }
        check_size(len)?;
        let mem = DeviceMemory::zeroed(device, len)?;
        let ptr = NonNull::new(mem.handle().cast())
            .ok_or_else(|| Error::internal("a device allocation with a null handle"))?;
        Ok(Buffer::new(ptr, len, Backing::Device(mem)))
    }

    /// A zeroed image on `device` for a tensor of `shape` and `dtype` in a texture scope.
    pub fn texture_on(device: DLDevice, texture: Texture, shape: &[i64], dtype: DLDataType) -> Result<Buffer> {
        let mem = DeviceMemory::texture(device, texture, shape, dtype)?;
        Buffer::on_device(mem)
    }

    /// The texture scope of an image, `None` for plain memory.
    pub fn texture(&self) -> Option<Texture> {
        match &*self.backing {
            Backing::Device(m) => m.texture_scope(),
            _ => None,
        }
    }

    /// A buffer over device memory made elsewhere (an RPC server's array).
    pub fn on_device(mem: DeviceMemory) -> Result<Buffer> {
        let ptr = NonNull::new(mem.handle().cast())
            .ok_or_else(|| Error::internal("a device allocation with a null handle"))?;
        Ok(Buffer::new(ptr, mem.len(), Backing::Device(mem)))
    }

    /// A buffer on `device` holding a copy of `bytes`.
    pub fn from_bytes_on(device: DLDevice, bytes: &[u8]) -> Result<Buffer> {
        let mut buf = Buffer::zeroed_on(device, bytes.len())?;
        buf.write(0, bytes)?;
        Ok(buf)
    }

    /// The device the memory is on.
    pub fn device(&self) -> DLDevice {
        match &*self.backing {
            Backing::Device(m) => m.device(),
            _ => DLDevice::CPU,
        }
    }

    /// Where byte `offset` is, for copies.
    #[inline]
    pub fn place(&self, offset: usize) -> Place {
        Place { data: self.ptr.as_ptr().cast(), offset, device: self.device(), shape: None }
    }

    /// What a tensor of bytes `offset..offset + len` holds as `data` (with no byte offset, as
    /// kernels take it): an address on the host, a region handle on a device.
    pub fn data_at(&self, offset: usize, len: usize) -> Result<*mut c_void> {
        self.check(offset, len)?;
        match &*self.backing {
            Backing::Device(m) => m.region(offset, len),
            _ => Ok(self.ptr.as_ptr().wrapping_add(offset).cast()),
        }
    }

    /// Whether `data` (a tensor's data, as from [`Buffer::data_at`]) is inside this buffer.
    pub fn holds(&self, data: *const c_void, len: usize) -> bool {
        match &*self.backing {
            Backing::Device(m) => m.owns(data.cast_mut()),
            _ => {
                let start = self.ptr.as_ptr() as usize;
                (start..=start + self.len.saturating_sub(len)).contains(&(data as usize))
            }
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Buffer> {
        let mut buf = Buffer::zeroed(bytes.len())?;
        buf.write(0, bytes)?;
        Ok(buf)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data handle: the address on the host, the device's handle on a device (not to be
    /// dereferenced or offset; see [`Buffer::data_at`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `bytes` in at `offset`. Takes `&mut self`: a buffer others can see (behind an `Arc`,
    /// in a tensor a kernel runs on) is only written through raw pointers, by code that says why
    /// nobody else touches the bytes at that moment.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.check(offset, bytes.len())?;
        if let Backing::Device(m) = &*self.backing {
            return m.write(offset, bytes);
        }
        // SAFETY: bounds checked above; `bytes` cannot overlap a block we own exclusively.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(offset), bytes.len()) };
        Ok(())
    }

    /// Copies `out.len()` bytes out from `offset`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        if let Backing::Device(m) = &*self.backing {
            return m.read(offset, out);
        }
        // SAFETY: bounds checked above.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// A new buffer holding a copy of `len` bytes from `offset`.
    pub fn duplicate_range(&self, offset: usize, len: usize) -> Result<Buffer> {
        self.check(offset, len)?;
        if let Backing::Device(m) = &*self.backing {
            let copy = m.duplicate_range(offset, len)?;
            let ptr = NonNull::new(copy.handle().cast()).ok_or_else(|| Error::internal("null device handle"))?;
            return Ok(Buffer::new(ptr, len, Backing::Device(copy)));
        }
        let copy = Buffer::zeroed(len)?;
        // SAFETY: bounds checked above; the blocks are distinct.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), copy.as_ptr(), len) };
        Ok(copy)
    }

    fn check(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::index(format!("{n} bytes at offset {offset} exceed a buffer of {} bytes", self.len))),
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes at {:p})", self.len, self.ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [1, 100, 4096, 128 * 1024 + 3] {
            let b = Buffer::zeroed(len).unwrap();
            assert_eq!(b.as_ptr() as usize % ALIGNMENT, 0);
            let mut out = vec![1u8; len];
            b.read(0, &mut out).unwrap();
            assert!(out.iter().all(|&x| x == 0));
        }
        assert!(Buffer::zeroed(usize::MAX).is_err());
        let mut b = Buffer::from_bytes(&[1, 2, 3]).unwrap();
        assert!(b.write(2, &[0, 0]).is_err());
    }
}
