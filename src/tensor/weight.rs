//! Weights: memory that is never written once made. Executors, factories and plans share weights
//! through `Arc<Weight>`; nothing hands out a way to write one, so a weight seen by one executor is
//! the weight every other holder sees. Changing a weight means making a private copy
//! ([`Weight::to_buffer`]) and binding that instead.
//!
//! A weight also owns what keeps its bytes valid: its buffer, the file mapping it is a range of, or
//! the library whose constant data it is.

use super::buffer::{Buffer, FileMap};
use crate::device::texture::Texture;
use crate::dlpack::{DLDataType, DLDevice};
use crate::error::{Error, Result};
use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, Weak};

enum Backing {
    /// Memory of this runtime, frozen (nobody writes it from now on; the only other holders are
    /// readers, see [`Weight::freeze_shared`]).
    Owned(Arc<Buffer>),
    /// A range of a read-only file mapping (writing it would fault).
    Mapped(Arc<FileMap>),
    /// Constant data inside a loaded library, which the keeper keeps loaded.
    Linked(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

/// An image a kernel takes a weight as: its texture scope, the image's `[height, width, channels]`
/// and dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageForm {
    pub texture: Texture,
    pub shape: [i64; 3],
    pub dtype: DLDataType,
}

pub struct Weight {
    /// The data handle: a host address, or a device's handle for a weight made on a device.
    ptr: *const u8,
    len: usize,
    backing: Backing,
    /// Copies of the weight on devices, made the first time an executor on that device binds it
    /// in a form it is not in (a host weight on a device, a weight as an image for a texture slot,
    /// an image as plain memory), and shared by every executor that does: one per device and form.
    mirrors: Mutex<Vec<(Option<ImageForm>, Arc<Buffer>)>>,
}

// SAFETY: the bytes are never written after construction, and the backing is Send + Sync.
unsafe impl Send for Weight {}
// SAFETY: as above.
unsafe impl Sync for Weight {}

impl Weight {
    /// Freezes `buffer`: from now on nobody writes it.
    pub fn freeze(buffer: Buffer) -> Weight {
        Weight::freeze_shared(Arc::new(buffer))
    }

    /// Freezes a buffer others still hold, who must only ever read it from now on (an executor's
    /// tensors bound to it, a copy of its state kept to put back if a call fails): the caller has
    /// checked there is no writer left.
    pub(crate) fn freeze_shared(buffer: Arc<Buffer>) -> Weight {
        Weight { ptr: buffer.as_ptr(), len: buffer.len(), backing: Backing::Owned(buffer), mirrors: Mutex::default() }
    }

    /// A weight holding a copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Result<Weight> {
        Buffer::from_bytes(bytes).map(Weight::freeze)
    }

    /// A weight holding a copy of `bytes`, zero-padded to at least `len` bytes.
    pub fn padded(bytes: &[u8], len: usize) -> Result<Weight> {
        Weight::padded_on(DLDevice::CPU, bytes, len)
    }

    /// A weight on `device` holding a copy of `bytes`, zero-padded to at least `len` bytes.
    pub fn padded_on(device: DLDevice, bytes: &[u8], len: usize) -> Result<Weight> {
        let mut buffer = Buffer::zeroed_on(device, len.max(bytes.len()))?;
        buffer.write(0, bytes)?;
        Ok(Weight::freeze(buffer))
    }

    /// The device the weight is on.
    pub fn device(&self) -> DLDevice {
        match &self.backing {
            Backing::Owned(b) => b.device(),
            _ => DLDevice::CPU,
        }
    }

    /// The texture scope of a weight that is an image on a device (`None` for plain memory).
    pub fn texture(&self) -> Option<Texture> {
        match &self.backing {
            Backing::Owned(b) => b.texture(),
            _ => None,
        }
    }

