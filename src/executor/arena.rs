//! An activation arena several executors share when they never run at the same time (say the
//! batch-1 and batch-8 builds of a model, used in turn): one buffer sized for the largest, and a
//! guard that makes a run fail, instead of corrupting another's data, while one is in progress.

#![forbid(unsafe_code)]

use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::tensor::Buffer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Arena {
    device: DLDevice,
    state: Mutex<State>,
    running: AtomicBool,
}

struct State {
    buffer: Arc<Buffer>,
    /// Bumped whenever the buffer is replaced, so holders know to re-bind.
    generation: u64,
}

/// Held for the duration of one run; releases the arena when dropped.
pub struct RunGuard<'a>(&'a Arena);

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

impl Arena {
    /// An empty arena on `device`.
    pub fn new(device: DLDevice) -> Result<Arc<Arena>> {
        Ok(Arc::new(Arena {
            device,
            state: Mutex::new(State { buffer: Arc::new(Buffer::zeroed_on(device, 0)?), generation: 0 }),
            running: AtomicBool::new(false),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Grows the arena to at least `bytes`. Holders keep the old buffer until their next run.
    pub fn reserve(&self, bytes: usize) -> Result<()> {
        let mut st = self.state();
        if st.buffer.len() < bytes {
            st.buffer = Arc::new(Buffer::zeroed_on(self.device, bytes)?);
            st.generation += 1;
        }
        Ok(())
    }

    pub fn device(&self) -> DLDevice {
        self.device
    }

    pub fn current(&self) -> (Arc<Buffer>, u64) {
        let st = self.state();
        (st.buffer.clone(), st.generation)
    }

    pub fn len(&self) -> usize {
        self.state().buffer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Claims the arena for one run, or fails if another holder is running.
    pub fn try_acquire(&self) -> Result<RunGuard<'_>> {
        self.running
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| RunGuard(self))
            .map_err(|_| {
                Error::tvm("another executor sharing this activation arena is running; executors that share activations must run one at a time")
            })
    }
}
