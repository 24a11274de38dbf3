//! The executable: the code, its constants and the kernel library it calls, as the module
//! `VMExecutable` hosts load (a blob entry of an `export_library` file, or `runtime.Load_Executable`
//! over `exe.save()`'s bytes and a library).
//!
//! What every VM made from it shares: the code (immutable), the constants (once on the host, once
//! per device the code loads them on, made by whichever VM first needs them there), and the pools
//! its storage comes from.

#![forbid(unsafe_code)]

use super::code::{Function, Layout};
use super::image::{self, Constant, Image, VirtualDevice};
use super::storage::Pools;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::NDArray;
use std::sync::{Arc, Mutex, RwLock};

/// What does not change once read: the code and what it names.
pub struct Program {
    pub version: String,
    pub layout: Layout,
    pub devices: Vec<VirtualDevice>,
    pub host: usize,
    pub globals: Vec<String>,
    pub functions: Vec<Function>,
    pub primitives: Vec<String>,
    pub primitive_attrs: Vec<(u64, Vec<(String, String)>)>,
    pub const_devices: Vec<usize>,
}

impl Program {
    /// The index of the function named `name`.
    pub fn function_index(&self, name: &str) -> Result<usize> {
        self.globals.iter().position(|g| g == name).ok_or_else(|| {
            Error::key(format!(
                "Cannot find function {name} in executable (its functions: {})",
                self.globals.join(", ")
            ))
        })
    }

    pub fn function(&self, name: &str) -> Result<&Function> {
        Ok(&self.functions[self.function_index(name)?])
    }

    /// The string attributes of primitive `index` (layouts, its hash).
    pub fn attrs_of(&self, index: usize) -> &[(String, String)] {
        self.primitive_attrs.iter().find(|(i, _)| *i == index as u64).map_or(&[], |(_, a)| a.as_slice())
    }
}

/// The constants: each on the host (or late-bound: a name until loaded), and the copies made on
/// devices, one per constant and device, shared by every VM.
pub struct Constants {
    host: RwLock<Vec<Constant>>,
    on_device: Mutex<Vec<(usize, DLDevice, ObjRef<NDArray>)>>,
}

impl Constants {
    pub fn new(constants: Vec<Constant>) -> Constants {
        Constants { host: RwLock::new(constants), on_device: Mutex::new(Vec::new()) }
    }

    pub fn len(&self) -> usize {
        self.host.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn snapshot(&self) -> Vec<Constant> {
        self.host.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The names of constants still late-bound.
    pub fn unbound(&self) -> Vec<String> {
        self.snapshot()
            .into_iter()
            .filter_map(|c| match c {
                Constant::LateBound(n) => Some(n),
                Constant::Tensor(_) => None,
            })
            .collect()
    }

    /// Constant `index` on `device`: the host's tensor, or its copy there (made once).
    pub fn on(&self, index: usize, device: DLDevice) -> Result<ObjRef<NDArray>> {
        let host = match self.host.read().unwrap_or_else(|e| e.into_inner()).get(index) {
            Some(Constant::Tensor(t)) => t.clone(),
            Some(Constant::LateBound(name)) => {
                return Err(Error::value(format!(
                    "constant {index} ('{name}') is late-bound and was not loaded (load_late_bound_consts)"
                )))
            }
            None => return Err(Error::index(format!("constant {index} of {}", self.len()))),
        };
        if crate::device::same_memory(host.device(), device) {
            return Ok(host);
        }
        let mut copies = self.on_device.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, t)) = copies.iter().find(|(i, d, _)| *i == index && *d == device) {
            return Ok(t.clone());
        }
        let copy = NDArray::copy_of(host.raw(), device).map_err(|e| e.context(format!("constant {index}")))?;
        copies.push((index, device, copy.clone()));
        Ok(copy)
    }