    /// Whether kernels on `device` can use the weight: a host weight anywhere (copied to a device
    /// once), a device weight on its own device or one sharing its memory (OpenCL devices of one
    /// context).
    pub fn check_usable_on(&self, device: DLDevice) -> Result<()> {
        let own = self.device();
        if crate::device::is_host(own) || crate::device::same_memory(own, device) {
            return Ok(());
        }
        Err(Error::value(format!(
            "a weight on {} cannot be bound by an executor on {}: kernels there cannot read that memory",
            crate::device::describe(own),
            crate::device::describe(device)
        )))
    }

    /// What a kernel on `device` takes as the weight's data: the weight itself where its memory
    /// is usable, a copy of a host weight on another device (made once and kept with the weight).
    pub fn data_on(&self, device: DLDevice) -> Result<*mut c_void> {
        self.data_in(device, None)
    }

    /// As [`Weight::data_on`], for a kernel taking the weight as an image of `form` (a texture
    /// slot): the weight itself if it is such an image, else an image holding its bytes, made
    /// once and kept with the weight (every executor binding it shares that one).
    pub fn data_in(&self, device: DLDevice, form: Option<ImageForm>) -> Result<*mut c_void> {
        let (own, own_texture) = (self.device(), self.texture());
        let usable =
            (crate::device::is_host(device) && crate::device::is_host(own)) || crate::device::same_memory(own, device);
        if usable && own_texture == form.map(|f| f.texture) {
            return Ok(self.ptr.cast_mut().cast());
        }
        self.check_usable_on(device)?;
        let mut mirrors = self.mirrors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = mirrors.iter().find(|(f, m)| m.device() == device && *f == form) {
            return Ok(m.as_ptr().cast());
        }
        let bytes = self.bytes()?;
        let m = Arc::new(match form {
            None => Buffer::from_bytes_on(device, &bytes)?,
            Some(f) => {
                let mut image = Buffer::texture_on(device, f.texture, &f.shape, f.dtype)?;
                image.write(0, &bytes)?;
                image
            }
        });
        mirrors.push((form, m.clone()));
        Ok(m.as_ptr().cast())
    }

