//! The pool behind `TVMBackendParallelLaunch`: one per process, shared by every thread that
//! launches, created on first use. The launcher runs task 0 itself; workers spin briefly for the
//! next launch, then park. A launch allocates nothing.
//!
//! While one thread's launch holds the pool, a launch from another thread runs inline on that
//! thread: the cores are busy already, and N host threads running N executors then use N + the
//! pool's workers threads, not N pools' worth (upstream gives each launching thread a pool).

use super::affinity::{self, Mode, Placement};
use crate::dlpack::{ParallelLambdaFn as FTVMParallelLambda, TVMParallelGroupEnv};
use crate::error::{Error, Result};
use crate::last_error;
use once_cell::sync::Lazy;
use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;

/// Threads a launch uses by default: `TVM_NUM_THREADS`, else `OMP_NUM_THREADS`, else the number
/// of physical cores. Read once per process.
pub static DEFAULT_THREADS: Lazy<usize> = Lazy::new(|| {
    let from_env = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0);
    from_env("TVM_NUM_THREADS").or_else(|| from_env("OMP_NUM_THREADS")).unwrap_or_else(physical_cores).max(1)
});

static SPIN_COUNT: Lazy<u32> =
    Lazy::new(|| std::env::var("TVM_THREAD_POOL_SPIN_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 16));

fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cores = std::collections::HashSet::new();
    for cpu in 0..logical {
        let base = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        let read = |f: &str| std::fs::read_to_string(format!("{base}/{f}")).ok().map(|s| s.trim().to_string());
        match (read("physical_package_id"), read("core_id")) {
            (Some(p), Some(c)) => {
                cores.insert((p, c));
            }
            _ => return logical,
        }
    }
    cores.len().clamp(1, logical)
}

/// What task barriers synchronise on; `sync_handle` points here.
#[derive(Default)]
pub struct Barrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Barrier {
    /// Waits until all `n` tasks of the launch have arrived.
    pub fn wait(&self, n: usize) {
        let gen = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
        } else {
            let mut spins = 0u32;
            while self.generation.load(Ordering::Acquire) == gen {
                backoff(&mut spins);
            }
        }
    }
}

fn backoff(spins: &mut u32) {
    if *spins < 1 << 10 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins = spins.saturating_add(1);
}

#[derive(Clone, Copy)]
struct Job {
    func: Option<FTVMParallelLambda>,
    cdata: *mut c_void,
    num_task: usize,
}

struct Shared {
    job: UnsafeCell<Job>,
    barrier: Barrier,
    epoch: AtomicU64,
    pending: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    failed: Mutex<Vec<(usize, String)>>,
    shutdown: AtomicBool,
}

// SAFETY: `job` is written only by the launcher while every worker is idle (pending == 0), and
// read by workers only after they observe the epoch bump that publishes it.
unsafe impl Sync for Shared {}
// SAFETY: as above; the cdata pointer is the kernel's to share with its own tasks.
unsafe impl Send for Shared {}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// The process's pool; held for the whole of a launch.
static POOL: Mutex<Option<Pool>> = Mutex::new(None);
/// Threads set by `threading::Configure` / `runtime.config_threadpool` (0: the default).
static CONFIGURED: AtomicUsize = AtomicUsize::new(0);
/// Where the pool's threads run (set with `CONFIGURED`; read when the pool starts).
static PLACEMENT: Mutex<Placement> = Mutex::new(Placement { cores: Vec::new(), one_per_thread: false });
/// `threading::SetMaxConcurrency` (0: from the environment).
static MAX_CONCURRENCY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static IN_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Has forks take the pool's locks (so no launch is half done in a child: a launch on another
/// thread ends first) and a child forget the pool. Called before the pool is first used.
pub fn handle_forks() {
    super::fork::guard_static(&POOL);
    super::fork::guard_static(&PLACEMENT);
    super::fork::install_with(super::fork::Hooks { before: settle, after: after_fork });
}

