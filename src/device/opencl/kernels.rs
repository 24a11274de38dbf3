//! OpenCL kernels on the devices: each kernel's program built from OpenCL C (or taken from the
//! program cache, or from a driver's binary a host installs), its kernel object per device, and
//! launches. What the `opencl` module kind (`library::opencl`) asks of the device; this layer
//! knows nothing of modules or packed calls. A kernel's launches are serialised by a lock of its
//! own (`clSetKernelArg` is not thread-safe on one kernel object).

use super::sys::{self, check};
use super::{buffer_of, current_device, program_cache, programs, state};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

/// A built kernel on one device.
struct Built {
    program: sys::Program,
    kernel: sys::Kernel,
    /// The program cache's entry to write after the first launch: drivers compile part of a
    /// kernel at its launch (pocl its work-group functions), and a binary taken after a launch
    /// holds that too, so the next process compiles nothing.
    unstored: Option<program_cache::Entry>,
}

impl Built {
    /// Gives the objects back to the driver; the caller owns `self` (installed nowhere, or taken
    /// out of its slot with no launch using it).
    fn release(self) {
        let Ok(s) = state() else { return };
        // SAFETY: objects this module created, released once (`self` is consumed).
        unsafe {
            (s.api.clReleaseKernel)(self.kernel);
            (s.api.clReleaseProgram)(self.program);
        }
    }
}

/// The kernels of one module, built per device on first use.
pub struct Kernels {
    fmt: String,
    /// Per kernel: its own translation unit, or (modules from before TVM split sources per kernel)
    /// the whole source, built once per kernel.
    sources: HashMap<String, Arc<CString>>,
    /// Per kernel and device, built on first use; the lock also serialises its launches.
    built: HashMap<String, Mutex<Vec<Option<Built>>>>,
}

// SAFETY: the OpenCL objects are used under the per-kernel locks (argument setting) or are
// thread-safe (programs, queues).
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl Drop for Kernels {
    fn drop(&mut self) {
        for slot in self.built.values_mut() {
            // No launch is running: the kernels are being dropped, so nothing can launch them.
            slot.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..).flatten().for_each(Built::release);
        }
    }
}

/// One argument of a launch, as `clSetKernelArg` takes it.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg {
    /// A null buffer.
    Null,
    /// An OpenCL tensor's data handle (the address of its [`super::Descriptor`]).
    Buffer(*mut c_void),
    I64(i64),
    I32(i32),
    U32(u32),
    F32(f32),
    F64(f64),
}

impl Kernels {
    /// Kernels named `names`, of source format `fmt` ("cl": OpenCL C, the one served), with their
    /// sources (empty for another format: its kernels fail to build, saying so).
    pub fn new(fmt: String, sources: HashMap<String, Arc<CString>>, names: impl Iterator<Item = String>) -> Kernels {
        let built = names.map(|k| (k, Mutex::new(Vec::new()))).collect();
        Kernels { fmt, sources, built }
    }

