//! `fork()`: a child process has one thread, the one that forked, and a copy of everything else,
//! locks included. A lock another thread held at the fork stays held for ever in the child, and a
//! once-only initialisation another thread was inside never ends there. So, around every fork:
//!
//! - before it, the forking thread waits for what other threads are inside (the runtime's
//!   one-time set-up, see [`install_with`]), then takes every lock that a child may need: the
//!   process-wide ones ([`guard_static`]) and those of live objects (executors, arena pools,
//!   library contexts: [`guard`]), then lets them all go after the fork, in parent and child. In
//!   the child they are then free, and what they protect is whole;
//! - first, the fork closes the gate that runs pass ([`inside`]: a graph executor's run, a VM's
//!   invocation, a library's load): runs in flight finish (one run each at most), new ones wait
//!   at the gate until the fork is done. Without it, threads running models back to back take
//!   the locks again the moment they let them go, and the fork could only catch them all free by
//!   luck (it waited out its patience, then forked with locks held);
//! - the locks are taken as C++'s `std::lock` takes several: each tried in turn; when one is busy,
//!   all are let go and the forking thread waits for that one alone before starting again. It
//!   never waits while holding, so no order other threads nest locks in can deadlock it, and it
//!   waits by trying again, never blocking: the lock may be its own (a fork from a callback inside
//!   a run);
//! - a lock held across a long wait (a run that calls back into a Python that waits for the
//!   forking thread's GIL; the forking thread's own) would stall the fork for ever: after
//!   [`PATIENCE`] the fork goes ahead with the locks that are free then, and says so once;
//! - the thread pool's workers do not exist in the child: its hooks forget the pool (never joined,
//!   which would wait for threads that are not there) and the next launch starts a new one;
//! - whatever another thread held across the fork and gives back when it finishes (an activation
//!   arena lent to a run) is never given back in the child: holders compare [`generation`], which
//!   the child increments, to tell what was lent before the fork.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, RwLock, TryLockError, Weak};
use std::time::{Duration, Instant};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// How long a fork waits for the locks before going ahead without the busy ones.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What to do before a fork (before the locks are taken), and after it (`true` in the child,
/// after the locks are let go).
#[derive(Clone, Copy)]
pub struct Hooks {
    pub before: fn(),
    pub after: fn(bool),
}

static HOOKS: Mutex<Vec<Hooks>> = Mutex::new(Vec::new());

/// Threads inside a run (between [`inside`] and its guard's end, outermost calls only).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// A fork is waiting for the runs in flight: new ones wait at the gate.
static PENDING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// How deep this thread is inside runs (a run may call back into a host that runs another).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// A thread inside a run, until dropped (on the thread that made it).
pub struct Inside(PhantomData<*const ()>);

/// Enters a run: waits while a fork is pending, then counts this thread in flight until the
/// guard drops, so a fork waits for the run to end instead of racing it for its locks. Nested
/// runs on one thread count once (and never wait: the outer one is already counted).
pub fn inside() -> Inside {
    DEPTH.with(|d| {
        if d.get() == 0 {
            loop {
                while PENDING.load(Ordering::Acquire) {
                    // A fork waits for one run at most; poll, holding nothing a child could need.
                    std::thread::sleep(Duration::from_micros(20));
                }
                IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
                // The fork sets PENDING, then reads IN_FLIGHT: one of the two sees the other.
                if !PENDING.load(Ordering::SeqCst) {
                    break;
                }
                IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            }
        }
        d.set(d.get() + 1);
    });
    Inside(PhantomData)
}

impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.with(|d| {
            d.set(d.get() - 1);
            if d.get() == 0 {
                IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            }
        });
    }
}

/// Closes the gate and waits until the runs in flight (other than the forking thread's own)
/// have ended, or `deadline`.
fn close_gate(deadline: Instant) {
    let own = DEPTH.with(|d| usize::from(d.get() > 0));
    PENDING.store(true, Ordering::SeqCst);
    wait_for(deadline, Duration::from_micros(50), || IN_FLIGHT.load(Ordering::SeqCst) <= own);
}

/// Polls `done` until it holds or `deadline` passes, yielding at first (short waits end within
/// a few), then sleeping `pause` between tries; never blocking on anything.
fn wait_for(deadline: Instant, pause: Duration, mut done: impl FnMut() -> bool) {
    let mut tries = 0u32;
    while !done() && Instant::now() < deadline {
        tries += 1;
        if tries < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
        }
    }
}

/// Opens the gate after a fork; in the child, only the forking thread's run is in flight.
fn open_gate(in_child: bool) {
    if in_child {
        IN_FLIGHT.store(DEPTH.with(|d| usize::from(d.get() > 0)), Ordering::SeqCst);
    }
    PENDING.store(false, Ordering::SeqCst);
}

/// A guard of some lock, its type forgotten: letting it go lets the lock go.
pub struct Held<'a>(#[allow(dead_code)] Box<dyn Guard + 'a>);

/// Anything a [`Held`] can keep (a guard, or a few).
trait Guard {}
impl<T> Guard for T {}

