//! A pool of activation arenas that executors draw from for the duration of one run.
//!
//! An executor's operator outputs that change every run (its activations) are needed only while
//! it runs: its inputs and outputs have memory of their own. So executors that join a pool hold
//! no arena between runs; a run leases one, binds its activations into it, and gives it back. A
//! server with sixteen executors (four batch sizes, one per worker of a four-thread server) and
//! two threads running them holds two arenas, not sixteen.
//!
//! Every arena has the size of the largest member's layout: any arena serves any member, so a
//! run waits only when all `capacity` arenas are lent, never for "its" variant's slot. Arenas are
//! made when a run finds none idle and fewer than `capacity` exist, so memory follows the runs in
//! flight (a lone executor in a pool holds one arena, as it would alone); when the largest member
//! leaves or lays out smaller, arenas of the old size are dropped as they come back. A run that
//! finds every arena lent waits, up to the pool's timeout, then fails with an error and leaves
//! its executor as it was.

#![forbid(unsafe_code)]

use super::GraphExecutor;
use crate::backend::fork;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::ModuleArg;
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{PackedFunc, RetValue};
use crate::tensor::Buffer;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub struct ArenaPool {
    device: DLDevice,
    state: Mutex<State>,
    returned: Condvar,
}

struct State {
    /// How many arenas may exist at once.
    capacity: usize,
    /// How long a run waits for an arena before failing.
    timeout: Duration,
    /// Per member (by id): the arena bytes its layout needs.
    needs: Vec<(u64, usize)>,
    next_id: u64,
    /// Bytes of every arena: the largest need.
    size: usize,
    /// Arenas not lent, all of `size` bytes.
    idle: Vec<Arc<Buffer>>,
    /// Arenas that exist: idle, lent, or being made.
    count: usize,
    /// Runs waiting for an arena (a notification costs a system call: only sent when one waits).
    waiting: usize,
    stats: Stats,
    /// The fork generation `count` and `waiting` count in (see [`ArenaPool::state`]).
    generation: u64,
}

/// What a pool has done, for reports and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Runs that leased an arena.
    pub leases: u64,
    /// Of those, runs that found every arena lent and waited.
    pub waits: u64,
    /// Their total time waiting.
    pub waited: Duration,
    /// Runs that gave up waiting.
    pub timeouts: u64,
    /// The most arenas lent at once.
    pub peak_lent: usize,
}

/// A pool's figures now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    pub capacity: usize,
    pub members: usize,
    /// Arenas that exist now, each of `arena_bytes`.
    pub arenas: usize,
    pub arena_bytes: usize,
    /// Arenas lent to runs now.
    pub lent: usize,
    /// Runs waiting for an arena now.
    pub waiting: usize,
    pub stats: Stats,
}

impl PoolUsage {
    /// Bytes the pool holds now.
    pub fn bytes(&self) -> usize {
        self.arenas * self.arena_bytes
    }

    /// As `get_memory_usage` and the pool's `get_usage` report it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "capacity": self.capacity, "members": self.members, "arenas": self.arenas,
            "arena_bytes": self.arena_bytes, "bytes": self.bytes(), "lent": self.lent, "waiting": self.waiting,
            "leases": self.stats.leases, "waits": self.stats.waits,
            "waited_ms": self.stats.waited.as_secs_f64() * 1e3, "timeouts": self.stats.timeouts,
            "peak_lent": self.stats.peak_lent,
        })
    }
}

/// How long a run waits for an arena unless told otherwise: `TVM_RT_ARENA_POOL_TIMEOUT_MS`, else
/// a minute (a run that waits longer is stuck behind something that will not finish).
pub(crate) fn default_timeout() -> Duration {
    static DEFAULT: OnceLock<Duration> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let ms = std::env::var("TVM_RT_ARENA_POOL_TIMEOUT_MS").ok().and_then(|v| v.trim().parse().ok());
        Duration::from_millis(ms.unwrap_or(60_000))
    })
}

