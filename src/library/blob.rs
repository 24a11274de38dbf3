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

/// The loaders of the layers above this one (the executor's factory, a device's modules), by type
/// key: installed at the runtime's init point, as upstream's `runtime.module.loadbinary_<key>`
/// registry, so the library layer names none of them.
static INSTALLED: RwLock<Vec<(&'static str, Loader)>> = RwLock::new(Vec::new());

/// Installs `loader` for modules of type `key` (a key installed again keeps its first loader).
pub fn install_loader(key: &'static str, loader: Loader) {
    let mut table = INSTALLED.write().unwrap_or_else(|e| e.into_inner());
    if !table.iter().any(|(k, _)| *k == key) {
        table.push((key, loader));
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
    let installed = INSTALLED.read().unwrap_or_else(|e| e.into_inner());
    let loader = BUILT_IN.iter().chain(installed.iter()).find(|(k, _)| *k == key).map(|&(_, l)| l);
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
            let mut keys: Vec<String> = BUILT_IN.iter().chain(installed.iter()).map(|(k, _)| k.to_string()).collect();
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
            other => modules.push(load_binary(other, &mut r).map_err(|e| e.context(format!("module '{other}'")))?),
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
    Ok(modules.swap_remove(0))
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