impl<'a> Held<'a> {
    pub fn new<G: 'a>(guard: G) -> Held<'a> {
        Held(Box::new(guard))
    }
}

/// A lock (or a few) that a fork takes and lets go, so that a child finds it free.
pub trait ForkLock: Send + Sync {
    /// The lock, if no one holds it now.
    fn try_hold(&self) -> Option<Held<'_>>;
}

impl<T: Send> ForkLock for Mutex<T> {
    fn try_hold(&self) -> Option<Held<'_>> {
        match self.try_lock() {
            Ok(g) => Some(Held::new(g)),
            // A panic in a holder left the data as it was: free, as for every other user.
            Err(TryLockError::Poisoned(e)) => Some(Held::new(e.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

impl<T: Send + Sync> ForkLock for RwLock<T> {
    fn try_hold(&self) -> Option<Held<'_>> {
        match self.try_write() {
            Ok(g) => Some(Held::new(g)),
            Err(TryLockError::Poisoned(e)) => Some(Held::new(e.into_inner())),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// The process-wide locks, and the live objects' (pruned of the dead as it grows).
static STATICS: Mutex<Vec<&'static dyn ForkLock>> = Mutex::new(Vec::new());
static OBJECTS: Mutex<Objects> = Mutex::new(Objects { live: Vec::new(), prune_at: 64 });
/// Registrations so far: a fork that gathered the lists, then took every lock, finds out whether
/// an object joined in between (its lock would not be held).
static JOINED: AtomicU64 = AtomicU64::new(0);

struct Objects {
    live: Vec<Weak<dyn ForkLock>>,
    /// Dead entries are dropped when the list reaches this length.
    prune_at: usize,
}

/// Has a fork take `lock` (a process-wide one) and let it go around it.
pub fn guard_static(lock: &'static dyn ForkLock) {
    let mut statics = STATICS.lock().unwrap_or_else(|e| e.into_inner());
    if !statics.iter().any(|l| std::ptr::addr_eq(*l, lock)) {
        statics.push(lock);
        JOINED.fetch_add(1, Ordering::AcqRel);
    }
}

/// Has every fork while `object` lives take its lock and let it go around the fork.
pub fn guard<T: ForkLock + 'static>(object: &Arc<T>) {
    let weak: Weak<dyn ForkLock> = Arc::downgrade(object) as Weak<dyn ForkLock>;
    let mut objects = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    if objects.live.len() >= objects.prune_at {
        objects.live.retain(|w| w.strong_count() > 0);
        // Twice the survivors: pruning stays linear in the objects made, however many live.
        objects.prune_at = (objects.live.len() * 2).max(64);
    }
    objects.live.push(weak);
    JOINED.fetch_add(1, Ordering::AcqRel);
}

/// Installs `hooks` to run around every fork, and the handlers (once).
pub fn install_with(hooks: Hooks) {
    {
        let mut all = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
        if !all.iter().any(|h| h.before as usize == hooks.before as usize && h.after as usize == hooks.after as usize) {
            all.push(hooks);
        }
    }
    install();
}

/// How many forks separate this process from the one that started the runtime: what was lent in
/// an earlier generation belongs to threads this process does not have.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Installs the handlers (the first call; later ones do nothing).
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: three functions of the right type that live as long as the process; they run on
        // the forking thread and take and give back only the runtime's own locks.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            // Only ENOMEM: a child of a fork may then hang as upstream's never does; say so once.
            eprintln!("tvm_runtime: pthread_atfork failed ({rc}): a forked child may not run models");
        }
    });
}

/// What the forking thread holds from `prepare` to `parent` or `child`: the guards, then the
/// objects they borrow from (dropped in that order).
struct Holding {
    guards: Vec<Held<'static>>,
    /// Kept alive for the guards, never read.
    #[allow(dead_code)]
    objects: Vec<Arc<dyn ForkLock>>,
    /// Locks left busy when the patience ran out.
    missed: usize,
}

impl Drop for Holding {
    fn drop(&mut self) {
        // Every guard before the object it borrows from.
        self.guards.clear();
    }
}

thread_local! {
    static HOLDING: RefCell<Option<Holding>> = const { RefCell::new(None) };
}

fn hooks() -> Vec<Hooks> {
    HOOKS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Takes every lock registered (and the registries' own, so no object joins while they are
/// held), or, after `patience`, those that are free then.
fn hold_all(patience: Duration) -> Holding {
    let deadline = Instant::now() + patience;
    loop {
        let joined = JOINED.load(Ordering::Acquire);
        let statics = STATICS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let objects: Vec<Arc<dyn ForkLock>> =
            OBJECTS.lock().unwrap_or_else(|e| e.into_inner()).live.iter().filter_map(Weak::upgrade).collect();
        let registries = [&STATICS as &'static dyn ForkLock, &OBJECTS, &HOOKS];
        let locks: Vec<&'static dyn ForkLock> = registries
            .into_iter()
            .chain(statics.iter().copied())
            .chain(objects.iter().map(|o| -> &'static dyn ForkLock {
                // SAFETY: `objects` keeps the object alive, and `Holding` drops it only after
                // every guard borrowed from it (as does the retry below, which drops the guards
                // first).
                unsafe { &*Arc::as_ptr(o) }
            }))
            .collect();
        let mut guards = Vec::with_capacity(locks.len());
        let busy = locks.iter().find(|l| match l.try_hold() {
            Some(g) => {
                guards.push(g);
                false
            }
            None => true,
        });
        match busy {
            None if JOINED.load(Ordering::Acquire) == joined => return Holding { guards, objects, missed: 0 },
            // An object joined after the lists were read: read them again.
            None => {}
            Some(_) if Instant::now() >= deadline => {
                // Those that are free now; a child may find the others held.
                guards.extend(locks.iter().skip(guards.len() + 1).filter_map(|l| l.try_hold()));
                let missed = locks.len() - guards.len();
                return Holding { guards, objects, missed };
            }
            Some(busy) => {
                drop(guards);
                // Holding nothing, wait for the busy one alone (its holder may want one let go).
                wait_until(*busy, deadline);
            }
        }
    }
}

/// Waits for `lock` to be free, or for `deadline`. Never blocking on it: the forking thread may
/// hold it itself (a fork from a callback inside a run), which would block for ever.
fn wait_until(lock: &dyn ForkLock, deadline: Instant) {
    // Short holds (a lookup) end within a few yields; a run in flight, later.
    wait_for(deadline, Duration::from_micros(100), || lock.try_hold().is_some());
}

fn warn_once(busy: usize) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "tvm_runtime: fork() waited {PATIENCE:?} for {busy} runtime lock(s) still held (by the forking thread \
             itself, or across a callback that waits for it?); the child may hang if it uses what they guard"
        );
    }
}

