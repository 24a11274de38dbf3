//! Storage for the tensors a VM's code allocates (`AllocStorage`, then `AllocTensor` views into
//! it): blocks from one pool per device, shared by every VM of an executable.
//!
//! Upstream's pooled allocator keeps every block it ever made, by exact size, so a stream of
//! changing shapes grows memory without bound. Here a block comes back free when the last tensor
//! viewing it goes (its release hook), a request takes the smallest free block that fits it
//! without wasting more than half, and blocks no invocation used lately are released after each
//! invocation: memory follows the invocations in flight and the shapes seen lately. Taking and
//! giving back cost the same however many blocks are busy (a loop of a million iterations holds
//! a million).

#![forbid(unsafe_code)]

use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::tensor::Buffer;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Invocations a free block survives without being used.
const KEEP_FOR: u64 = 4;
/// Sizes are rounded up to this (small ones to 64 bytes): requests of nearby sizes share blocks.
const GRANULE: usize = 4096;

/// How a VM allocates on one of its devices (`init`'s allocator types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// A new block per request, freed with its last tensor (upstream's 1).
    Naive,
    /// Blocks reused from the pool (upstream's 2, and the default).
    Pooled,
}

impl Allocator {
    pub fn from_code(code: i64) -> Result<Allocator> {
        match code {
            1 => Ok(Allocator::Naive),
            2 => Ok(Allocator::Pooled),
            other => Err(Error::value(format!("allocator type {other}: 1 (naive) or 2 (pooled)"))),
        }
    }
}

/// A free block: its memory, and the invocation that last held it.
struct Free {
    buffer: Buffer,
    used_at: u64,
}

#[derive(Default)]
struct State {
    /// Free blocks by size: a request takes the smallest that fits in O(log n), however many
    /// blocks are busy (a Relay loop keeps one frame's storage busy per iteration).
    free: BTreeMap<usize, Vec<Free>>,
    /// Blocks out in tensors: they come back through their release hook.
    busy_blocks: usize,
    busy_bytes: usize,
    /// Invocations ended (of every VM using the pool).
    clock: u64,
}

/// The blocks of one device.
pub struct Pool {
    device: DLDevice,
    state: Mutex<State>,
}

/// What a pool holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub blocks: usize,
    pub bytes: usize,
    /// Of those, held by tensors now.
    pub busy_blocks: usize,
    pub busy_bytes: usize,
}

fn rounded(size: usize) -> usize {
    if size <= GRANULE {
        size.div_ceil(64).max(1) * 64
    } else {
        size.div_ceil(GRANULE) * GRANULE
    }
}

impl Pool {
    pub fn new(device: DLDevice) -> Arc<Pool> {
        let pool = Arc::new(Pool { device, state: Mutex::new(State::default()) });
        crate::backend::fork::guard(&pool);
        pool
    }

    pub fn device(&self) -> DLDevice {
        self.device
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `size` bytes, aligned to `alignment`.
    pub fn take(self: &Arc<Self>, size: usize, alignment: i64, how: Allocator) -> Result<Arc<Buffer>> {
        if !(0..=crate::tensor::ALIGNMENT as i64).contains(&alignment) {
            return Err(Error::value(format!(
                "storage aligned to {alignment} bytes: this runtime's blocks are aligned to {}",
                crate::tensor::ALIGNMENT
            )));
        }
        let want = rounded(size);
        if how == Allocator::Naive {
            return Ok(Arc::new(Buffer::zeroed_on(self.device, want)?));
        }
        let reused = {
            let mut st = self.state();
            // The smallest free block that fits without wasting more than half of it.
            let len = st.free.range(want..=want.saturating_mul(2)).next().map(|(&len, _)| len);
            len.map(|len| {
                let blocks = st.free.get_mut(&len).expect("a size listed has blocks");
                let b = blocks.pop().expect("a size listed has blocks");
                if blocks.is_empty() {
                    st.free.remove(&len);
                }
                st.busy_blocks += 1;
                st.busy_bytes += len;
                b.buffer
            })
        };
        let buffer = match reused {
            Some(b) => b,
            None => {
                let b = Buffer::zeroed_on(self.device, want).map_err(|e| e.context("VM storage"))?;
                let mut st = self.state();
                st.busy_blocks += 1;
                st.busy_bytes += want;
                b
            }
        };
        // When the last tensor viewing the block goes, the block comes back free.
        let pool = Arc::downgrade(self);
        Ok(Arc::new(buffer.with_release_hook(Box::new(move |b| {
            if let Some(pool) = pool.upgrade() {
                pool.give_back(b);
            }
        }))))
    }

    fn give_back(&self, buffer: Buffer) {
        let mut st = self.state();
        st.busy_blocks -= 1;
        st.busy_bytes -= buffer.len();
        let used_at = st.clock;
        st.free.entry(buffer.len()).or_default().push(Free { buffer, used_at });
    }

    /// An invocation ended: free blocks no invocation used lately go.
    pub fn end(&self) {
        let gone = {
            let mut st = self.state();
            st.clock += 1;
            let clock = st.clock;
            let mut gone = Vec::new();
            st.free.retain(|_, blocks| {
                let (keep, old): (Vec<Free>, Vec<Free>) =
                    std::mem::take(blocks).into_iter().partition(|b| clock - b.used_at <= KEEP_FOR);
                *blocks = keep;
                gone.extend(old);
                !blocks.is_empty()
            });
            gone
        };
        // Freed outside the lock (unmapping a large block takes a while).
        drop(gone);
    }

    /// Releases every free block.
    pub fn clear(&self) {
        let gone = std::mem::take(&mut self.state().free);
        drop(gone);
    }

    pub fn usage(&self) -> PoolUsage {
        let st = self.state();
        let free = st.free.iter().map(|(&len, b)| (b.len(), len * b.len()));
        let (blocks, bytes) = free.fold((0, 0), |(n, s), (k, b)| (n + k, s + b));
        PoolUsage {
            blocks: blocks + st.busy_blocks,
            bytes: bytes + st.busy_bytes,
            busy_blocks: st.busy_blocks,
            busy_bytes: st.busy_bytes,
        }
    }
}

/// The pools of one executable's VMs, one per device.
#[derive(Default)]
pub struct Pools {
    pools: Mutex<Vec<Arc<Pool>>>,
}

impl Pools {
    pub fn of(&self, device: DLDevice) -> Arc<Pool> {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pools.iter().find(|p| p.device == device) {
            return p.clone();
        }
        let p = Pool::new(device);
        pools.push(p.clone());
        p
    }

