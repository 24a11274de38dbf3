//! The `opencl` module of `__tvm_dev_mblob`: OpenCL C source split per kernel, and each kernel's
//! argument types and launch tags. Loading touches no OpenCL API; a kernel's program is built on
//! its first call on each device, and its calls set arguments and enqueue under a lock of its own
//! (`clSetKernelArg` is not thread-safe on one kernel object).

use super::sys::{self, check};
use super::{buffer_of, current_device, program_cache, programs, state};
use crate::dlpack::{kDLFloat, kDLInt, kDLOpaqueHandle, kDLUInt, kTVMNullptr, kTVMOpaqueHandle, DLDataType};
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::stream::Reader;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

/// How a launch tag sets the work size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// `blockIdx.{x,y,z}`: work groups along an axis.
    Grid(usize),
    /// `threadIdx.{x,y,z}`: work items per group along an axis.
    Block(usize),
    /// `tir.use_dyn_shared_memory`: a size OpenCL ignores.
    DynShared,
}

fn parse_tag(tag: &str) -> Result<Tag> {
    let axis = |s: &str| match s {
        "x" => Ok(0),
        "y" => Ok(1),
        "z" => Ok(2),
        _ => Err(Error::value(format!("opencl module: unknown launch tag '{tag}'"))),
    };
    if let Some(a) = tag.strip_prefix("blockIdx.") {
        Ok(Tag::Grid(axis(a)?))
    } else if let Some(a) = tag.strip_prefix("threadIdx.") {
        Ok(Tag::Block(axis(a)?))
    } else if tag == "tir.use_dyn_shared_memory" {
        Ok(Tag::DynShared)
    } else {
        Err(Error::value(format!("opencl module: unknown launch tag '{tag}'")))
    }
}

/// How a kernel argument reaches `clSetKernelArg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArgKind {
    Buffer,
    I64,
    I32,
    U32,
    F32,
    F64,
}

fn arg_kind(t: DLDataType) -> Result<ArgKind> {
    Ok(match (t.code, t.bits, t.lanes) {
        (kDLOpaqueHandle, _, 1) => ArgKind::Buffer,
        (kDLInt, 64, 1) => ArgKind::I64,
        (kDLInt, 32, 1) => ArgKind::I32,
        (kDLUInt, 32, 1) => ArgKind::U32,
        (kDLFloat, 32, 1) => ArgKind::F32,
        (kDLFloat, 64, 1) => ArgKind::F64,
        _ => return Err(Error::value(format!("Cannot handle {t} as device function argument"))),
    })
}

/// A kernel as the module describes it.
struct KernelInfo {
    arg_types: Vec<DLDataType>,
    tags: Vec<String>,
}

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

struct Inner {
    fmt: String,
    /// Per kernel: its own translation unit, or (modules from before TVM split sources per kernel)
    /// the whole source, built once per kernel.
    sources: HashMap<String, Arc<CString>>,
    kernels: HashMap<String, KernelInfo>,
    /// Per kernel and device, built on first use; the lock also serialises its launches.
    built: HashMap<String, Mutex<Vec<Option<Built>>>>,
    source_text: String,
}

// SAFETY: the OpenCL objects are used under the per-kernel locks (argument setting) or are
// thread-safe (programs, queues).
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        for slot in self.built.values_mut() {
            // No launch is running: the module is being dropped, so no function of it is alive.
            slot.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..).flatten().for_each(Built::release);
        }
    }
}

/// The loaded `opencl` module.
pub struct OpenClModule {
    inner: Arc<Inner>,
}

/// Splits a per-kernel source on `// Function: <name>` lines; `None` when it has no delimiter.
fn split_source(source: &str) -> Option<HashMap<String, String>> {
    const DELIM: &str = "// Function: ";
    let mut out = HashMap::new();
    let mut rest = source.find(DELIM).map(|i| &source[i..])?;
    while let Some(body) = rest.strip_prefix(DELIM) {
        let (name, after) = body.split_once('\n').unwrap_or((body, ""));
        let end = after.find(DELIM).unwrap_or(after.len());
        out.insert(name.trim().to_string(), after[..end].to_string());
        rest = &after[end..];
    }
    Some(out)
}

/// The blob's loader of `opencl` modules (the library layer finds it by type key).
pub const LOADERS: &[(&str, crate::module::Loader)] = &[("opencl", |r| Ok(Module::new(OpenClModule::load_binary(r)?)))];

