//! OpenCL: the library opened at first use, platforms and devices discovered as upstream (GPU
//! devices of every platform, else CPU devices), one context per platform and one in-order queue
//! per device, shared by all threads, and streams (queues of their own, `streams`) a thread may
//! make current. `DLTensor.data` of an OpenCL tensor is the address of a
//! [`Descriptor`] whose first field is the `cl_mem` (upstream's layout: hosts and kernels' argument
//! code read it there).

mod discovery;
mod images;
pub mod kernels;
mod program_cache;
mod programs;
pub use images::{alloc_scratch, free_scratch};
pub use program_cache::set_dir as set_program_cache;
mod streams;
pub mod sys;

use super::{attr, Attr, DeviceApi, Place};
use crate::backend::fork;
use crate::error::{Error, Result};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use sys::{check, Api, ClUint, Mem};

/// Upstream's `cl::BufferDescriptor`: 24 bytes, the buffer at offset 0.
#[repr(C)]
pub struct Descriptor {
    pub buffer: Mem,
    pub host_ptr: *mut u8,
    /// 0: a 1-D buffer; 1-3: an image in a texture scope (`texture::Texture::layout`).
    pub layout: i32,
}

const _: () = assert!(std::mem::size_of::<Descriptor>() == 24);

/// One OpenCL device in use.
struct Device {
    id: sys::DeviceId,
    context: sys::Context,
    queue: sys::Queue,
    name: String,
    /// CL_DEVICE_VERSION, "OpenCL <major.minor> ...".
    version: String,
    /// CL_DRIVER_VERSION: a driver update may change what a program binary means.
    driver: String,
    /// Byte alignment of sub-buffer origins (CL_DEVICE_MEM_BASE_ADDR_ALIGN is in bits).
    base_align: usize,
    /// Kernel scratch buffers, reused by size (a fused operator asks for the same sizes every run).
    workspaces: Mutex<Vec<Workspace>>,
}

/// The OpenCL state of the process: made once, never torn down (queues and contexts live as long
/// as the loaded library, as upstream's).
pub struct State {
    pub(crate) api: Api,
    devices: Vec<Device>,
}

// SAFETY: OpenCL objects are thread-safe, but for `clSetKernelArg` on one kernel object, which
// `module` serialises; the workspace lists are behind mutexes.
unsafe impl Send for State {}
// SAFETY: as above.
unsafe impl Sync for State {}

static STATE: OnceLock<State> = OnceLock::new();
/// Serialises attempts at initialising (a failed one is tried again at the next use: a device
/// short of resources now may not be later).
static INIT: Mutex<()> = Mutex::new(());

thread_local! {
    /// The calling thread's current OpenCL device (`__tvm_set_device`).
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

/// The fork generation OpenCL was set up in (see [`in_this_process`]).
static SET_UP_IN: AtomicU64 = AtomicU64::new(0);

/// The OpenCL state, initialised on first use; an error when OpenCL cannot be opened or set up
/// (tried again at the next call).
pub fn state() -> Result<&'static State> {
    if let Some(s) = STATE.get() {
        return in_this_process(s);
    }
    // A fork while another thread sets OpenCL up waits for it (a child would wait for ever).
    fork::guard_static(&INIT);
    let _one_at_a_time = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = STATE.get() {
        return in_this_process(s);
    }
    let s = State::init()?;
    SET_UP_IN.store(fork::generation(), Ordering::Release);
    Ok(STATE.get_or_init(|| s))
}