/// Before a fork: the settings a launch reads once are read, so no thread is inside reading them
/// (a child would wait for it for ever).
fn settle() {
    Lazy::force(&DEFAULT_THREADS);
    Lazy::force(&SPIN_COUNT);
}

/// After a fork, in a `child`: the pool's workers are not there, so it is forgotten (dropping it
/// would wait for them) and the next launch starts a pool of its own. The fork held the lock, so
/// it is free here, unless the fork gave up waiting for it: launches then run inline.
fn after_fork(child: bool) {
    if !child {
        return;
    }
    let mut pool = match POOL.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    std::mem::forget(pool.take());
}

impl Pool {
    /// A pool of `threads` (the launcher and `threads - 1` workers). Failing to start a worker is
    /// an error; the workers already started are stopped again.
    fn new(threads: usize) -> Result<Pool> {
        handle_forks();
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(Job { func: None, cdata: std::ptr::null_mut(), num_task: 0 }),
            barrier: Barrier::default(),
            epoch: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            failed: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
        });
        let mut pool = Pool { shared, workers: Vec::with_capacity(threads.saturating_sub(1)) };
        let placement = PLACEMENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for id in 1..threads {
            let s = pool.shared.clone();
            let cores = placement.cores_of(id);
            let spawned = std::thread::Builder::new().name(format!("tvm-worker-{id}")).spawn(move || {
                affinity::pin_current_thread(&cores);
                worker(s, id)
            });
            match spawned {
                Ok(handle) => pool.workers.push(handle),
                // Dropping `pool` stops and joins the workers started so far.
                Err(e) => return Err(Error::tvm(format!("cannot start thread-pool worker {id} of {threads}: {e}"))),
            }
        }
        Ok(pool)
    }

    fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    fn launch(&self, func: FTVMParallelLambda, cdata: *mut c_void, num_task: usize) -> Result<()> {
        let s = &*self.shared;
        // SAFETY: every worker is idle (the previous launch waited for pending == 0).
        unsafe { *s.job.get() = Job { func: Some(func), cdata, num_task } };
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let rc = run_task(s, 0);
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            backoff(&mut spins);
        }
        let mut failed = std::mem::take(&mut *s.failed.lock().unwrap_or_else(|e| e.into_inner()));
        if rc != 0 {
            failed.push((0, last_error::get()));
        }
        if failed.is_empty() {
            return Ok(());
        }
        failed.sort_by_key(|(t, _)| *t);
        let text: Vec<String> = failed.iter().map(|(t, m)| format!("Task {t} error: {m}")).collect();
        Err(Error::foreign(text.join("\n")))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Runs task `id` of the current job; returns the lambda's status (0 for idle ids).
fn run_task(s: &Shared, id: usize) -> i32 {
    // SAFETY: the job was published before the epoch bump this thread observed.
    let job = unsafe { *s.job.get() };
    if id >= job.num_task {
        return 0;
    }
    let mut env = TVMParallelGroupEnv {
        sync_handle: (&s.barrier as *const Barrier).cast_mut().cast(),
        num_task: job.num_task as i32,
    };
    let func = job.func.expect("a published job has a function");
    // SAFETY: the kernel's lambda, with the environment it expects and its own closure data.
    unsafe { func(id as i32, &mut env, job.cdata) }
}