extern "C" fn prepare() {
    let deadline = Instant::now() + PATIENCE;
    close_gate(deadline);
    for h in hooks() {
        (h.before)();
    }
    let holding = hold_all(deadline.saturating_duration_since(Instant::now()));
    if holding.missed > 0 {
        warn_once(holding.missed);
    }
    HOLDING.with(|h| *h.borrow_mut() = Some(holding));
}

extern "C" fn parent() {
    release();
    open_gate(false);
    for h in hooks() {
        (h.after)(false);
    }
}

extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    release();
    open_gate(true);
    for h in hooks() {
        (h.after)(true);
    }
}

fn release() {
    drop(HOLDING.with(|h| h.borrow_mut().take()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes every lock as a fork would, for `patience`: how many it left busy.
    fn hold_for_test(patience: Duration) -> usize {
        hold_all(patience).missed
    }

    /// One test at a time takes every lock (each holds some of its own for a while).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    #[test]
    fn every_lock_is_taken_and_let_go() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        static A: Mutex<u32> = Mutex::new(0);
        guard_static(&A);
        let b = Arc::new(Mutex::new(0u32));
        guard(&b);
        let holding = hold_all(PATIENCE);
        assert_eq!(holding.missed, 0);
        // Held, so a child finds them whole: no one else can take them now.
        assert!(A.try_lock().is_err() && b.try_lock().is_err());
        drop(holding);
        // Let go: both free again.
        assert!(A.try_lock().is_ok() && b.try_lock().is_ok());
    }

    #[test]
    fn a_lock_held_for_ever_is_waited_for_no_longer_than_the_patience() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let c = Arc::new(Mutex::new(0u32));
        guard(&c);
        let kept = c.lock().unwrap();
        // On another thread: this one holds C, as a run that never ends would.
        let start = Instant::now();
        let missed = std::thread::spawn(|| hold_for_test(Duration::from_millis(200))).join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(missed >= 1, "C is held by the test thread");
        drop(kept);
    }

    #[test]
    fn a_lock_the_forking_thread_holds_itself_is_not_waited_for_for_ever() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // A fork from a callback inside a run: the run's lock is the forking thread's own.
        let own = Arc::new(Mutex::new(0u32));
        guard(&own);
        let held = own.lock().unwrap();
        assert!(hold_for_test(Duration::from_millis(100)) >= 1);
        drop(held);
    }

    #[test]
    fn a_holder_that_wants_another_lock_is_not_deadlocked() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // D's holder then wants E: a fork that held E while waiting for D would never end (E is
        // registered first, so it is tried first).
        let e = Arc::new(Mutex::new(0u32));
        let d = Arc::new(Mutex::new(0u32));
        guard(&e);
        guard(&d);
        let held_d = d.lock().unwrap();
        let forker = std::thread::spawn(|| {
            let start = Instant::now();
            let missed = hold_for_test(PATIENCE);
            (missed, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        *e.lock().unwrap() += 1; // waits for ever if the forker holds E while waiting for D
        drop(held_d);
        let (missed, took) = forker.join().unwrap();
        assert_eq!(missed, 0);
        assert!(took < PATIENCE, "the forker waited out its patience: {took:?}");
    }

    #[test]
    fn dead_objects_are_pruned() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..1000 {
            guard(&Arc::new(Mutex::new(())));
        }
        let n = OBJECTS.lock().unwrap().live.len();
        assert!(n < 200, "{n} entries for objects that are gone");
    }
}