impl ArenaPool {
    /// A pool of at most `capacity` arenas on `device`.
    pub fn new(device: DLDevice, capacity: usize) -> Result<Arc<ArenaPool>> {
        if capacity == 0 {
            return Err(Error::value("an arena pool holds at least one arena"));
        }
        let pool = Arc::new(ArenaPool {
            device,
            state: Mutex::new(State {
                capacity,
                timeout: default_timeout(),
                needs: Vec::new(),
                next_id: 0,
                size: 0,
                idle: Vec::new(),
                count: 0,
                waiting: 0,
                stats: Stats::default(),
                generation: fork::generation(),
            }),
            returned: Condvar::new(),
        });
        fork::guard(&pool);
        fork::install();
        Ok(pool)
    }

    pub fn device(&self) -> DLDevice {
        self.device
    }

    /// The state, as of this process: in a child of a fork, the arenas lent before the fork (and
    /// the runs waiting then) belong to threads the child does not have, and never come back.
    fn state(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = fork::generation();
        if st.generation != now {
            st.count = st.idle.len();
            st.waiting = 0;
            st.generation = now;
        }
        st
    }

    /// Joins the pool, needing `bytes` of arena.
    pub fn join(self: &Arc<Self>, bytes: usize) -> Member {
        let mut st = self.state();
        let id = st.next_id;
        st.next_id += 1;
        st.needs.push((id, bytes));
        st.resize();
        Member { pool: self.clone(), id }
    }

    /// Lets at most `capacity` arenas exist (those lent beyond it are dropped as they return).
    pub fn set_capacity(&self, capacity: usize) -> Result<()> {
        if capacity == 0 {
            return Err(Error::value("an arena pool holds at least one arena"));
        }
        let mut st = self.state();
        st.capacity = capacity;
        st.trim();
        drop(st);
        // Runs waiting may now make an arena.
        self.returned.notify_all();
        Ok(())
    }

    pub fn set_timeout(&self, timeout: Duration) {
        self.state().timeout = timeout;
    }

    pub fn usage(&self) -> PoolUsage {
        let st = self.state();
        PoolUsage {
            capacity: st.capacity,
            members: st.needs.len(),
            arenas: st.count,
            arena_bytes: st.size,
            lent: st.count - st.idle.len(),
            waiting: st.waiting,
            stats: st.stats,
        }
    }

    /// Takes an arena for one run (of the largest member's size, so of what any member needs): an
    /// idle one, a new one while fewer than `capacity` exist, or the first one returned within the
    /// timeout.
    fn lease(self: &Arc<Self>) -> Result<Lease> {
        let mut st = self.state();
        let mut waited = None;
        loop {
            if let Some(buffer) = st.idle.pop() {
                return Ok(self.lent(st, buffer, waited));
            }
            if st.count < st.capacity {
                st.count += 1;
                let size = st.size;
                drop(st);
                // Made outside the lock: other runs return and take arenas meanwhile.
                let made = Buffer::zeroed_on(self.device, size);
                st = self.state();
                match made {
                    Ok(buffer) => return Ok(self.lent(st, Arc::new(buffer), waited)),
                    Err(e) => {
                        st.count -= 1;
                        self.wake(st);
                        return Err(e.context("making an activation arena for the pool"));
                    }
                }
            }
            let since = *waited.get_or_insert_with(Instant::now);
            let Some(left) = st.timeout.checked_sub(since.elapsed()) else {
                st.stats.timeouts += 1;
                return Err(Error::tvm(format!(
                    "no activation arena came free within {:?}: all {} of the pool's arenas stayed lent to other runs",
                    st.timeout, st.capacity
                )));
            };
            st.waiting += 1;
            st = self.returned.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
            st.waiting -= 1;
        }
    }

    /// Unlocks the state, waking one waiting run if there is one.
    fn wake(&self, st: MutexGuard<'_, State>) {
        let waiting = st.waiting > 0;
        drop(st);
        if waiting {
            self.returned.notify_one();
        }
    }