impl OpenClModule {
    /// Reads the serialised module: str fmt, map of function infos, str source.
    pub fn load_binary(r: &mut Reader<'_>) -> Result<OpenClModule> {
        let fmt = r.string()?.to_string();
        let n = r.count(8)?;
        let mut kernels = HashMap::new();
        for _ in 0..n {
            let key = r.string()?.to_string();
            let _name = r.string()?;
            let k = r.count(4)?;
            let mut arg_types = Vec::with_capacity(k);
            for _ in 0..k {
                let (code, bits, lanes) = (r.u8()?, r.u8()?, r.u16()?);
                arg_types.push(DLDataType { code, bits, lanes });
            }
            let tags = r.strings()?.into_iter().map(str::to_string).collect::<Vec<_>>();
            for t in &tags {
                parse_tag(t)?;
            }
            kernels.insert(key, KernelInfo { arg_types, tags });
        }
        let source_text = r.string()?.to_string();
        OpenClModule::new(fmt, kernels, source_text)
    }

    /// A module from its serialised bytes (what `load_binary` reads from a module blob).
    pub fn from_bytes(bytes: &[u8]) -> Result<OpenClModule> {
        let mut r = Reader::new(bytes, "opencl module");
        let m = OpenClModule::load_binary(&mut r)?;
        if !r.is_at_end() {
            return Err(r.error("trailing bytes after the module"));
        }
        Ok(m)
    }

    fn new(fmt: String, kernels: HashMap<String, KernelInfo>, source_text: String) -> Result<OpenClModule> {
        let cstring =
            |s: &str| CString::new(s).map(Arc::new).map_err(|_| Error::value("opencl module: source holds a NUL byte"));
        let mut sources = HashMap::new();
        if fmt == "cl" {
            match split_source(&source_text) {
                Some(parts) => {
                    if parts.len() != kernels.len() {
                        return Err(Error::value(format!(
                            "opencl module: the number of parsed kernel sources ({}) does not match the number of \
                             kernel functions ({})",
                            parts.len(),
                            kernels.len()
                        )));
                    }
                    // Each function of the table needs its section (a module whose sections name
                    // other functions would otherwise fail at the first call, obscurely).
                    if let Some(missing) = kernels.keys().find(|k| !parts.contains_key(*k)) {
                        let mut sections: Vec<&str> = parts.keys().map(String::as_str).collect();
                        sections.sort_unstable();
                        return Err(Error::value(format!(
                            "opencl module: kernel '{missing}' has no '// Function: {missing}' section in the                              source (sections: {})",
                            sections.join(", ")
                        )));
                    }
                    for (name, src) in parts {
                        sources.insert(name, cstring(&src)?);
                    }
                }
                None => {
                    let whole = cstring(&source_text)?;
                    for name in kernels.keys() {
                        sources.insert(name.clone(), whole.clone());
                    }
                }
            }
        }
        let built = kernels.keys().map(|k| (k.clone(), Mutex::new(Vec::new()))).collect();
        Ok(OpenClModule { inner: Arc::new(Inner { fmt, sources, kernels, built, source_text }) })
    }
}