    /// Launches kernel `name` on the calling thread's device and its current queue, with `args`
    /// and work sizes `global` and `local` (one entry per dimension).
    ///
    /// # Safety
    /// Every [`KernelArg::Buffer`] is the data handle of a live OpenCL tensor of that device.
    pub unsafe fn launch(&self, name: &str, args: &[KernelArg], global: &[usize], local: &[usize]) -> Result<()> {
        let dev = current_device();
        let s = state()?;
        let queue = s.queue(dev)?;
        self.with_kernel(name, dev, |built| {
            let kernel = built.kernel;
            for (i, arg) in args.iter().enumerate() {
                let set = |size: usize, p: *const c_void| {
                    // SAFETY: `p` addresses `size` bytes of the argument; the kernel is locked.
                    check(unsafe { (s.api.clSetKernelArg)(kernel, i as u32, size, p) }, "clSetKernelArg")
                        .map_err(|e| e.context(format!("kernel {name} argument {i}")))
                };
                match *arg {
                    KernelArg::Null => {
                        let mem: sys::Mem = std::ptr::null_mut();
                        set(std::mem::size_of::<sys::Mem>(), (&mem as *const sys::Mem).cast())?
                    }
                    KernelArg::Buffer(data) => {
                        // SAFETY: the caller's promise: a live descriptor.
                        let mem = unsafe { buffer_of(data)? };
                        set(std::mem::size_of::<sys::Mem>(), (&mem as *const sys::Mem).cast())?
                    }
                    KernelArg::I64(x) => set(8, (&x as *const i64).cast())?,
                    KernelArg::I32(x) => set(4, (&x as *const i32).cast())?,
                    KernelArg::U32(x) => set(4, (&x as *const u32).cast())?,
                    KernelArg::F32(x) => set(4, (&x as *const f32).cast())?,
                    KernelArg::F64(x) => set(8, (&x as *const f64).cast())?,
                }
            }
            // SAFETY: a kernel with every argument set, sizes of `global.len()` entries.
            let rc = unsafe {
                (s.api.clEnqueueNDRangeKernel)(
                    *queue,
                    kernel,
                    global.len() as u32,
                    std::ptr::null(),
                    global.as_ptr(),
                    local.as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            };
            check(rc, "clEnqueueNDRangeKernel").map_err(|e| e.context(format!("kernel {name}")))?;
            if let Some(entry) = built.unstored.take() {
                // Once per kernel and process, and only when the cache missed: the launch waited
                // for, then the program as the driver now holds it.
                let (_, device) = s.context_and_device(dev)?;
                // SAFETY: this device's queue.
                if check(unsafe { (s.api.clFinish)(*queue) }, "clFinish").is_ok() {
                    if let Ok(binary) = programs::binary_of(s, built.program, device) {
                        entry.store(&binary);
                    }
                }
            }
            Ok(())
        })
    }

    /// Kernel `name` built for device `dev` (on first use), under its lock.
    fn with_kernel<T>(&self, name: &str, dev: i32, f: impl FnOnce(&mut Built) -> Result<T>) -> Result<T> {
        let mut slots = self.slot(name)?.lock().unwrap_or_else(|e| e.into_inner());
        let built = on_device(&mut slots, device_index(dev)?);
        if built.is_none() {
            *built = Some(self.build_cached(name, dev)?);
        }
        f(built.as_mut().expect("built above"))
    }

    /// Kernel `name` on device `dev` from the program cache when it is on and holds this source's
    /// program for this device, else from source (stored in the cache for the next process).
    fn build_cached(&self, name: &str, dev: i32) -> Result<Built> {
        let s = state()?;
        let entry = self
            .sources
            .get(name)
            .and_then(|src| program_cache::Entry::new(&s.program_key(dev).ok()?, name, src.as_bytes()));
        let Some(entry) = entry else { return self.build(name, dev, Origin::Source) };
        // An entry the driver refuses (another driver's, or damaged in a way the checksum missed)
        // is rebuilt from source and replaced.
        if let Some(built) = entry.load().and_then(|binary| self.build(name, dev, Origin::Binary(&binary)).ok()) {
            return Ok(built);
        }
        let mut built = self.build(name, dev, Origin::Source)?;
        built.unstored = Some(entry);
        Ok(built)
    }

    fn slot(&self, name: &str) -> Result<&Mutex<Vec<Option<Built>>>> {
        self.built.get(name).ok_or_else(|| Error::internal(format!("no kernel {name}")))
    }

    /// `opencl.GetPreCompiledPrograms`: every kernel's program for device `dev` (built now where
    /// it was not yet), by kernel name.
    pub fn precompiled(&self, dev: i32) -> Result<Vec<u8>> {
        let s = state()?;
        let (_, device) = s.context_and_device(dev)?;
        let mut names: Vec<&str> = self.built.keys().map(String::as_str).collect();
        names.sort_unstable();
        let binaries = names
            .iter()
            .map(|name| self.with_kernel(name, dev, |b| programs::binary_of(s, b.program, device)))
            .collect::<Result<Vec<_>>>()?;
        Ok(programs::encode(names.into_iter().zip(binaries.iter().map(Vec::as_slice))))
    }

    /// `opencl.SetPreCompiledPrograms`: the blob's programs become the kernels of device `dev`
    /// that are not built yet. All or nothing: every program is made and built before any is
    /// installed, so a truncated blob, a kernel this module lacks or a binary of another device
    /// leaves the module as it was.
    pub fn install_precompiled(&self, dev: i32, blob: &[u8]) -> Result<()> {
        let entries = programs::decode(blob)?;
        if let Some((name, _)) = entries.iter().find(|(name, _)| !self.built.contains_key(*name)) {
            return Err(Error::value(format!(
                "pre-compiled OpenCL programs: kernel '{name}' is not a function of this module (programs of another \
                 model?)"
            )));
        }
        let i = device_index(dev)?;
        let mut made = Vec::with_capacity(entries.len());
        for (name, binary) in entries {
            match self.build(name, dev, Origin::Binary(binary)) {
                Ok(b) => made.push((name, b)),
                Err(e) => {
                    made.into_iter().for_each(|(_, b)| b.release());
                    return Err(e.context("pre-compiled OpenCL programs"));
                }
            }
        }
        for (name, b) in made {
            let mut slots = self.slot(name)?.lock().unwrap_or_else(|e| e.into_inner());
            match on_device(&mut slots, i) {
                // Built already (a launch, or the same kernel twice in the blob): kept, as upstream.
                Some(_) => b.release(),
                built @ None => *built = Some(b),
            }
        }
        Ok(())
    }

    fn build(&self, name: &str, dev: i32, from: Origin<'_>) -> Result<Built> {
        let s = state()?;
        let (context, device) = s.context_and_device(dev)?;
        let program = match from {
            Origin::Source => {
                let source = self.sources.get(name).ok_or_else(|| {
                    Error::value(format!(
                        "Unknown OpenCL format '{}' (kernel {name}): only 'cl' source is served",
                        self.fmt
                    ))
                })?;
                let mut rc = 0;
                let ptr = source.as_ptr();
                let len = source.as_bytes().len();
                // SAFETY: one NUL-terminated source string of `len` bytes.
                let program = unsafe { (s.api.clCreateProgramWithSource)(context, 1, &ptr, &len, &mut rc) };
                check(rc, "clCreateProgramWithSource")?;
                program
            }
            Origin::Binary(binary) => {
                programs::from_binary(s, context, device, binary).map_err(|e| e.context(format!("kernel {name}")))?
            }
        };
        let release = |e: Error| {
            // SAFETY: the program made above, not handed out.
            unsafe { (s.api.clReleaseProgram)(program) };
            e
        };
        // SAFETY: a program of this device's context; no options, no callback.
        let rc = unsafe {
            (s.api.clBuildProgram)(program, 1, &device, std::ptr::null(), std::ptr::null(), std::ptr::null_mut())
        };
        if rc != sys::CL_SUCCESS {
            // SAFETY: a size query then a read into a buffer of that size.
            let log = super::info_bytes(
                |n, p, r| unsafe { (s.api.clGetProgramBuildInfo)(program, device, sys::CL_PROGRAM_BUILD_LOG, n, p, r) },
                "clGetProgramBuildInfo",
            )
            .map(super::info_string)
            .unwrap_or_default();
            return Err(release(Error::tvm(format!(
                "OpenCL build error for kernel {name} on opencl({dev}): {}\n{log}",
                sys::status_name(rc)
            ))));
        }
        let cname = CString::new(name).map_err(|_| release(Error::value("kernel name holds a NUL byte")))?;
        let mut rc = 0;
        // SAFETY: a built program and a NUL-terminated name.
        let kernel = unsafe { (s.api.clCreateKernel)(program, cname.as_ptr(), &mut rc) };
        check(rc, "clCreateKernel").map_err(|e| release(e.context(format!("kernel {name}"))))?;
        Ok(Built { program, kernel, unstored: None })
    }
}

/// Where a kernel's program comes from.
enum Origin<'a> {
    /// The module's OpenCL C.
    Source,
    /// A binary the driver gave out earlier (`opencl.SetPreCompiledPrograms`).
    Binary(&'a [u8]),
}

/// A kernel's place for device `i` among its per-device builds, made when first asked for.
fn on_device(slots: &mut Vec<Option<Built>>, i: usize) -> &mut Option<Built> {
    if slots.len() <= i {
        slots.resize_with(i + 1, || None);
    }
    &mut slots[i]
}

fn device_index(dev: i32) -> Result<usize> {
    usize::try_from(dev).map_err(|_| Error::value(format!("Invalid device id {dev}")))
}