    /// Bytes of the host constants, and of the copies made on devices.
    pub fn bytes(&self) -> (usize, usize) {
        let host = self
            .snapshot()
            .iter()
            .map(|c| match c {
                Constant::Tensor(t) => t.nbytes(),
                Constant::LateBound(_) => 0,
            })
            .sum();
        let copies = self.on_device.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, _, t)| t.nbytes()).sum();
        (host, copies)
    }

    /// Uses the constants from the aligned params file at `path` (mapped read-only: its pages are
    /// shared by every process that maps it) instead of the process's own copies, writing the file
    /// first when it is missing or is not this executable's (a record holding a digest of the
    /// constants tells; damaged bytes do not match it). Returns whether the file was written.
    /// `open` maps the file (the caller's promise: it does not change while mapped, which holds
    /// for a file written whole and renamed into place, as this one is).
    pub fn map_file(
        &self,
        path: &std::path::Path,
        open: impl Fn() -> Result<Arc<crate::tensor::FileMap>>,
    ) -> Result<bool> {
        let wrote = self.swap_in_mapped(path, open);
        // The process's own copies are gone; the heap would otherwise keep their pages (and those
        // of the copies hashed) as its own, which is as much memory as the mapping saves.
        crate::host_memory::return_free_heap();
        wrote
    }

    fn swap_in_mapped(
        &self,
        path: &std::path::Path,
        open: impl Fn() -> Result<Arc<crate::tensor::FileMap>>,
    ) -> Result<bool> {
        let host = self.snapshot();
        let tensors: Vec<(usize, ObjRef<NDArray>)> = host
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Constant::Tensor(t) => Ok((i, t.clone())),
                Constant::LateBound(n) => {
                    Err(Error::value(format!("constant {i} ('{n}') is late-bound and not loaded")))
                }
            })
            .collect::<Result<_>>()?;
        let (mapped, wrote) = mapped_constants(path, &tensors, "__tvmrt.vm_constants", open)?;
        let mut host = self.host.write().unwrap_or_else(|e| e.into_inner());
        for (i, t) in mapped {
            host[i] = Constant::Tensor(t);
        }
        Ok(wrote)
    }

    /// Marks the constants of at least `byte_limit` bytes late-bound, named `const_<index>`, and
    /// returns them by name (upstream's `get_late_bound_consts`).
    pub fn make_late_bound(&self, byte_limit: i64) -> Result<Vec<(String, ObjRef<NDArray>)>> {
        let mut host = self.host.write().unwrap_or_else(|e| e.into_inner());
        if host.iter().any(|c| matches!(c, Constant::LateBound(_))) {
            return Err(Error::value("the executable's constants are late-bound already"));
        }
        let mut moved = Vec::new();
        for (i, c) in host.iter_mut().enumerate() {
            if let Constant::Tensor(t) = c {
                if t.nbytes() as i64 >= byte_limit {
                    let name = format!("const_{i}");
                    moved.push((name.clone(), t.clone()));
                    *c = Constant::LateBound(name);
                }
            }
        }
        self.on_device.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(moved)
    }

    /// Binds every late-bound constant to the tensor of its name in `tensors`, which must hold
    /// exactly those (upstream's `load_late_bound_consts_from_map`).
    pub fn bind(&self, tensors: &[(String, ObjRef<NDArray>)]) -> Result<()> {
        let mut host = self.host.write().unwrap_or_else(|e| e.into_inner());
        let mut bound = host.clone();
        let mut used = vec![false; tensors.len()];
        for (i, c) in bound.iter_mut().enumerate() {
            if let Constant::LateBound(name) = c {
                let at = tensors.iter().position(|(n, _)| n == name).ok_or_else(|| {
                    Error::key(format!("No binding for late-bound constant at index {i} with name '{name}'"))
                })?;
                used[at] = true;
                let t = &tensors[at].1;
                if !crate::device::is_host(t.device()) {
                    return Err(Error::value(format!("late-bound constant '{name}' is not on the host")));
                }
                *c = Constant::Tensor(t.clone());
            }
        }
        if let Some(extra) = used.iter().position(|u| !u) {
            return Err(Error::key(format!(
                "'{}' is not a late-bound constant of the executable ({} unused)",
                tensors[extra].0,
                used.iter().filter(|u| !**u).count()
            )));
        }
        *host = bound;
        Ok(())
    }
}

/// The executable's parts every VM made from it shares.
pub struct Executable {
    pub program: Arc<Program>,
    pub constants: Arc<Constants>,
    pub pools: Arc<Pools>,
}

impl Executable {
    /// Reads a bytecode file.
    pub fn from_bytes(code: &[u8]) -> Result<Executable> {
        let image = image::read(code)?;
        Ok(Executable::from_image(image))
    }