    pub fn all(&self) -> Vec<Arc<Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl crate::backend::fork::ForkLock for Pool {
    fn try_hold(&self) -> Option<crate::backend::fork::Held<'_>> {
        self.state.try_hold()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_given_back_is_free_for_keep_for_invocations_then_released() {
        let pool = Pool::new(DLDevice::CPU);
        for _ in 0..10 {
            pool.end();
        }
        let a = pool.take(100, 64, Allocator::Pooled).unwrap();
        let busy = PoolUsage { blocks: 1, bytes: 128, busy_blocks: 1, busy_bytes: 128 };
        assert_eq!(pool.usage(), busy);
        // Back through its release hook when its last holder goes: free, not gone.
        let view = a.clone();
        drop(a);
        assert_eq!(pool.usage(), busy, "still held by a view");
        drop(view);
        assert_eq!(pool.usage(), PoolUsage { busy_blocks: 0, busy_bytes: 0, ..busy });
        for _ in 0..KEEP_FOR {
            pool.end();
        }
        assert_eq!(pool.usage().blocks, 1, "kept for {KEEP_FOR} invocations after its last use");
        pool.end();
        assert_eq!(pool.usage(), PoolUsage::default(), "released after that");
        // Two free blocks of one size count twice, in blocks and bytes.
        let (c, d) = (pool.take(100, 64, Allocator::Pooled).unwrap(), pool.take(100, 64, Allocator::Pooled).unwrap());
        drop((c, d));
        assert_eq!(pool.usage(), PoolUsage { blocks: 2, bytes: 256, busy_blocks: 0, busy_bytes: 0 });
        pool.clear();
        // A pool gone first: a block given back then is simply freed.
        let b = pool.take(100, 64, Allocator::Pooled).unwrap();
        drop(pool);
        drop(b);
    }

    #[test]
    fn blocks_are_reused_across_sizes_and_released_when_unused() {
        let pool = Pool::new(DLDevice::CPU);
        let a = pool.take(10_000, 64, Allocator::Pooled).unwrap();
        assert_eq!(a.len(), 12_288);
        // Busy: a second request gets a block of its own.
        let b = pool.take(9_000, 64, Allocator::Pooled).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        drop(a);
        // Free and fitting (not more than twice the size): reused.
        let c = pool.take(7_000, 64, Allocator::Pooled).unwrap();
        assert_eq!(c.len(), 12_288);
        drop(c);
        // Twice too large: not used for a tiny request.
        let d = pool.take(100, 64, Allocator::Pooled).unwrap();
        assert_eq!(d.len(), 128);
        pool.end();
        assert_eq!(pool.usage().blocks, 3);
        drop((b, d));
        for _ in 0..=KEEP_FOR {
            pool.end();
        }
        assert_eq!(pool.usage(), PoolUsage::default(), "blocks unused lately are released");
        // Naive: never pooled.
        let n = pool.take(100, 64, Allocator::Naive).unwrap();
        assert_eq!(pool.usage().blocks, 0);
        drop(n);
        assert!(pool.take(100, 128, Allocator::Pooled).is_err());
    }
}