    fn lent(self: &Arc<Self>, mut st: MutexGuard<'_, State>, buffer: Arc<Buffer>, waited: Option<Instant>) -> Lease {
        st.stats.leases += 1;
        if let Some(since) = waited {
            st.stats.waits += 1;
            st.stats.waited += since.elapsed();
        }
        st.stats.peak_lent = st.stats.peak_lent.max(st.count - st.idle.len());
        Lease { pool: self.clone(), buffer, generation: st.generation }
    }

    /// Takes back an arena a run leased.
    fn give_back(&self, buffer: Arc<Buffer>, generation: u64) {
        let mut st = self.state();
        if generation != st.generation {
            // Lent before a fork: no longer counted (see `state`).
        } else if buffer.len() == st.size && st.count <= st.capacity {
            st.idle.push(buffer);
        } else {
            // Of a size no longer wanted, or beyond a capacity lowered meanwhile.
            st.count -= 1;
        }
        self.wake(st);
    }
}

impl State {
    /// Sizes the arenas for the largest need, dropping idle ones of another size.
    fn resize(&mut self) {
        self.size = self.needs.iter().map(|&(_, n)| n).max().unwrap_or(0);
        self.trim();
    }

    /// Drops idle arenas of the wrong size or beyond the capacity; with no members, all of them.
    fn trim(&mut self) {
        let size = self.size;
        let before = self.idle.len();
        self.idle.retain(|b| b.len() == size);
        if self.needs.is_empty() {
            self.idle.clear();
        }
        let keep = self.capacity.saturating_sub(self.count - before);
        self.idle.truncate(keep.min(self.idle.len()));
        self.count -= before - self.idle.len();
    }
}

/// An executor's place in a pool: what its layout needs. Leaving (dropping it) may shrink the
/// arenas.
pub struct Member {
    pool: Arc<ArenaPool>,
    id: u64,
}

impl Member {
    pub fn pool(&self) -> &Arc<ArenaPool> {
        &self.pool
    }

    /// Records that this member's layout needs `bytes` of arena.
    pub fn need(&self, bytes: usize) {
        let mut st = self.pool.state();
        if let Some(n) = st.needs.iter_mut().find(|(id, _)| *id == self.id) {
            if n.1 != bytes {
                n.1 = bytes;
                st.resize();
            }
        }
    }

    /// An arena for one run (see [`ArenaPool`]).
    pub fn lease(&self) -> Result<Lease> {
        self.pool.lease()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut st = self.pool.state();
        st.needs.retain(|(id, _)| *id != self.id);
        st.resize();
    }
}

/// An arena lent to one run; given back when dropped. On a device the arena is given back once
/// the device has finished the run's work, not when it was queued: the next run may be on another
/// queue.
pub struct Lease {
    pool: Arc<ArenaPool>,
    buffer: Arc<Buffer>,
    /// The fork generation it was lent in.
    generation: u64,
}

impl Lease {
    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !crate::device::is_host(self.pool.device) {
            // A device that fails here has failed the run too, which reports it; the arena comes
            // back either way.
            let _ = crate::device::api_of(self.pool.device).and_then(|api| api.sync(self.pool.device.device_id));
        }
        self.pool.give_back(self.buffer.clone(), self.generation);
    }
}

/// The process's default pools, one per device, that executors join as they are made while a
/// default capacity is set (`TVM_RT_ARENA_POOL`, `tvmrt.executor.SetArenaPool`); 0 = none.
pub mod default {
    use super::*;

    static CAPACITY: OnceLock<Mutex<usize>> = OnceLock::new();
    static POOLS: Mutex<Vec<Arc<ArenaPool>>> = Mutex::new(Vec::new());

