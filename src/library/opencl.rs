//! The `opencl` module of `__tvm_dev_mblob`: OpenCL C source split per kernel, and each kernel's
//! argument types and launch tags. Loading touches no OpenCL API; a call turns its packed
//! arguments into a launch, which the device layer's [`Kernels`] runs (building the kernel's
//! program on its first call on each device).

use crate::device::opencl::current_device;
use crate::device::opencl::kernels::{KernelArg, Kernels};
use crate::dlpack::{kDLFloat, kDLInt, kDLOpaqueHandle, kDLUInt, kTVMNullptr, kTVMOpaqueHandle, DLDataType};
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::stream::Reader;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

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

struct Inner {
    kernels: Kernels,
    infos: HashMap<String, KernelInfo>,
    source_text: String,
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
        let built = Kernels::new(fmt, sources, kernels.keys().cloned());
        Ok(OpenClModule { inner: Arc::new(Inner { kernels: built, infos: kernels, source_text }) })
    }
}

/// A kernel's launch: arguments and work sizes from one packed call.
struct Launch {
    kinds: Vec<ArgKind>,
    tags: Vec<Tag>,
}

impl Launch {
    fn call(&self, kernels: &Kernels, name: &str, args: &Args<'_>) -> Result<RetValue> {
        let n = self.kinds.len();
        if args.len() != n + self.tags.len() {
            return Err(Error::value(format!(
                "kernel {name} takes {} arguments and {} launch extents, {} given",
                n,
                self.tags.len(),
                args.len()
            )));
        }
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
        let mut kernel_args = Vec::with_capacity(n);
        for (i, kind) in self.kinds.iter().enumerate() {
            kernel_args.push(match kind {
                ArgKind::Buffer => match args.code(i) {
                    kTVMNullptr => KernelArg::Null,
                    kTVMOpaqueHandle => KernelArg::Buffer(args.handle(i)?),
                    c => {
                        return Err(Error::type_err(format!(
                            "kernel {name} argument {i}: a buffer handle expected, type code {c} given"
                        )))
                    }
                },
                ArgKind::I64 => KernelArg::I64(args.int(i)?),
                ArgKind::I32 => KernelArg::I32(args.int(i)? as i32),
                ArgKind::U32 => KernelArg::U32(args.int(i)? as u32),
                ArgKind::F32 => KernelArg::F32(args.float(i)? as f32),
                ArgKind::F64 => KernelArg::F64(args.float(i)?),
            });
        }
        // SAFETY: a handle argument of a kernel is an OpenCL tensor's data, a live descriptor (the
        // host code that calls kernels passes `DLTensor.data`, as upstream's module trusts too).
        unsafe { kernels.launch(name, &kernel_args, &global, &local) }?;
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
            return Ok(Some(PackedFunc::native(move |_| {
                Ok(RetValue::Bytes(inner.kernels.precompiled(current_device())?))
            })));
        }
        if name == "opencl.SetPreCompiledPrograms" {
            let inner = self.inner.clone();
            return Ok(Some(PackedFunc::native(move |args| {
                args.expect_count("opencl.SetPreCompiledPrograms", 1, 1)?;
                inner.kernels.install_precompiled(current_device(), args.bytes(0)?)?;
                Ok(RetValue::None)
            })));
        }
        if name == "get_source" || name == "opencl.get_source" {
            let text = self.inner.source_text.clone();
            return Ok(Some(PackedFunc::native(move |_| Ok(RetValue::Str(text.clone())))));
        }
        let Some(info) = self.inner.infos.get(name) else { return Ok(None) };
        let launch = Launch {
            kinds: info.arg_types.iter().map(|&t| arg_kind(t)).collect::<Result<_>>()?,
            tags: info.tags.iter().map(|t| parse_tag(t)).collect::<Result<_>>()?,
        };
        let inner = self.inner.clone();
        let name = name.to_string();
        Ok(Some(PackedFunc::native(move |args| launch.call(&inner.kernels, &name, args))))
    }

    /// The kernels' OpenCL C, as upstream's module gives it for any format.
    fn source(&self, _format: &str) -> Result<String> {
        Ok(self.inner.source_text.clone())
    }

    fn format(&self) -> Result<String> {
        Ok("cl".into())
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
