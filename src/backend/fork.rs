//! `fork()`: a child process has one thread, the one that forked, and a copy of everything else,
//! locks included. What the runtime holds that a child cannot use as it is gets put right here:
//!
//! - the thread pool's workers do not exist in the child: the pool is forgotten (never joined,
//!   which would wait for threads that are not there) and the next launch starts a new one;
//! - the pool's lock could be held by a launch on another thread at the moment of the fork, and
//!   would then stay held for ever in the child: the fork waits for that launch to end (the lock
//!   is taken before the fork and let go after it, in parent and child);
//! - whatever another thread held across the fork and gives back when it finishes (an activation
//!   arena lent to a run) is never given back in the child: holders compare [`generation`], which
//!   the child increments, to tell what was lent before the fork.
//!
//! The handlers are installed (once, with `pthread_atfork`) when the pool or an arena pool is
//! first made: before that there is nothing to put right. The pool hands its own hooks in
//! ([`install_with`]), so this module depends on nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// What to do before a fork, and after it (`true` in the child).
#[derive(Clone, Copy)]
pub struct Hooks {
    pub before: fn(),
    pub after: fn(bool),
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Installs the handlers with `hooks` run around every fork (the thread pool's; the first hooks
/// given stay).
pub fn install_with(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
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
        // SAFETY: three functions of the right type that live as long as the process; the hooks
        // take and give back only the thread pool's lock, in that order, on the forking thread.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            // Only ENOMEM: a child of a fork may then hang as upstream's never does; say so once.
            eprintln!("tvm_runtime: pthread_atfork failed ({rc}): a forked child may not run models");
        }
    });
}

extern "C" fn prepare() {
    if let Some(h) = HOOKS.get() {
        (h.before)();
    }
}

extern "C" fn parent() {
    if let Some(h) = HOOKS.get() {
        (h.after)(false);
    }
}

extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(h) = HOOKS.get() {
        (h.after)(true);
    }
}
