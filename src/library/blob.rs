//! `__tvm_dev_mblob`: the modules `export_library` serialised next to the compiled code, and the
//! import tree linking them.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::module::{Loader, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{PackedFunc, RetValue};
use crate::params;
use crate::stream::Reader;
use std::any::Any;
use std::sync::RwLock;

/// The blob a library carries, by the generation that wrote it: one type key can mean different
/// bytes in each (a Relax executable's constant tags changed with the ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// `__tvm_dev_mblob`, up to TVM 0.20.
    Classic,
    /// `__tvm_ffi_library_bin`, TVM 0.21: the classic layout under the in-tree ffi.
    InTreeFfi,
    /// `__tvm_ffi__library_bin`, TVM 0.22 and later: tvm-ffi's layout (the import tree first,
    /// each module's bytes length-prefixed).
    Ffi,
}

/// The loaders of the layers above this one (the executor's factory, a device's modules), by type
/// key and container: installed at the runtime's init point, as upstream's
/// `runtime.module.loadbinary_<key>` registry, so the library layer names none of them.
static INSTALLED: RwLock<Vec<(Container, &'static str, Loader)>> = RwLock::new(Vec::new());

/// Installs `loader` for modules of type `key` in classic blobs (a key installed again keeps its
/// first loader).
pub fn install_loader(key: &'static str, loader: Loader) {
    install_container_loader(Container::Classic, key, loader)
}

/// Installs `loader` for modules of type `key` in blobs of `container`. For the ffi containers
/// the loader reads the module's bytes whole.
pub fn install_container_loader(container: Container, key: &'static str, loader: Loader) {
    let mut table = INSTALLED.write().unwrap_or_else(|e| e.into_inner());
    if !table.iter().any(|(c, k, _)| *c == container && *k == key) {
        table.push((container, key, loader));
    }
}

/// The modules this layer reads itself: they carry nothing a layer above interprets.
const BUILT_IN: &[(&str, Loader)] = &[
    ("const_loader", |r| Ok(Module::new(ConstLoader::load_binary(r)?))),
    ("metadata", |r| Ok(Module::new(ConstLoader::load_binary(r)?))),
    ("metadata_module", |_| Ok(Module::new(MetadataModule))),
    ("static_library", super::static_library::StaticLibrary::load_binary),
];

/// Deserialises one module of type `key` from the stream.
pub fn load_binary(key: &str, r: &mut Reader<'_>) -> Result<ObjRef<Module>> {
    load_binary_in(Container::Classic, key, r)
}

/// The loader of `key` for `container`: its own, else a classic one (the types every generation
/// writes alike).
fn loader_for_locked(
    installed: &[(Container, &'static str, Loader)],
    container: Container,
    key: &str,
) -> Option<Loader> {
    let own = installed.iter().find(|(c, k, _)| *c == container && *k == key).map(|&(_, _, l)| l);
    own.or_else(|| BUILT_IN.iter().find(|(k, _)| *k == key).map(|&(_, l)| l))
        .or_else(|| installed.iter().find(|(c, k, _)| *c == Container::Classic && *k == key).map(|&(_, _, l)| l))
}

fn load_binary_in(container: Container, key: &str, r: &mut Reader<'_>) -> Result<ObjRef<Module>> {
    let installed = INSTALLED.read().unwrap_or_else(|e| e.into_inner());
    let loader = loader_for_locked(&installed, container, key);
    match loader {
        Some(load) => {
            drop(installed);
            load(r)
        }
        None => {
            drop(installed);
            // A type a plug-in registered a loader for, as upstream finds every type's.
            if let Some(loaded) = super::plugin::load_binary(key, r) {
                return loaded;
            }
            let installed = INSTALLED.read().unwrap_or_else(|e| e.into_inner());
            let mut keys: Vec<String> = BUILT_IN
                .iter()
                .map(|(k, _)| k.to_string())
                .chain(installed.iter().map(|(_, k, _)| k.to_string()))
                .collect();
            keys.extend(super::plugin::registered("runtime.module.loadbinary_"));
            keys.sort_unstable();
            keys.dedup();
            Err(r.error(format!(
                "Binary was created using {key} but a loader of that name is not registered. Available loaders are \
                 {}. A type of a vendor's runtime needs its plug-in loaded first (--plugin, tvmrt.load_plugin, \
                 TVMRT_PLUGINS, or dlopen in a host); one of TVM's own needs a runtime built with it.",
                keys.join(", ")
            )))
        }
    }
}

/// Rebuilds the module tree; `lib` is the library module of the code that carried the blob.
pub fn load_tree(blob: &[u8], lib: ObjRef<Module>) -> Result<ObjRef<Module>> {
    load_tree_in(Container::Classic, blob, lib)
}

/// Rebuilds the module tree of a blob of `container`.
pub fn load_tree_in(container: Container, blob: &[u8], lib: ObjRef<Module>) -> Result<ObjRef<Module>> {
    if container == Container::Ffi {
        return load_ffi_tree(blob, lib);
    }
    let mut r = Reader::new(blob, "module blob");
    let count = r.count(8)?;
    let mut modules: Vec<ObjRef<Module>> = Vec::new();
    let mut tree: Option<(Vec<u64>, Vec<u64>)> = None;
    let mut saw_lib = false;
    for _ in 0..count {
        let key = r.string()?;
        match key {
            "_lib" => {
                if saw_lib {
                    return Err(r.error("more than one _lib entry"));
                }
                saw_lib = true;
                modules.push(lib.clone());
            }
            "_import_tree" => tree = Some((r.u64s()?, r.u64s()?)),
            other => modules
                .push(load_binary_in(container, other, &mut r).map_err(|e| e.context(format!("module '{other}'")))?),
        }
    }
    let Some((row_ptr, children)) = tree else {
        // Legacy layout: the library is the root and imports every serialised module.
        for m in modules {
            if !ObjRef::ptr_eq(&m, &lib) {
                Module::import(&lib, m)?;
            }
        }
        return Ok(lib);
    };
    link(&modules, &row_ptr, &children)?;
    Ok(modules.swap_remove(0))
}

/// tvm-ffi's blob: the import tree (CSR), then per module its kind and, but for the library
/// itself (`_lib`), its bytes.
fn load_ffi_tree(blob: &[u8], lib: ObjRef<Module>) -> Result<ObjRef<Module>> {
    let mut r = Reader::new(blob, "tvm-ffi library blob");
    let row_ptr = r.u64s()?;
    let children = r.u64s()?;
    let n = row_ptr.len().checked_sub(1).ok_or_else(|| r.error("an empty import tree"))?;
    let mut modules = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let kind = r.string()?;
        if kind == "_lib" {
            modules.push(lib.clone());
            continue;
        }
        let len = r.count(1)?;
        let mut payload = Reader::new(r.bytes(len)?, "module bytes");
        let loaded = match loader_for_locked(&INSTALLED.read().unwrap_or_else(|e| e.into_inner()), Container::Ffi, kind)
        {
            Some(load) => load(&mut payload),
            None => Err(Error::value(format!(
                "Library binary was created using {{{kind}}} but a loader of that name is not registered \
                 (ffi.Module.load_from_bytes.{kind})"
            ))),
        };
        modules.push(loaded.map_err(|e| e.context(format!("module '{kind}'")))?);
    }
    if !r.is_at_end() {
        return Err(r.error(format!("{} bytes after the last module", r.remaining())));
    }
    link(&modules, &row_ptr, &children)?;
    Ok(modules.swap_remove(0))
}

/// Gives back the resident pages of the tvm-ffi blob (of a library another loader opened:
/// upstream's libtvm_ffi) that holds a module with exactly these bytes, once they are parsed:
/// as large as the embedded weights, they need not stay resident beside the parsed copy. Returns
/// the bytes given back, or `None` when no loaded library's blob holds the module.
pub fn release_ffi_blob_holding(module_bytes: &[u8]) -> Option<usize> {
    let holds = |blob: &[u8]| -> Option<bool> {
        let mut r = Reader::new(blob, "tvm-ffi library blob");
        let row_ptr = r.u64s().ok()?;
        let _children = r.u64s().ok()?;
        for _ in 0..row_ptr.len().checked_sub(1)? {
            if r.string().ok()? == "_lib" {
                continue;
            }
            let len = r.count(1).ok()?;
            if r.bytes(len).ok()? == module_bytes {
                return Some(true);
            }
        }
        Some(false)
    };
    super::symbols::with_loaded_blobs(c"__tvm_ffi__library_bin", |blobs| {
        blobs.iter().find(|b| holds(b) == Some(true)).map(|b| super::pages::release_read_only(b))
    })
}

/// Imports each module's children, as the import tree says.
fn link(modules: &[ObjRef<Module>], row_ptr: &[u64], children: &[u64]) -> Result<()> {
    if modules.is_empty() || row_ptr.len() != modules.len() + 1 {
        return Err(Error::value(format!(
            "module blob: import tree has {} row pointers for {} modules",
            row_ptr.len(),
            modules.len()
        )));
    }
    for (i, m) in modules.iter().enumerate() {
        let (lo, hi) = (row_ptr[i] as usize, row_ptr[i + 1] as usize);
        if lo > hi || hi > children.len() {
            return Err(Error::value(format!("module blob: import tree row {i} ({lo}..{hi}) out of range")));
        }
        for &c in &children[lo..hi] {
            let child = modules
                .get(c as usize)
                .ok_or_else(|| Error::value(format!("module blob: import of missing module {c}")))?;
            Module::import(m, child.clone()).map_err(|e| e.context("module blob"))?;
        }
    }
    Ok(())
}

/// BYOC constants: given to each external function's `__init_<name>` on first use.
pub struct ConstLoader {
    constants: Vec<(String, ObjRef<crate::tensor::NDArray>)>,
    /// symbol -> names of the constants it needs
    symbols: Vec<(String, Vec<String>)>,
    initialised: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl ConstLoader {
    fn load_binary(r: &mut Reader<'_>) -> Result<ConstLoader> {
        let names = r.strings()?;
        let n = r.u64()?;
        if n != names.len() as u64 {
            return Err(r.error(format!("const_loader: {} names but {n} arrays", names.len())));
        }
        let mut constants = Vec::new();
        for name in names {
            constants.push((name.to_string(), params::read_record(r)?.to_ndarray()?));
        }
        let syms = r.strings()?;
        let n = r.u64()?;
        if n != syms.len() as u64 {
            return Err(r.error(format!("const_loader: {} symbols but {n} lists", syms.len())));
        }
        let mut symbols = Vec::new();
        for s in syms {
            symbols.push((s.to_string(), r.strings()?.into_iter().map(str::to_string).collect()));
        }
        Ok(ConstLoader { constants, symbols, initialised: Default::default() })
    }
}

impl ModuleNode for ConstLoader {
    fn type_key(&self) -> &str {
        "const_loader"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if name == "get_const_var_ndarray" {
            let pairs: Vec<_> = self.constants.iter().map(|(k, v)| (k.as_str(), v.clone().into_any())).collect();
            let map = crate::packed::MapObj::from_str_pairs(pairs);
            return Ok(Some(PackedFunc::native(move |_| Ok(map.clone().into()))));
        }
        let Some((_, needed)) = self.symbols.iter().find(|(s, _)| s == name) else {
            return first_import_function(this, name);
        };
        let mut done = self.initialised.lock().unwrap_or_else(|e| e.into_inner());
        if !done.contains(name) {
            if let Some(init) = first_import_function(this, &format!("__init_{name}"))? {
                let arrays = needed
                    .iter()
                    .map(|n| {
                        self.constants
                            .iter()
                            .find(|(k, _)| k == n)
                            .map(|(_, v)| v.clone().into_any())
                            .ok_or_else(|| Error::key(format!("const_loader: no constant '{n}'")))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut args = crate::packed::ArgsBuilder::new();
                args.object(crate::packed::ArrayObj::new(arrays).into_any());
                let rv = init.call(&args.args())?;
                if !matches!(rv, RetValue::Int(0) | RetValue::None) {
                    return Err(Error::tvm(format!("__init_{name} failed: {rv:?}")));
                }
            }
            done.insert(name.to_string());
        }
        first_import_function(this, name)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn first_import_function(this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
    for m in this.imports() {
        if let Some(f) = Module::get_function(&m, name, false)? {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// The AOT metadata module, between the factory and the library: `get_metadata` answers what the
/// library's `get_c_metadata` returns (the address of its `TVMMetadata`, which the AOT executor
/// reads; upstream wraps it in an object of its own).
pub struct MetadataModule;

impl ModuleNode for MetadataModule {
    fn type_key(&self) -> &str {
        "metadata_module"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if name != "get_metadata" {
            return Ok(None);
        }
        let Some(f) = first_import_function(this, "get_c_metadata")? else { return Ok(None) };
        Ok(Some(PackedFunc::native(move |a| f.call(a))))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Has forks take the table of blob loaders.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&INSTALLED);
}
