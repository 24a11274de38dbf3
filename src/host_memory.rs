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

/// Refuses a single allocation of `len` bytes above [`MAX_ALLOCATION`], on the host or a device.
pub fn check_size(len: usize) -> Result<()> {
    if len > MAX_ALLOCATION {
        return Err(Error::value(format!("refusing to allocate {len} bytes")));
    }
    Ok(())
}

/// Gives the free pages of the C heap back to the system (glibc keeps freed blocks, even large
/// ones once its mmap threshold has risen, as the process's own until asked).
pub fn return_free_heap() {
    // SAFETY: malloc_trim only returns free memory of the allocator to the system.
    unsafe { libc::malloc_trim(0) };
}

/// A type of [`ALIGNMENT`] bytes and alignment: what an empty block holds.
#[repr(C, align(64))]
struct Aligned([u8; ALIGNMENT]);

enum Backing {
    Heap(Layout),
    Mapped,
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
    /// A zeroed block of `len` bytes. An empty one still addresses [`ALIGNMENT`] zeroed bytes of
    /// its own: TVM's kernels and shape functions may read an input before they check its size
    /// (upstream's allocator returns real memory for zero bytes too), so no tensor's data is ever
    /// a dangling address.
    pub fn zeroed(len: usize) -> Result<HostBlock> {
        check_size(len)?;
        if len == 0 {
            let layout = Layout::new::<Aligned>();
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(p).ok_or_else(|| Error::tvm("out of memory allocating an empty block"))?;
            return Ok(HostBlock { ptr, len, backing: Backing::Heap(layout) });
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
        // Whole ALIGNMENT units: kernels load a tensor's last elements a vector at a time (ResNet's
        // first batch norm reads its 3-channel, 12-byte weights as 16), so the tail of the last
        // unit is ours and zeroed, never the allocator's (as a mapping's last page is).
        let layout = Layout::from_size_align(len.div_ceil(ALIGNMENT) * ALIGNMENT, ALIGNMENT)
            .map_err(|e| Error::value(e.to_string()))?;
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_and_zeroed_at_every_size() {
        for len in [0, 1, 12, 63, 65, 4096, MMAP_THRESHOLD, HUGE_PAGE + 1] {
            let b = HostBlock::zeroed(len).unwrap();
            assert_eq!((b.len(), b.is_empty()), (len, len == 0));
            assert_eq!(b.as_ptr() as usize % ALIGNMENT, 0, "{len}");
            // SAFETY: the block just made, read up to its last whole ALIGNMENT unit (an empty
            // block addresses one): every byte a vector load of its tail can touch is its own.
            let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), len.max(1).div_ceil(ALIGNMENT) * ALIGNMENT) };
            assert!(bytes.iter().all(|&x| x == 0), "{len}");
        }
    }

    #[test]
    fn sizes_beyond_the_limit_are_refused_before_asking_the_system() {
        let refused = |len: usize| match HostBlock::zeroed(len) {
            Err(e) => e.to_string().contains("refusing to allocate"),
            Ok(_) => false,
        };
        assert!(refused(MAX_ALLOCATION + 1));
        assert!(refused(usize::MAX));
        // The limit itself goes to the system (which may well say no, in its own words).
        assert!(!refused(MAX_ALLOCATION));
    }

    #[test]
    fn large_blocks_are_mapped_and_small_ones_come_from_the_heap() {
        let backing = |len: usize| match HostBlock::zeroed(len).unwrap().backing {
            Backing::Heap(_) => "heap",
            Backing::Mapped => "mapped",
        };
        for len in [0, 1, 4096, MMAP_THRESHOLD - 1] {
            assert_eq!(backing(len), "heap", "{len}");
        }
        for len in [MMAP_THRESHOLD, HUGE_PAGE + 1] {
            assert_eq!(backing(len), "mapped", "{len}");
        }
    }

    /// The flags /proc/self/smaps gives the mapping holding `addr`.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
                return flags.trim().to_string();
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    #[test]
    fn huge_blocks_ask_for_huge_pages_and_smaller_mapped_ones_do_not() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if !thp.contains("[madvise]") && !thp.contains("[always]") {
            eprintln!("no transparent huge pages here ({thp:?}): the advice is not visible");
            return;
        }
        let asked = |len: usize| {
            let b = HostBlock::zeroed(len).unwrap();
            vm_flags(b.as_ptr() as usize).split_whitespace().any(|f| f == "hg")
        };
        assert!(asked(HUGE_PAGE));
        assert!(!asked(HUGE_PAGE - 1));
        assert!(!asked(MMAP_THRESHOLD));
    }

    /// Freeing a large block gives its pages back to the system at once (the reason blocks are
    /// mapped). Checked in a child process, which has no other thread that could map the same
    /// addresses between the free and the look.
    #[test]
    fn a_freed_large_block_is_unmapped() {
        const LEN: usize = 4 * HUGE_PAGE;
        // SAFETY: the child calls only mmap, madvise, munmap and mincore (through HostBlock and
        // below) and leaves with _exit, nothing that takes a lock another thread may hold.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let b = HostBlock::zeroed(LEN).unwrap();
            let addr = b.as_ptr();
            let before = {
                let mut pages = [0u8; LEN / 4096];
                // SAFETY: `pages` holds a byte per 4 KiB page of the range (at least one per page).
                unsafe { libc::mincore(addr.cast(), LEN, pages.as_mut_ptr()) }
            };
            drop(b);
            let mut pages = [0u8; LEN / 4096];
            // SAFETY: as above; ENOMEM when any of the range is not mapped.
            let after = unsafe { libc::mincore(addr.cast(), LEN, pages.as_mut_ptr()) };
            let code = if before == 0 && after == -1 { 0 } else { 1 };
            // SAFETY: leaving the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the block was still mapped after its drop");
    }
}