    fn from_image(i: Image) -> Executable {
        let program = Program {
            version: i.version,
            layout: i.layout,
            devices: i.devices,
            host: i.host,
            globals: i.globals,
            functions: i.functions,
            primitives: i.primitives,
            primitive_attrs: i.primitive_attrs,
            const_devices: i.const_devices,
        };
        Executable {
            program: Arc::new(program),
            constants: Arc::new(Constants::new(i.constants)),
            pools: Arc::new(Pools::default()),
        }
    }

    /// The bytecode, as its compiler wrote it (late-bound constants as names).
    pub fn save(&self) -> Vec<u8> {
        let p = &self.program;
        image::write(&Image {
            version: p.version.clone(),
            layout: p.layout,
            devices: p.devices.clone(),
            host: p.host,
            globals: p.globals.clone(),
            constants: self.constants.snapshot(),
            const_devices: p.const_devices.clone(),
            primitives: p.primitives.clone(),
            primitive_attrs: p.primitive_attrs.clone(),
            functions: p.functions.clone(),
        })
    }
}

/// A constant's index in its pool, and its tensor.
pub type IndexedTensor = (usize, ObjRef<NDArray>);

/// Tensor constants (by index) as arrays over the aligned params file at `path`, mapped
/// read-only so every process that maps it shares its pages: the file is used when a record
/// `stamp` holds the digest of exactly these constants (names `const_<index>`, dtypes, shapes and
/// bytes; damaged bytes do not match it), else written first (whole, then renamed into place) and
/// read back. Returns the mapped arrays and whether the file was written. `open` maps the file (the
/// caller's promise: it does not change while mapped).
pub fn mapped_constants(
    path: &std::path::Path,
    tensors: &[IndexedTensor],
    stamp: &str,
    open: impl Fn() -> Result<Arc<crate::tensor::FileMap>>,
) -> Result<(Vec<IndexedTensor>, bool)> {
    let named: Vec<(String, &ObjRef<NDArray>)> = tensors.iter().map(|(i, t)| (format!("const_{i}"), t)).collect();
    // One constant's bytes at a time: a model's weights gathered at once would double its size.
    let digest_of = |items: &mut dyn Iterator<Item = (String, &NDArray)>| {
        let hashed: Vec<(String, u64)> = items.map(|(n, t)| (n, crate::digest::xxh64(&t.to_vec()))).collect();
        format!("{:016x}", crate::digest::of_hashed(hashed.iter().map(|(n, h)| (n.as_str(), *h))))
    };
    let want = digest_of(&mut named.iter().map(|(n, t)| (n.clone(), &***t)));
    // The file as it is, if it is these constants'.
    let usable = |map: &Arc<crate::tensor::FileMap>| -> Option<Vec<IndexedTensor>> {
        let records = crate::params::parse(map.bytes()).ok()?;
        let found = records.iter().find(|(n, _)| *n == stamp)?;
        if found.1.data != want.as_bytes() {
            return None;
        }
        let mut out = Vec::new();
        for ((i, t), (name, _)) in tensors.iter().zip(&named) {
            let (_, rec) = records.iter().find(|(n, _)| n == name)?;
            if rec.shape != t.shape() || rec.dtype != t.dtype() {
                return None;
            }
            out.push((*i, NDArray::over_mapped(map, rec.data, t.shape(), t.dtype()).ok()?));
        }
        let found = digest_of(&mut out.iter().map(|(i, t)| (format!("const_{i}"), &**t)));
        (found == want).then_some(out)
    };
    if let Some(m) = open().ok().as_ref().and_then(usable) {
        return Ok((m, false));
    }
    let mut items: Vec<(String, ObjRef<NDArray>)> = named.iter().map(|(n, t)| (n.clone(), (*t).clone())).collect();
    items.push((
        stamp.to_string(),
        NDArray::from_bytes(&[want.len() as i64], crate::dlpack::DLDataType::new(1, 8, 1), want.as_bytes())?,
    ));
    let plain = crate::params::save(items.iter().map(|(n, t)| (n.as_str(), &**t)));
    crate::files::write_whole(path, &crate::params::align(&plain)?)?;
    let mapped = open().ok().as_ref().and_then(usable).ok_or_else(|| {
        Error::value(format!("{}: the constants file just written does not read back", path.display()))
    })?;
    Ok((mapped, true))
}
