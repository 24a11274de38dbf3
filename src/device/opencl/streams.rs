//! Streams on OpenCL: a stream is an in-order command queue of its own on the device
//! (`TVMStreamCreate`), made current for the calling thread by `TVMSetStream`. Everything this
//! library queues for a device (kernels, copies, fills) goes on the calling thread's current
//! stream, else on the device's own queue; waiting (`TVMSynchronize` with NULL, the device API's
//! `sync`) waits for that same queue. Work on two streams is unordered until the host orders it
//! (`TVMStreamStreamSynchronize`, or waiting for one before queueing on the other), as with CUDA's.
//!
//! Only queues made here are taken as streams: a handle that is not one (freed, or never made)
//! is an error, never a queue handed to the driver.

use super::{state, sys};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use sys::check;

/// A queue made by `create`, released when the last holder lets go of it: `free` unlists it, and
/// a thread that looked it up just before (and is queueing work on it) keeps it alive until its
/// call returns, so no queue is ever released under work being queued on it.
pub(super) struct Stream {
    id: i32,
    queue: sys::Queue,
}

// SAFETY: an OpenCL command queue may be used from any thread (the API is thread-safe for
// queues; only the release is ours to order, which the Arc does).
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(s) = state() {
            // SAFETY: a queue `create` made; the last reference to it goes now.
            unsafe {
                (s.api.clFinish)(self.queue);
                (s.api.clReleaseCommandQueue)(self.queue);
            }
        }
    }
}

/// A queue to put work on: the device's own, or a stream held alive for as long as this is.
pub(crate) struct QueueRef {
    queue: sys::Queue,
    stream: Option<Arc<Stream>>,
}

impl QueueRef {
    pub(super) fn device_own(queue: sys::Queue) -> QueueRef {
        QueueRef { queue, stream: None }
    }

    /// Whether this is a stream (not the device's own queue).
    pub(super) fn is_stream(&self) -> bool {
        self.stream.is_some()
    }
}

impl std::ops::Deref for QueueRef {
    type Target = sys::Queue;

    fn deref(&self) -> &sys::Queue {
        &self.queue
    }
}

/// The streams `create` made and `free` has not unlisted.
static MADE: Mutex<Vec<Arc<Stream>>> = Mutex::new(Vec::new());
/// How many there are (read without the lock on every copy).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any stream exists: then memory other threads may read (fills of new buffers, copies
/// into device memory) is complete before the call that queued it returns, since those threads'
/// work may be on other queues. With the devices' own queues alone, in-order queues order it.
pub(super) fn any() -> bool {
    LIVE.load(Ordering::Acquire) > 0
}

thread_local! {
    /// Per device id: the stream `set` made current on this thread.
    static CURRENT: RefCell<Vec<(i32, usize)>> = const { RefCell::new(Vec::new()) };
}

fn made() -> std::sync::MutexGuard<'static, Vec<Arc<Stream>>> {
    MADE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The listed stream `q` of device `id`, held.
fn listed(id: i32, q: usize) -> Option<Arc<Stream>> {
    made().iter().find(|m| m.id == id && m.queue as usize == q).cloned()
}

/// A new stream on device `id`.
pub(super) fn create(id: i32) -> Result<*mut c_void> {
    let s = state()?;
    let (context, device) = s.context_and_device(id)?;
    let mut rc = 0;
    // SAFETY: a live context and one of its devices; in order, no properties (as the device's own).
    let queue = unsafe { (s.api.clCreateCommandQueue)(context, device, 0, &mut rc) };
    check(rc, "clCreateCommandQueue")?;
    made().push(Arc::new(Stream { id, queue }));
    LIVE.fetch_add(1, Ordering::AcqRel);
    Ok(queue.cast())
}

fn not_a_stream(id: i32, stream: *mut c_void) -> Error {
    Error::value(format!("{stream:?} is not a stream of OpenCL device {id} (made by TVMStreamCreate, not freed)"))
}

/// The queue `stream` names on device `id`: the calling thread's current one for NULL.
pub(super) fn queue_of(id: i32, stream: *mut c_void) -> Result<QueueRef> {
    if stream.is_null() {
        return state()?.queue(id);
    }
    let held = listed(id, stream as usize).ok_or_else(|| not_a_stream(id, stream))?;
    Ok(QueueRef { queue: held.queue, stream: Some(held) })
}

/// Waits for the work on `stream`, then releases it (once whoever is queueing on it right now
/// is done); a thread that has it current goes back to the device's own queue.
pub(super) fn free(id: i32, stream: *mut c_void) -> Result<()> {
    if stream.is_null() {
        return Ok(());
    }
    // Unlisted under the lock: of two threads freeing one stream, one does, the other is told.
    let held = {
        let mut m = made();
        let i = m.iter().position(|s| s.id == id && std::ptr::eq(s.queue, stream));
        m.swap_remove(i.ok_or_else(|| not_a_stream(id, stream))?)
    };
    LIVE.fetch_sub(1, Ordering::AcqRel);
    CURRENT.with(|c| c.borrow_mut().retain(|&(d, q)| (d, q) != (id, stream as usize)));
    let s = state()?;
    // SAFETY: a live queue (held); released when the last holder drops it.
    check(unsafe { (s.api.clFinish)(held.queue) }, "clFinish")
}

/// Makes `stream` the calling thread's current stream on device `id` (NULL: the device's own).
pub(super) fn set(id: i32, stream: *mut c_void) -> Result<()> {
    if !stream.is_null() {
        queue_of(id, stream)?;
    }
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|&(d, _)| d != id);
        if !stream.is_null() {
            c.push((id, stream as usize));
        }
    });
    Ok(())
}

/// The queue the calling thread's work on device `id` goes on: its current stream (held), else
/// `default`. A current stream another thread freed since is dropped here (the work goes on the
/// device's own queue), never passed to the driver.
pub(super) fn current(id: i32, default: sys::Queue) -> QueueRef {
    let stream = CURRENT.with(|c| c.borrow().iter().find(|&&(d, _)| d == id).map(|&(_, q)| q));
    let Some(q) = stream else { return QueueRef::device_own(default) };
    match listed(id, q) {
        Some(held) => QueueRef { queue: held.queue, stream: Some(held) },
        None => {
            CURRENT.with(|c| c.borrow_mut().retain(|&m| m != (id, q)));
            QueueRef::device_own(default)
        }
    }
}

/// The stream the calling thread made current on device `id` (NULL: the device's own queue).
pub(super) fn current_stream(id: i32) -> *mut c_void {
    let q = current(id, std::ptr::null_mut());
    (*q).cast()
}

/// Orders `to` after `from`: what is queued on `to` from now on starts after everything queued
/// on `from` so far (by waiting for `from`: simple, and what TVM's hosts do between copies and
/// runs).
pub(super) fn order(id: i32, from: *mut c_void, to: *mut c_void) -> Result<()> {
    let (a, b) = (queue_of(id, from)?, queue_of(id, to)?);
    if *a == *b {
        return Ok(());
    }
    let s = state()?;
    // SAFETY: a live queue (held).
    check(unsafe { (s.api.clFinish)(*a) }, "clFinish")
}