    fn capacity_cell() -> &'static Mutex<usize> {
        CAPACITY.get_or_init(|| {
            let c = std::env::var("TVM_RT_ARENA_POOL").ok().and_then(|v| v.trim().parse().ok());
            Mutex::new(c.unwrap_or(0))
        })
    }

    /// Has forks take the default pools' list and capacity.
    pub fn handle_forks() {
        fork::guard_static(&POOLS);
        fork::guard_static(capacity_cell());
    }

    /// The default capacity (0: executors keep their own arenas).
    pub fn capacity() -> usize {
        *capacity_cell().lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the default capacity: executors made from now on join their device's pool (none for
    /// 0); pools that exist take the new capacity.
    pub fn set_capacity(capacity: usize) -> Result<()> {
        *capacity_cell().lock().unwrap_or_else(|e| e.into_inner()) = capacity;
        if capacity > 0 {
            for pool in POOLS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                pool.set_capacity(capacity)?;
            }
        }
        Ok(())
    }

    /// The default pool of `device`, made on first use, if a default capacity is set.
    pub fn pool(device: DLDevice) -> Result<Option<Arc<ArenaPool>>> {
        let capacity = capacity();
        if capacity == 0 {
            return Ok(None);
        }
        let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pools.iter().find(|p| p.device == device) {
            return Ok(Some(p.clone()));
        }
        let pool = ArenaPool::new(device, capacity)?;
        pools.push(pool.clone());
        Ok(Some(pool))
    }
}

impl fork::ForkLock for ArenaPool {
    fn try_hold(&self) -> Option<fork::Held<'_>> {
        self.state.try_hold()
    }
}

/// A pool as hosts hold it: a module (`tvmrt.executor.ArenaPool`) whose functions are `join`
/// (an executor), `get_usage` (JSON), `set_capacity` and `set_timeout_ms`.
pub struct PoolModule(pub Arc<ArenaPool>);

impl PoolModule {
    pub fn wrap(pool: Arc<ArenaPool>) -> ObjRef<Module> {
        Module::new(PoolModule(pool))
    }

    /// The pool of a module argument.
    pub fn of(m: &ObjRef<Module>) -> Result<Arc<ArenaPool>> {
        m.node::<PoolModule>()
            .map(|p| p.0.clone())
            .ok_or_else(|| Error::type_err(format!("the module is a {}, not an ArenaPool", m.type_key())))
    }
}

impl ModuleNode for PoolModule {
    fn type_key(&self) -> &str {
        "ArenaPool"
    }

