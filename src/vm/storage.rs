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
use crate::tensor::{Buffer, Recycle};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

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

/// Size classes of the small blocks (rounded to 64 bytes, up to `GRANULE`): one list each.
const SMALL_CLASSES: usize = GRANULE / 64;

/// The free blocks by size.
struct FreeBlocks {
    /// Small blocks, by class (`len / 64 - 1`), and which classes have any (bit per class): the
    /// smallest that fits is a bit scan, with no search and nothing allocated when a list empties
    /// and fills again (a VM's invocations take and give back the same small sizes every time).
    small: Vec<Vec<Free>>,
    small_mask: u64,
    /// Larger blocks by size: the smallest that fits in O(log n), however many blocks are busy (a
    /// Relay loop keeps one frame's storage busy per iteration).
    large: BTreeMap<usize, Vec<Free>>,
    /// No free block was last used before this invocation (a lower bound): until `KEEP_FOR`
    /// invocations after it, none can be due for release, and an invocation's end looks at none.
    oldest: u64,
}

impl Default for FreeBlocks {
    fn default() -> FreeBlocks {
        FreeBlocks {
            small: (0..SMALL_CLASSES).map(|_| Vec::new()).collect(),
            small_mask: 0,
            large: BTreeMap::new(),
            oldest: 0,
        }
    }
}

const _: () = assert!(SMALL_CLASSES <= 64, "a bit per small class");

impl FreeBlocks {
    /// The smallest free block of `want` bytes (a rounded size) to `2 * want`.
    fn take(&mut self, want: usize) -> Option<Buffer> {
        let most = want.saturating_mul(2);
        if want <= GRANULE {
            let (lo, hi) = (want / 64 - 1, (most / 64).min(SMALL_CLASSES) - 1);
            let fitting = self.small_mask & (u64::MAX << lo) & (u64::MAX >> (63 - hi));
            if fitting != 0 {
                let class = fitting.trailing_zeros() as usize;
                let list = &mut self.small[class];
                let free = list.pop().expect("a class marked has blocks");
                if list.is_empty() {
                    self.small_mask &= !(1 << class);
                }
                return Some(free.buffer);
            }
        }
        if most <= GRANULE {
            return None;
        }
        // Large blocks only: every key here is above `GRANULE`.
        let len = *self.large.range(want..=most).next()?.0;
        let list = self.large.get_mut(&len).expect("a size listed has blocks");
        let free = list.pop().expect("a size listed has blocks");
        if list.is_empty() {
            self.large.remove(&len);
        }
        Some(free.buffer)
    }

    fn give(&mut self, buffer: Buffer, clock: u64) {
        if self.is_empty() {
            self.oldest = clock;
        }
        let len = buffer.len();
        let free = Free { buffer, used_at: clock };
        if len <= GRANULE {
            let class = len / 64 - 1;
            self.small[class].push(free);
            self.small_mask |= 1 << class;
        } else {
            self.large.entry(len).or_default().push(free);
        }
    }

    /// Takes out the blocks last used more than `KEEP_FOR` invocations before `clock`.
    fn stale(&mut self, clock: u64) -> Vec<Free> {
        let mut gone = Vec::new();
        if clock - self.oldest <= KEEP_FOR {
            return gone;
        }
        let mut oldest = clock;
        let mut sift = |list: &mut Vec<Free>| {
            let mut k = 0;
            while k < list.len() {
                if clock - list[k].used_at > KEEP_FOR {
                    gone.push(list.swap_remove(k));
                } else {
                    oldest = oldest.min(list[k].used_at);
                    k += 1;
                }
            }
            !list.is_empty()
        };
        for class in 0..SMALL_CLASSES {
            if !sift(&mut self.small[class]) {
                self.small_mask &= !(1 << class);
            }
        }
        self.large.retain(|_, list| sift(list));
        self.oldest = oldest;
        gone
    }

    fn is_empty(&self) -> bool {
        self.small_mask == 0 && self.large.is_empty()
    }

    /// (blocks, bytes)
    fn usage(&self) -> (usize, usize) {
        let lists = self.small.iter().chain(self.large.values());
        lists.flatten().fold((0, 0), |(n, s), f| (n + 1, s + f.buffer.len()))
    }
}

