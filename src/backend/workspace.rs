//! `TVMBackendAllocWorkspace`: per-thread pools of scratch buffers for kernels. Requests are
//! rounded up to pages and reused best-fit, so a steady model allocates nothing per run.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::host_memory::HostBlock;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

const PAGE: usize = 4096;

static POOLED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes held by all threads' workspace pools.
pub fn pooled_bytes() -> usize {
    POOLED_BYTES.load(Ordering::Relaxed)
}

#[derive(Default)]
struct Pool {
    free: Vec<HostBlock>,
    in_use: Vec<HostBlock>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        let n: usize = self.free.iter().chain(&self.in_use).map(HostBlock::len).sum();
        POOLED_BYTES.fetch_sub(n, Ordering::Relaxed);
    }
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

pub fn alloc(nbytes: u64) -> Result<*mut u8> {
    let size =
        usize::try_from(nbytes).map_err(|_| Error::value(format!("workspace of {nbytes} bytes is too large")))?;
    let size = size.max(1).div_ceil(PAGE).checked_mul(PAGE).ok_or_else(|| Error::value("workspace size overflows"))?;
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let best =
            p.free.iter().enumerate().filter(|(_, b)| b.len() >= size).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        let buf = match best {
            Some(i) => p.free.swap_remove(i),
            None => {
                // Nothing fits: give back the largest idle buffer before taking a new one.
                if let Some(i) = p.free.iter().enumerate().max_by_key(|(_, b)| b.len()).map(|(i, _)| i) {
                    let dropped = p.free.swap_remove(i);
                    POOLED_BYTES.fetch_sub(dropped.len(), Ordering::Relaxed);
                }
                let b = HostBlock::zeroed(size)?;
                POOLED_BYTES.fetch_add(b.len(), Ordering::Relaxed);
                b
            }
        };
        let ptr = buf.as_ptr();
        p.in_use.push(buf);
        Ok(ptr)
    })
}

/// Drops the calling thread's idle buffers (those in use stay).
pub fn release_idle() {
    let _ = POOL.try_with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            let n: usize = p.free.iter().map(HostBlock::len).sum();
            p.free.clear();
            POOLED_BYTES.fetch_sub(n, Ordering::Relaxed);
        }
    });
}

pub fn free(ptr: *mut u8) -> Result<()> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let i = p
            .in_use
            .iter()
            .rposition(|b| b.as_ptr() == ptr)
            .ok_or_else(|| Error::value(format!("workspace {ptr:p} was not allocated by this thread")))?;
        let buf = p.in_use.swap_remove(i);
        p.free.push(buf);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reuses_buffers() {
        let a = super::alloc(100).unwrap();
        super::free(a).unwrap();
        let b = super::alloc(4000).unwrap();
        assert_eq!(a, b);
        assert!(super::free(std::ptr::null_mut()).is_err());
        super::free(b).unwrap();
    }
}