    fn get_function(&self, _this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let pool = self.0.clone();
        let f = match name {
            "join" => PackedFunc::native(move |a| {
                a.expect_count("join", 1, 1)?;
                let m = a.module(0)?;
                let ex = m
                    .node::<GraphExecutor>()
                    .ok_or_else(|| Error::type_err(format!("the module is a {}, not a GraphExecutor", m.type_key())))?;
                ex.join_pool(&pool).map(Into::into)
            }),
            "get_usage" => PackedFunc::native(move |_| Ok(RetValue::Str(pool.usage().to_json().to_string()))),
            "set_capacity" => PackedFunc::native(move |a| {
                a.expect_count("set_capacity", 1, 1)?;
                let c = usize::try_from(a.int(0)?).map_err(|_| Error::value("a negative capacity"))?;
                pool.set_capacity(c).map(Into::into)
            }),
            "set_timeout_ms" => PackedFunc::native(move |a| {
                a.expect_count("set_timeout_ms", 1, 1)?;
                let ms = u64::try_from(a.int(0)?).map_err(|_| Error::value("a negative timeout"))?;
                pool.set_timeout(Duration::from_millis(ms));
                Ok(RetValue::None)
            }),
            _ => return Ok(None),
        };
        Ok(Some(f))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(capacity: usize) -> Arc<ArenaPool> {
        ArenaPool::new(DLDevice::CPU, capacity).unwrap()
    }

    #[test]
    fn arenas_are_made_as_runs_overlap_and_sized_for_the_largest_member() {
        let p = pool(3);
        let (a, b) = (p.join(100), p.join(300));
        assert_eq!(p.usage().arenas, 0, "nothing is made before a run");
        let first = a.lease().unwrap();
        assert_eq!(first.buffer().len(), 300);
        let second = b.lease().unwrap();
        assert!(!Arc::ptr_eq(first.buffer(), second.buffer()));
        let used = Arc::as_ptr(first.buffer());
        drop(first);
        // One run at a time reuses one arena.
        assert_eq!(Arc::as_ptr(a.lease().unwrap().buffer()), used);
        let u = p.usage();
        assert_eq!((u.arenas, u.lent, u.arena_bytes, u.members, u.bytes()), (2, 1, 300, 2, 600));
        drop(second);
        assert_eq!(p.usage().stats.peak_lent, 2);
    }

    #[test]
    fn a_run_waits_for_an_arena_and_times_out_with_an_error() {
        let p = pool(1);
        let (a, b) = (p.join(64), p.join(64));
        p.set_timeout(Duration::from_millis(30));
        let held = a.lease().unwrap();
        let e = b.lease().err().unwrap().to_string();
        assert!(e.contains("no activation arena came free"), "{e}");
        assert_eq!(p.usage().stats.timeouts, 1);
        p.set_timeout(Duration::from_secs(10));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| b.lease().map(|l| Arc::as_ptr(l.buffer()) as usize));
            while p.usage().waiting == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(10));
            let ptr = Arc::as_ptr(held.buffer()) as usize;
            drop(held);
            assert_eq!(waiter.join().unwrap().unwrap(), ptr, "the waiter gets the arena given back");
        });
        assert_eq!(p.usage().waiting, 0);
        let s = p.usage().stats;
        assert_eq!((s.leases, s.waits), (2, 1));
        assert!(s.waited >= Duration::from_millis(10), "{s:?}");
    }

    #[test]
    fn an_arena_that_cannot_be_made_is_an_error_and_counts_for_nothing() {
        let p = pool(1);
        let huge = p.join(1 << 41);
        let e = huge.lease().err().unwrap().to_string();
        assert!(e.contains("making an activation arena"), "{e}");
        assert_eq!(p.usage().arenas, 0);
        // The one place it took is free again: a smaller pool serves the next run at once.
        drop(huge);
        let small = p.join(64);
        p.set_timeout(Duration::from_millis(1));
        assert_eq!(small.lease().unwrap().buffer().len(), 64);
    }

    #[test]
    fn arenas_of_an_old_size_or_beyond_the_capacity_are_dropped() {
        let p = pool(2);
        let small = p.join(100);
        drop((small.lease().unwrap(), small.lease().unwrap()));
        // A smaller member changes nothing: idle arenas of the size and within the capacity stay.
        let smaller = p.join(10);
        assert_eq!((p.usage().arenas, p.usage().lent), (2, 0));
        drop(smaller);
        let (x, y) = (small.lease().unwrap(), small.lease().unwrap());
        drop(x);
        assert_eq!(p.usage().arenas, 2);
        // A bigger member: the idle arena goes at once, the lent one when it returns.
        let big = p.join(500);
        assert_eq!(p.usage().arenas, 1);
        drop(y);
        assert_eq!(p.usage().arenas, 0);
        assert_eq!(big.lease().unwrap().buffer().len(), 500);
        // The largest leaves: arenas shrink to the next need.
        drop(big);
        assert_eq!(p.usage().arenas, 0);
        assert_eq!(small.lease().unwrap().buffer().len(), 100);
        let (x, y) = (small.lease().unwrap(), small.lease().unwrap());
        p.set_capacity(1).unwrap();
        drop((x, y));
        assert_eq!(p.usage().arenas, 1);
        // The last member leaves: the pool holds nothing.
        drop(small);
        assert_eq!(p.usage().bytes(), 0);
        assert!(ArenaPool::new(DLDevice::CPU, 0).is_err());
    }
}