impl Inner {
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
    fn precompiled(&self, dev: i32) -> Result<Vec<u8>> {
        let s = state()?;
        let (_, device) = s.context_and_device(dev)?;
        let mut names: Vec<&str> = self.kernels.keys().map(String::as_str).collect();
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
    fn install_precompiled(&self, dev: i32, blob: &[u8]) -> Result<()> {
        let entries = programs::decode(blob)?;
        if let Some((name, _)) = entries.iter().find(|(name, _)| !self.kernels.contains_key(*name)) {
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

/// A kernel's launch: arguments and work sizes from one packed call.
struct Launch {
    kinds: Vec<ArgKind>,
    tags: Vec<Tag>,
}

impl Launch {
    fn call(&self, inner: &Inner, name: &str, args: &Args<'_>) -> Result<RetValue> {
        let n = self.kinds.len();
        if args.len() != n + self.tags.len() {
            return Err(Error::value(format!(
                "kernel {name} takes {} arguments and {} launch extents, {} given",
                n,
                self.tags.len(),
                args.len()
            )));
        }
        let (values, codes) = (args.raw_values(), args.raw_codes());
        let (mut grid, mut block) = ([1usize; 3], [1usize; 3]);
        let mut dims = 1;
        for (i, tag) in self.tags.iter().enumerate() {
            let v = usize::try_from(args.int(n + i)?).map_err(|_| Error::value("a negative launch extent"))?;
            let (slot, axis) = match *tag {
                Tag::Grid(a) => (&mut grid, a),
                Tag::Block(a) => (&mut block, a),
                Tag::DynShared => continue,
            };
            slot[axis] = v.max(1);
            dims = dims.max(axis + 1);
        }
        let global: Vec<usize> = (0..dims).map(|a| grid[a] * block[a]).collect();
        let local: Vec<usize> = block[..dims].to_vec();
        let dev = current_device();
        let s = state()?;
        let queue = s.queue(dev)?;
        inner.with_kernel(name, dev, |built| {
            let kernel = built.kernel;
            for (i, kind) in self.kinds.iter().enumerate() {
                let set = |size: usize, p: *const c_void| {
                    // SAFETY: `p` addresses `size` bytes of the argument; the kernel is locked.
                    check(unsafe { (s.api.clSetKernelArg)(kernel, i as u32, size, p) }, "clSetKernelArg")
                        .map_err(|e| e.context(format!("kernel {name} argument {i}")))
                };
                match kind {
                    ArgKind::Buffer => {
                        let mem: sys::Mem = match codes[i] {
                            kTVMNullptr => std::ptr::null_mut(),
                            // SAFETY: a handle argument is an OpenCL tensor's data: a descriptor
                            // of a live buffer (the host code passes `DLTensor.data`).
                            kTVMOpaqueHandle => unsafe { buffer_of(values[i].v_handle)? },
                            c => {
                                return Err(Error::type_err(format!(
                                    "kernel {name} argument {i}: a buffer handle expected, type code {c} given"
                                )))
                            }
                        };
                        set(std::mem::size_of::<sys::Mem>(), (&mem as *const sys::Mem).cast())?;
                    }
                    ArgKind::I64 => {
                        let x = args.int(i)?;
                        set(8, (&x as *const i64).cast())?;
                    }
                    ArgKind::I32 => {
                        let x = args.int(i)? as i32;
                        set(4, (&x as *const i32).cast())?;
                    }
                    ArgKind::U32 => {
                        let x = args.int(i)? as u32;
                        set(4, (&x as *const u32).cast())?;
                    }
                    ArgKind::F32 => {
                        let x = args.float(i)? as f32;
                        set(4, (&x as *const f32).cast())?;
                    }
                    ArgKind::F64 => {
                        let x = args.float(i)?;
                        set(8, (&x as *const f64).cast())?;
                    }
                }
            }
            // SAFETY: a kernel with every argument set, sizes of `dims` entries.
            let rc = unsafe {
                (s.api.clEnqueueNDRangeKernel)(
                    *queue,
                    kernel,
                    dims as u32,
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
        })?;
        Ok(RetValue::None)
    }
}

impl ModuleNode for OpenClModule {
    fn type_key(&self) -> &str {
        "opencl"
    }

    fn get_function(&self, _this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if name == "__tvm_main__" {
            return Err(Error::value("opencl module: __tvm_main__ is not a kernel"));
        }
        if name == "opencl.GetPreCompiledPrograms" {
            let inner = self.inner.clone();
            return Ok(Some(PackedFunc::native(move |_| Ok(RetValue::Bytes(inner.precompiled(current_device())?)))));
        }
        if name == "opencl.SetPreCompiledPrograms" {
            let inner = self.inner.clone();
            return Ok(Some(PackedFunc::native(move |args| {
                args.expect_count("opencl.SetPreCompiledPrograms", 1, 1)?;
                inner.install_precompiled(current_device(), args.bytes(0)?)?;
                Ok(RetValue::None)
            })));
        }
        if name == "get_source" || name == "opencl.get_source" {
            let text = self.inner.source_text.clone();
            return Ok(Some(PackedFunc::native(move |_| Ok(RetValue::Str(text.clone())))));
        }
        let Some(info) = self.inner.kernels.get(name) else { return Ok(None) };
        let launch = Launch {
            kinds: info.arg_types.iter().map(|&t| arg_kind(t)).collect::<Result<_>>()?,
            tags: info.tags.iter().map(|t| parse_tag(t)).collect::<Result<_>>()?,
        };
        let inner = self.inner.clone();
        let name = name.to_string();
        Ok(Some(PackedFunc::native(move |args| launch.call(&inner, &name, args))))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_split_per_kernel() {
        let src =
            "// header\n// Function: a_kernel\n__kernel void a() {}\n// Function: b_kernel\n__kernel void b() {}\n";
        let parts = split_source(src).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts["a_kernel"], "__kernel void a() {}\n");
        assert_eq!(parts["b_kernel"], "__kernel void b() {}\n");
        assert!(split_source("__kernel void a() {}").is_none());
    }

    #[test]
    fn tags_and_arguments() {
        assert_eq!(parse_tag("blockIdx.y").unwrap(), Tag::Grid(1));
        assert_eq!(parse_tag("threadIdx.z").unwrap(), Tag::Block(2));
        assert!(parse_tag("warp.x").is_err());
        assert_eq!(arg_kind(DLDataType { code: 3, bits: 64, lanes: 1 }).unwrap(), ArgKind::Buffer);
        assert_eq!(arg_kind(DLDataType { code: 0, bits: 32, lanes: 1 }).unwrap(), ArgKind::I32);
        assert!(arg_kind(DLDataType { code: 2, bits: 16, lanes: 1 }).is_err());
    }
}
