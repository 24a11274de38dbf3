//! The memory of loaded objects: whether one is mapped at an address, and giving back the pages of
//! read-only data once nothing needs them resident.

use std::ffi::c_void;

/// Whether a loaded object is mapped at `addr`. The address is only looked up, never read.
pub fn is_loaded(addr: usize) -> bool {
    // SAFETY: dladdr searches the loader's list of objects for the one containing the address and
    // fills plain data (all zeros is valid).
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(addr as *const c_void, &mut info) != 0
    }
}

/// Gives the pages that lie wholly inside `bytes` back to the page cache, when `bytes` is read-only
/// data of a loaded object (a library's module blob, once parsed: every module copied what it
/// keeps). A file-backed page that was never written is dropped from this process's resident set
/// and read back from the file on a later touch, with the same bytes. Pages of writable or RELRO
/// segments (relocated in memory: dropping them would bring back the file's unrelocated bytes) and
/// memory of no object are left alone. Returns the bytes given back.
pub fn release_read_only(bytes: &[u8]) -> usize {
    const PT_LOAD: u32 = 1;
    const PT_GNU_RELRO: u32 = 0x6474_e552;
    const PF_W: u32 = 2;
    // SAFETY: sysconf reads a constant.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    if end <= start {
        return 0;
    }
    struct Search {
        range: (usize, usize),
        /// Inside a non-writable PT_LOAD segment, and outside every RELRO one.
        safe: bool,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: libc::size_t, data: *mut c_void) -> libc::c_int {
        // SAFETY: the loader's description of one object, valid for the call; `data` is the
        // `Search` below, alive across dl_iterate_phdr.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        let (lo, hi) = search.range;
        let mut inside_read_only = false;
        let mut relro = false;
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: `dlpi_phnum` headers at `dlpi_phdr`.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            let from = info.dlpi_addr as usize + ph.p_vaddr as usize;
            let to = from + ph.p_memsz as usize;
            if ph.p_type == PT_LOAD && from <= lo && hi <= to && ph.p_flags & PF_W == 0 {
                inside_read_only = true;
            }
            if ph.p_type == PT_GNU_RELRO && from < hi && lo < to {
                relro = true;
            }
        }
        if inside_read_only {
            search.safe = !relro;
            return 1; // the object holding the range: stop
        }
        0
    }
    let mut search = Search { range: (start, end), safe: false };
    // SAFETY: `visit` only reads the headers the loader hands it and writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
    if !search.safe {
        return 0;
    }
    // SAFETY: page-aligned whole pages of a read-only, never relocated, file-backed segment of a
    // loaded object (checked above): MADV_DONTNEED only drops their page-table entries.
    let rc = unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) };
    if rc == 0 {
        end - start
    } else {
        0
    }
}

#[cfg(test)]
mod release_tests {
    use super::release_read_only;

    /// Read-only data of this test binary, pages of it.
    static BLOB: [u8; 64 * 1024] = {
        let mut b = [0u8; 64 * 1024];
        let mut i = 0;
        while i < b.len() {
            b[i] = (i % 251) as u8;
            i += 1;
        }
        b
    };

    #[test]
    fn read_only_pages_go_back_and_read_the_same_and_writable_ones_stay() {
        let before: u64 = BLOB.iter().map(|&b| u64::from(b)).sum();
        assert!(release_read_only(&BLOB) >= 48 * 1024);
        assert_eq!(BLOB.iter().map(|&b| u64::from(b)).sum::<u64>(), before);
        // Heap memory (of no object's segment) is left alone.
        let heap = vec![7u8; 64 * 1024];
        assert_eq!(release_read_only(&heap), 0);
        assert!(heap.iter().all(|&b| b == 7));
        // Less than a page: nothing.
        assert_eq!(release_read_only(&BLOB[..100]), 0);
    }
}
