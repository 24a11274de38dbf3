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
use std::sync::Mutex;
use sys::check;

/// The queues `create` made and `free` has not released: (device id, queue).
static MADE: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());
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

fn made() -> std::sync::MutexGuard<'static, Vec<(i32, usize)>> {
    MADE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new stream on device `id`.
pub(super) fn create(id: i32) -> Result<*mut c_void> {
    let s = state()?;
    let (context, device) = s.context_and_device(id)?;
    let mut rc = 0;
    // SAFETY: a live context and one of its devices; in order, no properties (as the device's own).
    let queue = unsafe { (s.api.clCreateCommandQueue)(context, device, 0, &mut rc) };
    check(rc, "clCreateCommandQueue")?;
    made().push((id, queue as usize));
    LIVE.fetch_add(1, Ordering::AcqRel);
    Ok(queue.cast())
}

/// The queue `stream` names on device `id`: the calling thread's current one for NULL.
pub(super) fn queue_of(id: i32, stream: *mut c_void) -> Result<sys::Queue> {
    if stream.is_null() {
        return state()?.queue(id);
    }
    if made().contains(&(id, stream as usize)) {
        Ok(stream.cast())
    } else {
        Err(Error::value(format!(
            "{stream:?} is not a stream of OpenCL device {id} (made by TVMStreamCreate, not freed)"
        )))
    }
}

/// Waits for the work on `stream`, then releases it; a thread that has it current goes back to
/// the device's own queue.
pub(super) fn free(id: i32, stream: *mut c_void) -> Result<()> {
    if stream.is_null() {
        return Ok(());
    }
    let queue = queue_of(id, stream)?;
    made().retain(|&m| m != (id, stream as usize));
    LIVE.fetch_sub(1, Ordering::AcqRel);
    CURRENT.with(|c| c.borrow_mut().retain(|&(d, q)| (d, q) != (id, stream as usize)));
    let s = state()?;
    // SAFETY: a queue made by `create`, no longer listed, so handed to nobody after this.
    unsafe {
        let finished = check((s.api.clFinish)(queue), "clFinish");
        check((s.api.clReleaseCommandQueue)(queue), "clReleaseCommandQueue")?;
        finished
    }
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

/// The queue the calling thread's work on device `id` goes on: its current stream, else
/// `default`. A current stream another thread freed since is dropped here (the work goes on the
/// device's own queue), never passed to the driver.
pub(super) fn current(id: i32, default: sys::Queue) -> sys::Queue {
    let stream = CURRENT.with(|c| c.borrow().iter().find(|&&(d, _)| d == id).map(|&(_, q)| q));
    match stream {
        None => default,
        Some(q) if made().contains(&(id, q)) => q as sys::Queue,
        Some(q) => {
            CURRENT.with(|c| c.borrow_mut().retain(|&m| m != (id, q)));
            default
        }
    }
}

/// The stream the calling thread made current on device `id` (NULL: the device's own queue).
pub(super) fn current_stream(id: i32) -> *mut c_void {
    let default = std::ptr::null_mut();
    let q = current(id, default);
    q.cast()
}

/// Orders `to` after `from`: what is queued on `to` from now on starts after everything queued
/// on `from` so far (by waiting for `from`: simple, and what TVM's hosts do between copies and
/// runs).
pub(super) fn order(id: i32, from: *mut c_void, to: *mut c_void) -> Result<()> {
    let (a, b) = (queue_of(id, from)?, queue_of(id, to)?);
    if a == b {
        return Ok(());
    }
    let s = state()?;
    // SAFETY: a live queue (checked above).
    check(unsafe { (s.api.clFinish)(a) }, "clFinish")
}