/// `s`, unless it was set up before this process was forked: the driver's threads (pocl's, a GPU
/// driver's) are not in the child, whose first command would wait for them for ever.
fn in_this_process(s: &'static State) -> Result<&'static State> {
    if SET_UP_IN.load(Ordering::Acquire) != fork::generation() {
        return Err(Error::tvm(
            "OpenCL was set up before this process was forked, and a forked child cannot use it (the driver's \
             threads are not in the child): use OpenCL only after the fork, or start the process anew \
             (multiprocessing's \"spawn\")",
        ));
    }
    Ok(s)
}

/// The calling thread's current device.
pub fn current_device() -> i32 {
    CURRENT.with(Cell::get)
}

fn info_bytes(f: impl Fn(usize, *mut c_void, *mut usize) -> sys::ClInt, call: &str) -> Result<Vec<u8>> {
    let mut n = 0usize;
    check(f(0, std::ptr::null_mut(), &mut n), call)?;
    let mut buf = vec![0u8; n];
    check(f(n, buf.as_mut_ptr().cast(), std::ptr::null_mut()), call)?;
    Ok(buf)
}

fn info_string(bytes: Vec<u8>) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl State {
    fn device(&self, id: i32) -> Result<&Device> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or_else(|| Error::value(format!("Invalid device id {id}: OpenCL has {} device(s)", self.devices.len())))
    }

    /// What a program binary of device `id` is tied to (the program cache's key).
    pub(crate) fn program_key(&self, id: i32) -> Result<String> {
        let d = self.device(id)?;
        Ok(format!("device: {}\ndevice version: {}\ndriver: {}", d.name, d.version, d.driver))
    }

    /// The queue the calling thread's work for device `id` goes on: its current stream, else the
    /// device's own.
    pub(crate) fn queue(&self, id: i32) -> Result<streams::QueueRef> {
        Ok(streams::current(id, self.device(id)?.queue))
    }

    pub(crate) fn context_and_device(&self, id: i32) -> Result<(sys::Context, sys::DeviceId)> {
        let d = self.device(id)?;
        Ok((d.context, d.id))
    }

    fn device_info<T: Default + Copy>(&self, id: i32, param: ClUint) -> Result<T> {
        let d = self.device(id)?;
        let mut v = T::default();
        let out = (&mut v as *mut T).cast();
        // SAFETY: a fixed-size query into a value of that size.
        let rc =
            unsafe { (self.api.clGetDeviceInfo)(d.id, param, std::mem::size_of::<T>(), out, std::ptr::null_mut()) };
        check(rc, "clGetDeviceInfo")?;
        Ok(v)
    }

    fn create_buffer(&self, id: i32, nbytes: usize) -> Result<Mem> {
        let d = self.device(id)?;
        let mut rc = 0;
        // SAFETY: a device buffer with no host pointer.
        let mem = unsafe {
            (self.api.clCreateBuffer)(d.context, sys::CL_MEM_READ_WRITE, nbytes.max(1), std::ptr::null_mut(), &mut rc)
        };
        check(rc, "clCreateBuffer").map_err(|e| e.context(format!("allocating {nbytes} bytes on opencl({id})")))?;
        if nbytes > 0 {
            let zero = 0u8;
            let queue = self.queue(id)?;
            // SAFETY: fills the buffer just made; the pattern is copied at enqueue.
            let rc = unsafe {
                (self.api.clEnqueueFillBuffer)(
                    *queue,
                    mem,
                    (&zero as *const u8).cast(),
                    1,
                    0,
                    nbytes,
                    0,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            if let Err(e) = check(rc, "clEnqueueFillBuffer").and_then(|_| self.settle(&queue)) {
                // SAFETY: made above, not handed out.
                unsafe { (self.api.clReleaseMemObject)(mem) };
                return Err(e);
            }
        }
        Ok(mem)
    }

    /// The queue a copy between devices `from` and `to` goes on: the destination's (the calling
    /// thread's stream of it), as upstream; devices of different platforms share no memory.
    fn copy_queue(&self, from: i32, to: i32) -> Result<streams::QueueRef> {
        if self.device(from)?.context != self.device(to)?.context {
            return Err(Error::value(format!(
                "cannot copy between opencl({from}) and opencl({to}): they belong to different platforms"
            )));
        }
        self.queue(to)
    }

    /// Waits for `queue` when it is a stream, or while streams exist (see `streams::any`). A
    /// stream's work is waited for even when another thread has just freed the last stream: the
    /// caller's next command may go on the device's own queue, which does not wait for it.
    fn settle(&self, queue: &streams::QueueRef) -> Result<()> {
        if !queue.is_stream() && !streams::any() {
            return Ok(());
        }
        // SAFETY: a live queue (held).
        check(unsafe { (self.api.clFinish)(**queue) }, "clFinish")
    }
}

/// Boxes a descriptor for `mem`: the handle `DLTensor.data` holds.
fn descriptor(mem: Mem) -> *mut c_void {
    descriptor_with(mem, 0)
}

/// Boxes a descriptor for `mem` with a layout code (an image's texture scope).
fn descriptor_with(mem: Mem, layout: i32) -> *mut c_void {
    Box::into_raw(Box::new(Descriptor { buffer: mem, host_ptr: std::ptr::null_mut(), layout })).cast()
}

/// The buffer a handle's descriptor holds.
///
/// # Safety
/// `data` is an OpenCL tensor's data: a live descriptor.
unsafe fn buffer_of(data: *mut c_void) -> Result<Mem> {
    if data.is_null() {
        return Err(Error::value("an OpenCL tensor with null data"));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { (*data.cast::<Descriptor>()).buffer })
}

/// The OpenCL device API.
pub struct OpenCl;

pub fn api() -> &'static OpenCl {
    &OpenCl
}

impl DeviceApi for OpenCl {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn count(&self) -> Result<usize> {
        Ok(state()?.devices.len())
    }

    fn attr(&self, id: i32, kind: i32) -> Result<Option<Attr>> {
        if kind == attr::EXIST {
            let n = state().map_or(0, |s| s.devices.len());
            return Ok(Some(Attr::Int(i64::from(usize::try_from(id).is_ok_and(|i| i < n)))));
        }
        let s = state()?;
        let d = s.device(id)?;
        let int = |v: u64| Ok(Some(Attr::Int(v as i64)));
        match kind {
            attr::MAX_THREADS_PER_BLOCK => int(s.device_info::<usize>(id, sys::CL_DEVICE_MAX_WORK_GROUP_SIZE)? as u64),
            attr::WARP_SIZE => {
                let w = std::env::var("TVM_OPENCL_WARP_SIZE").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1);
                int(w)
            }
            attr::MAX_SHARED_MEMORY_PER_BLOCK => int(s.device_info::<u64>(id, sys::CL_DEVICE_LOCAL_MEM_SIZE)?),
            attr::COMPUTE_VERSION => {
                let v = d.version.strip_prefix("OpenCL ").unwrap_or(&d.version);
                Ok(Some(Attr::Str(v.split(' ').next().unwrap_or("").to_string())))
            }
            attr::DEVICE_NAME => Ok(Some(Attr::Str(d.name.clone()))),
            attr::MAX_CLOCK_RATE => {
                int(u64::from(s.device_info::<ClUint>(id, sys::CL_DEVICE_MAX_CLOCK_FREQUENCY)?) * 1000)
            }
            attr::MULTI_PROCESSOR_COUNT => {
                int(u64::from(s.device_info::<ClUint>(id, sys::CL_DEVICE_MAX_COMPUTE_UNITS)?))
            }
            attr::MAX_THREAD_DIMENSIONS => {
                let dims = s.device_info::<[usize; 3]>(id, sys::CL_DEVICE_MAX_WORK_ITEM_SIZES)?;
                Ok(Some(Attr::Str(format!("[{}, {}, {}]", dims[0], dims[1], dims[2]))))
            }
            attr::API_VERSION => int(120),
            attr::DRIVER_VERSION => {
                // SAFETY: a size query then a read into a buffer of that size.
                let v = info_bytes(
                    |n, p, r| unsafe { (s.api.clGetDeviceInfo)(d.id, sys::CL_DRIVER_VERSION, n, p, r) },
                    "clGetDeviceInfo",
                )?;
                Ok(Some(Attr::Str(info_string(v))))
            }
            attr::L2_CACHE_SIZE_BYTES => int(s.device_info::<u64>(id, sys::CL_DEVICE_GLOBAL_MEM_CACHE_SIZE)?),
            attr::TOTAL_GLOBAL_MEMORY => int(s.device_info::<u64>(id, sys::CL_DEVICE_GLOBAL_MEM_SIZE)?),
            _ => Ok(None),
        }
    }

    fn set_device(&self, id: i32) -> Result<()> {
        CURRENT.with(|c| c.set(id));
        Ok(())
    }

    fn alloc(&self, id: i32, nbytes: usize, _alignment: usize) -> Result<*mut c_void> {
        Ok(descriptor(state()?.create_buffer(id, nbytes)?))
    }

    fn alloc_texture(
        &self,
        id: i32,
        texture: crate::device::texture::Texture,
        shape: &[i64],
        dtype: crate::dlpack::DLDataType,
    ) -> Result<*mut c_void> {
        images::alloc(id, texture, shape, dtype)
    }

    unsafe fn free(&self, _id: i32, data: *mut c_void) -> Result<()> {
        if data.is_null() {
            return Ok(());
        }
        let s = state()?;
        // SAFETY: a descriptor boxed by `descriptor` (the caller's promise), freed once. Commands
        // queued on the buffer keep it alive in OpenCL until they finish.
        let d = unsafe { Box::from_raw(data.cast::<Descriptor>()) };
        // SAFETY: the buffer the descriptor owned.
        check(unsafe { (s.api.clReleaseMemObject)(d.buffer) }, "clReleaseMemObject")
    }

    fn region_alignment(&self, id: i32) -> Result<usize> {
        Ok(state()?.device(id)?.base_align)
    }

    unsafe fn region(&self, id: i32, data: *mut c_void, offset: usize, len: usize) -> Result<*mut c_void> {
        let s = state()?;
        s.device(id)?;
        // SAFETY: the caller's promise.
        if let Some((_, t)) = unsafe { images::image_of(data) } {
            return Err(Error::internal(format!("a region of an image ('{}') was asked for", t.scope())));
        }
        // SAFETY: the caller's promise.
        let parent = unsafe { buffer_of(data) }?;
        let region = sys::BufferRegion { origin: offset, size: len.max(1) };
        let mut rc = 0;
        // SAFETY: a region of a live buffer, which the caller says covers it.
        let mem = unsafe {
            (s.api.clCreateSubBuffer)(
                parent,
                sys::CL_MEM_READ_WRITE,
                sys::CL_BUFFER_CREATE_TYPE_REGION,
                (&region as *const sys::BufferRegion).cast(),
                &mut rc,
            )
        };
        check(rc, "clCreateSubBuffer").map_err(|e| e.context(format!("{len} bytes at offset {offset}")))?;
        Ok(descriptor(mem))
    }

    unsafe fn copy(&self, from: Place, to: Place, nbytes: usize) -> Result<()> {
        if nbytes == 0 {
            return Ok(());
        }
        let image = |p: &Place| {
            // SAFETY: a device side is a live descriptor (the caller's promise).
            !super::is_host(p.device) && unsafe { images::image_of(p.data) }.is_some()
        };
        if image(&from) || image(&to) {
            // SAFETY: the caller's promise.
            return unsafe { images::copy(from, to, nbytes) };
        }
        let s = state()?;
        let (from_host, to_host) = (super::is_host(from.device), super::is_host(to.device));
        match (from_host, to_host) {
            (true, false) => {
                let q = s.queue(to.device.device_id)?;
                // SAFETY: `to` is a live OpenCL tensor and `from` host memory of `nbytes` (the
                // caller's promise); blocking, so the host memory may change once it returns.
                let rc = unsafe {
                    (s.api.clEnqueueWriteBuffer)(
                        *q,
                        buffer_of(to.data)?,
                        1,
                        to.offset,
                        nbytes,
                        from.data.cast::<u8>().add(from.offset).cast(),
                        0,
                        std::ptr::null(),
                        std::ptr::null_mut(),
                    )
                };
                check(rc, "clEnqueueWriteBuffer")?;
                s.settle(&q)
            }
            (false, true) => {
                let q = s.queue(from.device.device_id)?;
                // SAFETY: as above, reading; blocking, so queued kernels finish first (in order).
                let rc = unsafe {
                    (s.api.clEnqueueReadBuffer)(
                        *q,
                        buffer_of(from.data)?,
                        1,
                        from.offset,
                        nbytes,
                        to.data.cast::<u8>().add(to.offset).cast(),
                        0,
                        std::ptr::null(),
                        std::ptr::null_mut(),
                    )
                };
                check(rc, "clEnqueueReadBuffer")
            }
            (false, false) => {
                let q = s.copy_queue(from.device.device_id, to.device.device_id)?;
                // SAFETY: two live buffers of one context (the caller's promise for the sizes);
                // queued on the destination's queue (the calling thread's stream of it), as
                // upstream.
                let rc = unsafe {
                    (s.api.clEnqueueCopyBuffer)(
                        *q,
                        buffer_of(from.data)?,
                        buffer_of(to.data)?,
                        from.offset,
                        to.offset,
                        nbytes,
                        0,
                        std::ptr::null(),
                        std::ptr::null_mut(),
                    )
                };
                check(rc, "clEnqueueCopyBuffer")?;
                s.settle(&q)
            }
            (true, true) => Err(Error::internal("Expect copy from/to OpenCL or between OpenCL")),
        }
    }

    fn release_idle(&self) {
        let Some(s) = STATE.get() else { return };
        images::release_idle_scratch();
        for (id, d) in s.devices.iter().enumerate() {
            let parked: Vec<Workspace> = {
                let mut pool = d.workspaces.lock().unwrap_or_else(|e| e.into_inner());
                let (idle, busy) = pool.drain(..).partition(|w| !w.in_use);
                *pool = busy;
                idle
            };
            for w in parked {
                // SAFETY: a buffer `alloc_workspace` made and no kernel holds (not in use), no
                // longer listed, so handed out to nobody.
                let _ = unsafe { self.free(id as i32, w.handle as *mut c_void) };
            }
        }
    }

    fn same_memory(&self, a: i32, b: i32) -> bool {
        // A buffer belongs to its context, valid on the queue of every device in it.
        state().is_ok_and(|s| matches!((s.device(a), s.device(b)), (Ok(x), Ok(y)) if x.context == y.context))
    }

    fn sync(&self, id: i32) -> Result<()> {
        let s = state()?;
        // SAFETY: a live queue.
        check(unsafe { (s.api.clFinish)(*s.queue(id)?) }, "clFinish")
    }

    fn create_stream(&self, id: i32) -> Result<*mut c_void> {
        streams::create(id)
    }

    fn free_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        streams::free(id, stream)
    }

    fn set_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        streams::set(id, stream)
    }

    fn current_stream(&self, id: i32) -> Result<*mut c_void> {
        state()?.device(id)?;
        Ok(streams::current_stream(id))
    }

    fn sync_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        let s = state()?;
        let queue = streams::queue_of(id, stream)?;
        // SAFETY: a live queue (the device's, or a stream checked to be one made here).
        check(unsafe { (s.api.clFinish)(*queue) }, "clFinish")
    }

    fn sync_stream_from_to(&self, id: i32, from: *mut c_void, to: *mut c_void) -> Result<()> {
        streams::order(id, from, to)
    }

    fn alloc_workspace(&self, id: i32, nbytes: usize) -> Result<*mut c_void> {
        let d = state()?.device(id)?;
        // Rounded as upstream's pool, so the sizes of one operator's calls match again.
        let size = nbytes.max(1).next_multiple_of(4096);
        // Reused on the queue it was last used on only: a kernel on another stream could still be
        // writing it.
        let queue = *state()?.queue(id)? as usize;
        let mut pool = d.workspaces.lock().unwrap_or_else(|e| e.into_inner());
        // The smallest idle buffer that holds the request, as upstream's pool: kernels of one run
        // ask for sizes in a nested order, and one buffer serves every smaller request after it.
        let idle = |w: &&mut Workspace| !w.in_use && w.queue == queue;
        if let Some(w) = pool.iter_mut().filter(idle).filter(|w| w.size >= size).min_by_key(|w| w.size) {
            w.in_use = true;
            return Ok(w.handle as *mut c_void);
        }
        // None holds it: the largest idle one is given back first, so the parked buffers follow the
        // largest requests instead of adding up.
        if let Some(i) =
            (0..pool.len()).filter(|&i| !pool[i].in_use && pool[i].queue == queue).max_by_key(|&i| pool[i].size)
        {
            let w = pool.swap_remove(i);
            // SAFETY: a buffer `alloc_workspace` made, idle (its kernels queued before on this queue,
            // which keeps it until they finish), no longer listed.
            unsafe { self.free(id, w.handle as *mut c_void) }?;
        }
        let handle = self.alloc(id, size, crate::host_memory::ALIGNMENT)? as usize;
        pool.push(Workspace { handle, size, in_use: true, queue });
        Ok(handle as *mut c_void)
    }

    fn free_workspace(&self, id: i32, data: *mut c_void) -> Result<()> {
        let d = state()?.device(id)?;
        let mut pool = d.workspaces.lock().unwrap_or_else(|e| e.into_inner());
        let i = pool
            .iter()
            .position(|w| w.in_use && w.handle == data as usize)
            .ok_or_else(|| Error::value("trying to free an OpenCL workspace that was not allocated"))?;
        pool[i].in_use = false;
        // Keep a few parked for the next run; release the rest.
        if pool.iter().filter(|w| !w.in_use).count() > MAX_PARKED_WORKSPACES {
            let w = pool.swap_remove(i);
            // SAFETY: a buffer `alloc_workspace` made, no longer listed, so handed out to nobody.
            unsafe { self.free(id, w.handle as *mut c_void) }?;
        }
        Ok(())
    }
}

/// Scratch buffers parked per device for reuse.
const MAX_PARKED_WORKSPACES: usize = 16;

/// A kernel scratch buffer of a device's pool.
struct Workspace {
    handle: usize,
    size: usize,
    in_use: bool,
    /// The queue (stream) it was handed out on.
    queue: usize,
}