fn worker(s: Arc<Shared>, id: usize) {
    IN_WORKER.with(|w| w.set(true));
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let mut epoch = s.epoch.load(Ordering::Acquire);
        while epoch == seen && spins < *SPIN_COUNT {
            backoff(&mut spins);
            epoch = s.epoch.load(Ordering::Acquire);
        }
        if epoch == seen {
            let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.epoch.load(Ordering::SeqCst) == seen {
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            epoch = s.epoch.load(Ordering::Acquire);
        }
        seen = epoch;
        if s.shutdown.load(Ordering::SeqCst) {
            return;
        }
        if run_task(&s, id) != 0 {
            s.failed.lock().unwrap_or_else(|e| e.into_inner()).push((id, last_error::get()));
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

/// Threads a launch uses now (the process's; see [`with_threads`] for a thread's own).
pub fn num_threads() -> usize {
    match CONFIGURED.load(Ordering::Relaxed) {
        0 => *DEFAULT_THREADS,
        n => n,
    }
}

thread_local! {
    /// Threads the calling thread's launches use for now ([`with_threads`]; 0: the process's).
    static THREADS_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` with the calling thread's launches using `threads` threads (0: the process's; never
/// more than [`max_concurrency`]): how an executor told its count runs its kernels, whatever other
/// executors of the process use.
pub fn with_threads<T>(threads: usize, f: impl FnOnce() -> T) -> T {
    if threads == 0 {
        return f();
    }
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREADS_HERE.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(THREADS_HERE.with(|t| t.replace(threads.min(max_concurrency()))));
    f()
}

/// Threads a launch from this thread uses.
fn launch_threads() -> usize {
    match THREADS_HERE.with(Cell::get) {
        0 => num_threads(),
        n => n,
    }
}

/// Stops the pool's workers unless a launch is using them (the next launch starts them again),
/// and forgets what the calling thread learnt about loop bodies: their libraries may be unloaded
/// and others loaded at the same address.
pub fn release() {
    match POOL.try_lock() {
        Ok(mut p) => *p = None,
        Err(TryLockError::Poisoned(e)) => *e.into_inner() = None,
        Err(TryLockError::WouldBlock) => {}
    }
    choice::forget();
}

/// Upstream's `threading::MaxConcurrency`: `SetMaxConcurrency`'s value, else `TVM_NUM_THREADS`,
/// else `OMP_NUM_THREADS`, else the physical cores. Pools never use more threads.
pub fn max_concurrency() -> usize {
    match MAX_CONCURRENCY.load(Ordering::Relaxed) {
        0 => *DEFAULT_THREADS,
        n => n,
    }
}

/// `threading::SetMaxConcurrency` (0: back to the environment's).
pub fn set_max_concurrency(n: usize) {
    MAX_CONCURRENCY.store(n, Ordering::Relaxed);
}

/// Upstream's `threading::Configure` (and `runtime.config_threadpool`): how many threads launches
/// use and where they run. `threads` 0 takes the mode's count of cores (the listed ones for the
/// two listing modes, all for the default); never more than [`max_concurrency`]. The calling
/// thread, which runs task 0 of its launches, is pinned to the mode's cores, as upstream pins it.
/// Returns the threads launches now use.
pub fn configure(mode: Mode, threads: usize, listed: &[usize]) -> Result<usize> {
    let cores = affinity::cores_for(mode, listed)?;
    let wanted = match (threads, mode) {
        (0, Mode::Default) => max_concurrency(),
        (0, _) => cores.len(),
        (n, _) => n,
    };
    let used = wanted.clamp(1, max_concurrency());
    let placement = Placement { one_per_thread: mode == Mode::OneCorePerThread, cores };
    affinity::pin_current_thread(&placement.cores_of(0));
    *PLACEMENT.lock().unwrap_or_else(|e| e.into_inner()) = placement;
    CONFIGURED.store(used, Ordering::Relaxed);
    *POOL.lock().unwrap_or_else(|e| e.into_inner()) = None;
    Ok(used)
}

/// `threading::ResetThreadPool`: stops the workers; the next launch starts them with the current
/// configuration.
pub fn reset() {
    *POOL.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// Runs `func` on `num_task` concurrent tasks (0 = all threads).
///
/// # Safety
/// `func` must be safe to call concurrently with `cdata`, as compiled kernels' lambdas are.
pub unsafe fn parallel_launch(func: FTVMParallelLambda, cdata: *mut c_void, num_task: i32) -> Result<()> {
    if IN_WORKER.with(Cell::get) {
        return Err(Error::tvm("Cannot launch parallel job inside worker, consider fuse then parallel"));
    }
    let threads = launch_threads();
    let n = match usize::try_from(num_task) {
        Ok(0) => threads,
        Ok(n) if n <= threads => n,
        _ => return Err(Error::value(format!("parallel launch of {num_task} tasks on a pool of {threads} threads"))),
    };
    if n == 1 {
        // SAFETY: per this function's contract.
        return unsafe { run_inline(func, cdata) };
    }
    if num_task != 0 {
        // SAFETY: as above.
        return unsafe { run_parallel(func, cdata, n) };
    }
    // "Use all threads": pick, per loop body, whichever of inline or parallel runs faster.
    let parallel = choice::decide(func as usize);
    let start = parallel.measure.then(std::time::Instant::now);
    // SAFETY: as above.
    let result = unsafe {
        if parallel.parallel {
            run_parallel(func, cdata, n)
        } else {
            run_inline(func, cdata)
        }
    };
    if let Some(start) = start {
        choice::record(func as usize, parallel.parallel, start.elapsed().as_nanos() as u64);
    }
    result
}

/// Runs all the work as one task on the calling thread.
unsafe fn run_inline(func: FTVMParallelLambda, cdata: *mut c_void) -> Result<()> {
    let barrier = Barrier::default();
    let mut env = TVMParallelGroupEnv { sync_handle: (&barrier as *const Barrier).cast_mut().cast(), num_task: 1 };
    // SAFETY: the kernel's lambda with its own closure data.
    let rc = unsafe { func(0, &mut env, cdata) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::foreign(format!("Task 0 error: {}", last_error::get())))
    }
}

/// Runs the job on the pool, or inline when another thread's launch holds the pool.
unsafe fn run_parallel(func: FTVMParallelLambda, cdata: *mut c_void, n: usize) -> Result<()> {
    let mut pool = match POOL.try_lock() {
        Ok(p) => p,
        // A launch that panicked leaves no job behind: the pool is idle and usable.
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // SAFETY: per this function's contract.
        Err(TryLockError::WouldBlock) => return unsafe { run_inline(func, cdata) },
    };
    // The process's count, or more for a thread told to use more: launches of fewer tasks leave
    // the other workers idle.
    if pool.as_ref().is_none_or(|p| p.threads() < n) {
        *pool = None;
        *pool = Some(Pool::new(num_threads().max(n))?);
    }
    pool.as_ref().expect("created above").launch(func, cdata, n)
}

/// Per loop body (the lambda's address), which way it runs faster: a parallel launch costs a
/// fraction of a microsecond of signalling (more when a worker must be woken), which tiny loops
/// never earn back. The first launches of a body try both ways (three parallel, two inline, the
/// best of each kept); later, an occasional launch re-tries the other way, so a change (load on the
/// machine, different shapes) is noticed: after 16 launches at first, twice as long after each
/// re-try that confirms the choice (up to 65536). Timing only those launches keeps the clock off
/// the common path.
///
/// Inline must win clearly (by an eighth) to be chosen, and never for a body that takes over 100 us
/// inline: on a busy machine a parallel probe can land while the other core is taken, and a heavy
/// kernel stuck inline runs at one thread's speed, where a tiny loop that is slower in parallel loses
/// far less.
mod choice {
    use std::cell::RefCell;

    const SLOTS: usize = 1024;
    const WAYS: usize = 4;
    const FIRST_PROBE: u32 = 16;
    const LAST_PROBE: u32 = 1 << 16;

    #[derive(Clone, Copy, Default)]
    struct Entry {
        key: usize,
        calls: u32,
        inline_ns: u64,
        parallel_ns: u64,
        /// Launches until the next re-try of the other way, and the interval after it.
        until_probe: u32,
        interval: u32,
    }

    /// A body this slow inline always runs in parallel: the launch costs well under 1% of it, and
    /// a noisy probe must not leave it at one thread's speed.
    const HEAVY_NS: u64 = 100_000;

    /// Parallel for heavy bodies, and for others unless inline is faster by more than an eighth.
    fn prefers_parallel(e: &Entry) -> bool {
        e.inline_ns >= HEAVY_NS || e.parallel_ns <= e.inline_ns + e.inline_ns / 8
    }

    pub struct Decision {
        pub parallel: bool,
        pub measure: bool,
    }

    thread_local! {
        static TABLE: RefCell<Box<[Entry; SLOTS]>> = RefCell::new(Box::new([Entry::default(); SLOTS]));
    }

    /// The entry of `key`: one of `WAYS` neighbours; a new key takes the least used of them.
    fn entry(t: &mut [Entry; SLOTS], key: usize, insert: bool) -> Option<&mut Entry> {
        let base = ((key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize & (SLOTS - WAYS);
        let ways = base..base + WAYS;
        let at = match ways.clone().find(|&i| t[i].key == key) {
            Some(i) => i,
            None if insert => {
                let i = ways.min_by_key(|&i| t[i].calls).expect("WAYS > 0");
                t[i] = Entry { key, ..Entry::default() };
                i
            }
            None => return None,
        };
        Some(&mut t[at])
    }

    pub fn forget() {
        let _ = TABLE.try_with(|t| {
            if let Ok(mut t) = t.try_borrow_mut() {
                t.fill(Entry::default());
            }
        });
    }

    pub fn decide(key: usize) -> Decision {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let e = entry(&mut t, key, true).expect("inserted");
            e.calls = e.calls.wrapping_add(1);
            match e.calls {
                1..=3 => Decision { parallel: true, measure: true },
                4 | 5 => Decision { parallel: false, measure: true },
                _ => {
                    if e.interval == 0 {
                        e.interval = FIRST_PROBE;
                        e.until_probe = FIRST_PROBE;
                    }
                    let prefer_parallel = prefers_parallel(e);
                    if e.inline_ns >= HEAVY_NS {
                        return Decision { parallel: true, measure: false };
                    }
                    e.until_probe -= 1;
                    if e.until_probe == 0 {
                        Decision { parallel: !prefer_parallel, measure: true }
                    } else {
                        Decision { parallel: prefer_parallel, measure: false }
                    }
                }
            }
        })
    }

    /// Keeps the best recent time of each way: a faster sample replaces it at once, a slower one
    /// moves it up by an eighth of the difference.
    pub fn record(key: usize, parallel: bool, ns: u64) {
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            let Some(e) = entry(&mut t, key, false) else { return };
            let before = prefers_parallel(e);
            let v = if parallel { &mut e.parallel_ns } else { &mut e.inline_ns };
            *v = if *v == 0 || ns < *v { ns } else { *v + (ns - *v) / 8 };
            if e.interval > 0 && e.until_probe == 0 {
                // A re-try: back off while it confirms the choice, start over when it flips it.
                let confirmed = prefers_parallel(e) == before;
                e.interval = if confirmed { (e.interval * 2).min(LAST_PROBE) } else { FIRST_PROBE };
                e.until_probe = e.interval;
            }
        })
    }
}

/// `TVMBackendParallelBarrier`.
///
/// # Safety
/// `penv` must be the environment of a running launch of this pool.
pub unsafe fn barrier(penv: *const TVMParallelGroupEnv) -> Result<()> {
    // SAFETY: per the contract.
    let env = unsafe { penv.as_ref() }.ok_or_else(|| Error::value("null parallel environment"))?;
    // SAFETY: launches set `sync_handle` to their barrier, alive until the launch returns.
    let b = unsafe { env.sync_handle.cast::<Barrier>().as_ref() }.ok_or_else(|| Error::value("null barrier"))?;
    b.wait(env.num_task.max(1) as usize);
    Ok(())
}

#[cfg(test)]
mod tests;
