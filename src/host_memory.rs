//! Zeroed, aligned blocks of host memory: what tensors' buffers and the kernels' workspaces are
//! made of. Large blocks are mapped and unmapped directly, so freeing a model returns its memory to
//! the system at once instead of leaving it in the heap (glibc raises its mmap threshold after
//! frees and would otherwise keep big blocks in the arena).

use crate::error::{Error, Result};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Every block is at least this aligned (TVM's kAllocAlignment); devices align to it too.
pub const ALIGNMENT: usize = 64;
/// Refuse single allocations above this before asking the system (a corrupt size, not a model).
/// cbindgen:ignore
pub const MAX_ALLOCATION: usize = 1 << 40;
/// Blocks at least this large come straight from `mmap`.
const MMAP_THRESHOLD: usize = 128 * 1024;
/// Blocks at least this large ask for transparent huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// A type of [`ALIGNMENT`], whose dangling pointer is the address an empty block has.
#[repr(C, align(64))]
struct Aligned([u8; ALIGNMENT]);

enum Backing {
    Heap(Layout),
    Mapped,
    Empty,
}

/// An owned, zero-initialised, [`ALIGNMENT`]-aligned block of host memory.
pub struct HostBlock {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: plain memory; concurrent access to its bytes goes through raw pointers, with the same
// rules as any C allocation (its users serialise their own writers).
unsafe impl Send for HostBlock {}
// SAFETY: as above.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// A zeroed block of `len` bytes (an empty one is a dangling, aligned pointer).
    pub fn zeroed(len: usize) -> Result<HostBlock> {
        if len > MAX_ALLOCATION {
            return Err(Error::value(format!("refusing to allocate {len} bytes")));
        }
        if len == 0 {
            // An address of the alignment, never dereferenced (no bytes).
            return Ok(HostBlock { ptr: NonNull::<Aligned>::dangling().cast(), len, backing: Backing::Empty });
        }
        if len >= MMAP_THRESHOLD {
            // SAFETY: an anonymous private mapping; the result is checked before use.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(Error::tvm(format!("out of memory: mmap of {len} bytes failed")));
            }
            if len >= HUGE_PAGE {
                // Large activations and weights are streamed through by every operator: transparent
                // huge pages (where the system offers them on request) spare TLB misses. Advice only:
                // failure changes nothing.
                // SAFETY: advice on the mapping just made.
                unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
            }
            let ptr = NonNull::new(p.cast()).expect("mmap never returns null");
            return Ok(HostBlock { ptr, len, backing: Backing::Mapped });
        }
        let layout = Layout::from_size_align(len, ALIGNMENT).map_err(|e| Error::value(e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| Error::tvm(format!("out of memory allocating {len} bytes")))?;
        Ok(HostBlock { ptr, len, backing: Backing::Heap(layout) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block's address (valid for `len` bytes while the block lives).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            // SAFETY: mapped by `zeroed` with this length, unmapped once.
            Backing::Mapped => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len);
            },
            Backing::Empty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_and_zeroed_at_every_size() {
        for len in [0, 1, 63, 4096, MMAP_THRESHOLD, HUGE_PAGE + 1] {
            let b = HostBlock::zeroed(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGNMENT, 0, "{len}");
            // SAFETY: `len` bytes of the block just made.
            let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), len) };
            assert!(bytes.iter().all(|&x| x == 0), "{len}");
        }
        assert!(HostBlock::zeroed(MAX_ALLOCATION + 1).is_err());
    }
}