#[derive(Default)]
struct State {
    free: FreeBlocks,
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
    /// Given to every block taken, to come back through (a weak reference to this pool).
    home: Weak<dyn Recycle>,
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
        let pool = Arc::new_cyclic(|home: &Weak<Pool>| Pool {
            device,
            state: Mutex::new(State::default()),
            home: home.clone(),
        });
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
    pub fn take(&self, size: usize, alignment: i64, how: Allocator) -> Result<Arc<Buffer>> {
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
            let b = st.free.take(want);
            if let Some(b) = &b {
                st.busy_blocks += 1;
                st.busy_bytes += b.len();
            }
            b
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
        Ok(Arc::new(buffer.with_release_hook(self.home.clone())))
    }

    /// An invocation ended: free blocks no invocation used lately go.
    pub fn end(&self) {
        let gone = {
            let mut st = self.state();
            st.clock += 1;
            let clock = st.clock;
            st.free.stale(clock)
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
        let (blocks, bytes) = st.free.usage();
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

impl Recycle for Pool {
    fn recycle(&self, buffer: Buffer) {
        let mut st = self.state();
        st.busy_blocks -= 1;
        st.busy_bytes -= buffer.len();
        let clock = st.clock;
        st.free.give(buffer, clock);
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

    #[test]
    fn the_smallest_fitting_block_is_taken_across_small_and_large_sizes() {
        let pool = Pool::new(DLDevice::CPU);
        let take = |size| pool.take(size, 64, Allocator::Pooled).unwrap();
        let (a, b, c, d) = (take(3000), take(200), take(4096), take(5000));
        assert_eq!((a.len(), b.len(), c.len(), d.len()), (3008, 256, 4096, 8192));
        let ptrs = |x: &Arc<Buffer>| x.as_ptr() as usize;
        let (pa, pb, pc, pd) = (ptrs(&a), ptrs(&b), ptrs(&c), ptrs(&d));
        drop((a, b, c, d));
        // 150 rounds to 192: the 256 block (not twice too large), not the 3008 one.
        let e = take(150);
        assert_eq!(ptrs(&e), pb);
        // 1600: the 3008 block, the smallest free that fits.
        let f = take(1600);
        assert_eq!(ptrs(&f), pa);
        // 1500: the 4096 block is more than twice as large, so a new block.
        let g = take(1500);
        assert!(![pa, pb, pc, pd].contains(&ptrs(&g)));
        // 4000: the 4096 block; then 4096 again: the 8192 block (a large one, twice the request).
        let (h, i) = (take(4000), take(4096));
        assert_eq!((ptrs(&h), ptrs(&i)), (pc, pd));
        assert_eq!(pool.usage().busy_blocks, 5);
        drop((e, f, g, h, i));
        assert_eq!(pool.usage(), PoolUsage { blocks: 5, bytes: 256 + 3008 + 1536 + 4096 + 8192, ..Default::default() });
    }

    #[test]
    fn only_blocks_unused_for_keep_for_invocations_are_released() {
        let pool = Pool::new(DLDevice::CPU);
        let (old, recent) =
            (pool.take(100, 64, Allocator::Pooled).unwrap(), pool.take(3000, 64, Allocator::Pooled).unwrap());
        let kept = recent.as_ptr();
        drop(old);
        pool.end();
        drop(recent);
        for _ in 0..KEEP_FOR - 1 {
            pool.end();
        }
        assert_eq!(pool.usage().blocks, 2);
        pool.end();
        // Unused for KEEP_FOR + 1 invocations, and for KEEP_FOR exactly: only the first goes.
        assert_eq!(pool.usage(), PoolUsage { blocks: 1, bytes: 3008, ..Default::default() }, "the older went");
        // The one kept is free to take still.
        let again = pool.take(3000, 64, Allocator::Pooled).unwrap();
        assert_eq!(again.as_ptr(), kept);
        drop(again);
        for _ in 0..KEEP_FOR {
            pool.end();
        }
        assert_eq!(pool.usage().blocks, 1, "used again since: kept");
        pool.end();
        assert_eq!(pool.usage(), PoolUsage::default());
    }
}