    /// Bytes held on devices for this weight besides the weight itself (its mirrors).
    pub fn mirror_bytes(&self) -> usize {
        self.mirrors.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, m)| m.len()).sum()
    }

    /// A weight that is the range `bytes` of `map` (no copy).
    pub fn mapped(map: &Arc<FileMap>, bytes: &[u8]) -> Result<Weight> {
        if bytes.is_empty() || !map.contains(bytes.as_ptr()) || !map.contains(&bytes[bytes.len() - 1]) {
            return Err(Error::internal("a mapped weight must be a non-empty range of its mapping"));
        }
        Ok(Weight {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            backing: Backing::Mapped(map.clone()),
            mirrors: Mutex::default(),
        })
    }

    /// Constant data a loaded library links in (`_lookup_linked_param`); `keeper` (the library
    /// module) is held as long as the weight, so the data stays mapped.
    ///
    /// # Safety
    /// `ptr` must address `len` bytes that stay readable and unchanged while `keeper` lives.
    pub unsafe fn linked(ptr: *const u8, len: usize, keeper: Box<dyn Any + Send + Sync>) -> Result<Weight> {
        if ptr.is_null() {
            return Err(Error::value("linked parameter at a null address"));
        }
        Ok(Weight { ptr, len, backing: Backing::Linked(keeper), mirrors: Mutex::default() })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data handle, for kernels to read (a host address for a host weight). Writing through
    /// it breaks every holder's assumption; the executor only hands it to kernels as an operator
    /// input.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The bytes: borrowed on the host, read back from a device.
    pub fn bytes(&self) -> Result<Cow<'_, [u8]>> {
        if let Backing::Owned(b) = &self.backing {
            if !crate::device::is_host(b.device()) {
                let mut out = vec![0u8; self.len];
                b.read(0, &mut out)?;
                return Ok(Cow::Owned(out));
            }
        }
        Ok(Cow::Borrowed(self.host_bytes()))
    }

    fn host_bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` readable host bytes that the backing keeps alive and nobody writes
        // (callers check the weight is on the host).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether the bytes are a range of a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mapped(_))
    }

    /// The file mapping the bytes are a range of, if any.
    pub fn file_map(&self) -> Option<&Arc<FileMap>> {
        match &self.backing {
            Backing::Mapped(m) => Some(m),
            _ => None,
        }
    }

    /// A private, writable copy of `len` bytes from `offset`, on `device`.
    pub fn to_buffer(&self, device: DLDevice, offset: usize, len: usize) -> Result<Buffer> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::index(format!("{len} bytes at offset {offset} exceed a weight of {} bytes", self.len)));
        }
        match &self.backing {
            Backing::Owned(b) if b.device() == device && !crate::device::is_host(device) => {
                b.duplicate_range(offset, len)
            }
            _ => Buffer::from_bytes_on(device, &self.bytes()?[offset..offset + len]),
        }
    }
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weight({} bytes at {:p})", self.len, self.ptr)
    }
}

/// Derived weights by content, so executors whose weight-only operators compute the same bytes
/// (the batch-1 and batch-8 builds of a model sharing weights, say) hold them once. Entries are
/// weak: a weight no executor holds any more is freed, and its entry swept.
static DERIVED: Mutex<Option<ByLength>> = Mutex::new(None);

/// Length -> weights of that length.
type ByLength = HashMap<usize, Vec<Weak<Weight>>>;

/// Whether two ranges hold the same bytes, read a chunk at a time (device memory needs no copy of
/// either side, and different contents almost always differ in the first chunk).
fn chunks_equal(
    len: usize,
    mut a: impl FnMut(usize, &mut [u8]) -> Result<()>,
    mut b: impl FnMut(usize, &mut [u8]) -> Result<()>,
) -> bool {
    const CHUNK: usize = 64 * 1024;
    let (mut p, mut q) = (vec![0u8; CHUNK.min(len)], vec![0u8; CHUNK.min(len)]);
    (0..len).step_by(CHUNK).all(|at| {
        let n = CHUNK.min(len - at);
        a(at, &mut p[..n]).is_ok() && b(at, &mut q[..n]).is_ok() && p[..n] == q[..n]
    })
}

/// Reads bytes of a weight from `at`, wherever it is.
fn read_weight(w: &Weight, at: usize, out: &mut [u8]) -> Result<()> {
    match &w.backing {
        Backing::Owned(b) => b.read(at, out),
        _ => {
            out.copy_from_slice(&w.host_bytes()[at..at + out.len()]);
            Ok(())
        }
    }
}

fn same_content(a: &Weight, b: &Weight) -> bool {
    if a.device() != b.device() || a.len != b.len || a.texture() != b.texture() {
        return false;
    }
    if a.texture().is_some() {
        // An image is read whole (its pixels have no byte offsets); the same length and scope
        // with the same bytes is the same image.
        return matches!((a.bytes(), b.bytes()), (Ok(x), Ok(y)) if x == y);
    }
    if crate::device::is_host(a.device()) {
        return a.host_bytes() == b.host_bytes();
    }
    chunks_equal(a.len, |at, out| read_weight(a, at, out), |at, out| read_weight(b, at, out))
}

/// The weight already holding exactly these bytes, or `weight` itself, now findable by others.
///
/// Candidates are the live weights of the same length, compared byte for byte: different
/// contents almost always differ within their first bytes, so a comparison costs little unless
/// the bytes are equal, where comparing in full is the verification sharing needs anyway. (A
/// content hash would read every byte of every weight, shared or not.)
pub fn intern(weight: Weight) -> Arc<Weight> {
    let mut guard = DERIVED.lock().unwrap_or_else(|e| e.into_inner());
    let table = guard.get_or_insert_with(HashMap::new);
    find(table, weight.len(), |c| same_content(c, &weight)).unwrap_or_else(|| insert(table, Arc::new(weight)))
}

fn find(table: &ByLength, len: usize, same: impl Fn(&Weight) -> bool) -> Option<Arc<Weight>> {
    table.get(&len).and_then(|list| list.iter().filter_map(Weak::upgrade).find(|w| same(w)))
}

fn insert(table: &mut ByLength, weight: Arc<Weight>) -> Arc<Weight> {
    // Sweep entries of weights gone each time the table reaches a power of two: it stays within
    // about twice the lengths alive.
    if table.len() > 64 && table.len().is_power_of_two() {
        table.retain(|_, list| {
            list.retain(|w| w.strong_count() > 0);
            !list.is_empty()
        });
    }
    let list = table.entry(weight.len()).or_default();
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(&weight));
    weight
}

/// Has forks take the table of derived weights.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&DERIVED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_are_held_once() {
        let a = intern(Weight::copy_of(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap());
        let b = intern(Weight::copy_of(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap());
        let c = intern(Weight::copy_of(&[1, 2, 3, 4, 5, 6, 7, 8, 0]).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none(), "the table must not keep weights alive");
    }

    /// Live weights stay findable through every sweep, even after a weight of the same length but
    /// other bytes came and went; the table stays within about twice what is alive.
    #[test]
    fn the_table_keeps_live_weights_findable_and_sweeps_the_rest() {
        let content = |i: usize, v: u8| vec![v; 7000 + i];
        let live: Vec<Arc<Weight>> = (0..100).map(|i| intern(Weight::copy_of(&content(i, 9)).unwrap())).collect();
        for i in 0..400 {
            drop(intern(Weight::copy_of(&vec![9u8; 9000 + i]).unwrap()));
        }
        for (i, w) in live.iter().enumerate() {
            drop(intern(Weight::copy_of(&content(i, 8)).unwrap()));
            let again = intern(Weight::copy_of(&content(i, 9)).unwrap());
            assert!(Arc::ptr_eq(w, &again), "live weight {i} is found again");
        }
        let lengths = DERIVED.lock().unwrap().as_ref().map_or(0, |t| t.len());
        assert!(lengths <= 2 * 128, "{lengths} lengths kept for about 100 alive");
    }

    /// Weights of one length come and go (other bytes each time): the length's list keeps only
    /// the live ones, so it does not grow with every weight ever derived.
    #[test]
    fn a_lengths_list_forgets_weights_that_are_gone() {
        const LEN: usize = 6007;
        for v in 0..200u8 {
            drop(intern(Weight::copy_of(&vec![v; LEN]).unwrap()));
        }
        let kept = DERIVED.lock().unwrap().as_ref().and_then(|t| t.get(&LEN).map(Vec::len)).unwrap_or(0);
        assert!(kept <= 1, "{kept} entries kept for weights that are all gone");
    }

    #[test]
    fn mapped_weights_are_ranges_of_their_mapping() {
        let path = std::env::temp_dir().join(format!("tvmrt-weight-{}", std::process::id()));
        std::fs::write(&path, [5u8; 256]).unwrap();
        // SAFETY: this test's own file, unchanged while mapped.
        let map = unsafe { FileMap::open(path.to_str().unwrap()) }.unwrap();
        let w = Weight::mapped(&map, &map.bytes()[64..128]).unwrap();
        assert!(w.is_mapped() && w.len() == 64 && !w.is_empty());
        assert_eq!(w.as_ptr(), map.bytes()[64..].as_ptr());
        assert!(Weight::mapped(&map, &map.bytes()[..0]).is_err(), "empty");
        let elsewhere = [5u8; 64];
        assert!(Weight::mapped(&map, &elsewhere).is_err(), "not in the mapping");
        std::fs::remove_file(&path).unwrap();
        let empty = Weight::copy_of(&[]).unwrap();
        assert!(empty.is_empty());
        assert!(format!("{:?}", Weight::copy_of(&[1, 2, 3]).unwrap()).starts_with("Weight(3 bytes at 0x"));
    }
}
