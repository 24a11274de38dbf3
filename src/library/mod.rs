//! Operator libraries: loading an `export_library` shared object (or the system library), filling
//! its context slots, and rebuilding the module tree from its `__tvm_dev_mblob`.

pub mod blob;
pub mod bridge;
mod context;
mod elf;
pub mod ffi_kernel;
pub mod linked;
pub mod opencl;
mod pages;
mod plugin;
pub use plugin::{load_plugin, load_plugins_from_env};
pub mod static_library;
pub(crate) mod symbols;

use crate::dlpack::TVMBackendPackedCFunc;
use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::{ObjRef, ObjectHeader};
use crate::packed::{registry, PackedFunc};
use context::LibContext;
use std::any::Any;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use symbols::{Dso, SymbolSource, SystemLib};

/// How a library's kernels are called: the classic packed signature, or tvm-ffi's safe call
/// (TVM 0.21 and later) under a symbol prefix (`__tvm_ffi_` from 0.22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelAbi {
    Classic,
    Ffi { prefix: &'static str },
}

/// The generations a library's symbols tell apart: its blob, its context slot, its kernels.
struct Layout {
    blob: &'static str,
    container: blob::Container,
    context: &'static str,
    abi: KernelAbi,
}

const LAYOUTS: [Layout; 3] = [
    Layout {
        blob: "__tvm_dev_mblob",
        container: blob::Container::Classic,
        context: "__tvm_module_ctx",
        abi: KernelAbi::Classic,
    },
    Layout {
        blob: "__tvm_ffi_library_bin",
        container: blob::Container::InTreeFfi,
        context: "__tvm_ffi_library_ctx",
        abi: KernelAbi::Ffi { prefix: "" },
    },
    Layout {
        blob: "__tvm_ffi__library_bin",
        container: blob::Container::Ffi,
        context: "__tvm_ffi__library_ctx",
        abi: KernelAbi::Ffi { prefix: "__tvm_ffi_" },
    },
];

/// The layout of a library: its blob's or context slot's name says; a library with neither is
/// classic.
fn layout_of(source: &dyn SymbolSource) -> &'static Layout {
    LAYOUTS
        .iter()
        .rev()
        .find(|l| source.lookup(l.blob).is_some() || source.lookup(l.context).is_some())
        .unwrap_or(&LAYOUTS[0])
}

/// The `library` module: operators found by symbol name.
pub struct LibraryModule {
    /// The loaded code, let go of (its image unmapped, when this was the last load of it) only
    /// after the context, in `drop`.
    source: ManuallyDrop<Arc<dyn SymbolSource>>,
    abi: KernelAbi,
    /// The image's context (libraries whose code looks functions up by name), and this module's
    /// own header address, to leave the context when it goes.
    context: Option<(Arc<LibContext>, AtomicUsize)>,
}

impl Drop for LibraryModule {
    fn drop(&mut self) {
        let had_context = self.context.is_some();
        // The context goes while the image is still mapped: an image mapped at the same address
        // afterwards (another library, once this one's last load is gone) must not find it by its
        // slot, as its cached functions are this library's imports'.
        if let Some((ctx, header)) = self.context.take() {
            ctx.unregister(header.load(Ordering::Relaxed));
        }
        // SAFETY: dropped once, here, and never touched again.
        unsafe { ManuallyDrop::drop(&mut self.source) };
        if had_context {
            // The image may be gone now: what its kernels were handed need not stay.
            context::release_unmapped();
        }
    }
}

impl LibraryModule {
    pub fn source(&self) -> &dyn SymbolSource {
        &**self.source
    }

    /// The library's module blob (`__tvm_dev_mblob`: what `export_library` serialised beside the
    /// code), if it has one; its pages are given back once parsed, and read from the file again
    /// when touched.
    pub fn module_blob(&self) -> Option<&[u8]> {
        let addr = self.source.lookup("__tvm_dev_mblob")?;
        // SAFETY: the symbol is the module blob (a u64 length, then the bytes) of the library,
        // which stays loaded while this module (which `&self` borrows) lives.
        Some(unsafe { symbols::read_blob(addr.cast()) })
    }

    /// A digest of the library file's bytes as loaded (a file replaced since does not change it),
    /// for files tied to one build of it (prepared params); `None` for a library that is not a
    /// file (a system library).
    pub fn file_digest(&self) -> Option<u64> {
        self.source.file_digest()
    }

    /// A library with no symbols (for reading module blobs on their own).
    pub fn empty() -> ObjRef<Module> {
        struct Nothing;
        impl SymbolSource for Nothing {
            fn lookup(&self, _: &str) -> Option<*mut c_void> {
                None
            }
            fn describe(&self) -> String {
                "an empty library".into()
            }
        }
        Module::new(LibraryModule {
            source: ManuallyDrop::new(Arc::new(Nothing)),
            abi: KernelAbi::Classic,
            context: None,
        })
    }
}

/// A copy of the `__tvm_dev_mblob` payload of a shared library (empty if it has none).
pub fn read_module_blob(path: &str) -> Result<Vec<u8>> {
    let dso = Dso::open(path)?;
    Ok(match dso.lookup("__tvm_dev_mblob") {
        // SAFETY: the symbol is the module blob: a u64 length followed by the bytes.
        Some(addr) => unsafe { symbols::read_blob(addr.cast()) }.to_vec(),
        None => Vec::new(),
    })
}

impl ModuleNode for LibraryModule {
    fn type_key(&self) -> &str {
        "library"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if let KernelAbi::Ffi { prefix } = self.abi {
            return self.ffi_function(this, prefix, name);
        }
        let symbol = if name == "__tvm_main__" {
            let addr =
                self.source.lookup("__tvm_main__").ok_or_else(|| Error::attribute("library has no __tvm_main__"))?;
            // SAFETY: `__tvm_main__` is the string symbol naming the entry function.
            unsafe { symbols::read_c_str(addr) }
        } else {
            name.to_string()
        };
        let Some(addr) = self.source.lookup(&symbol) else { return Ok(None) };
        if !symbols::is_function(addr as usize) {
            return Err(Error::type_err(format!(
                "symbol '{symbol}' of {} is data, not a function",
                self.source.describe()
            )));
        }
        // SAFETY: exported function symbols of a TVM library are TVMBackendPackedCFuncs.
        let f: TVMBackendPackedCFunc = unsafe { std::mem::transmute::<*mut c_void, TVMBackendPackedCFunc>(addr) };
        Ok(Some(PackedFunc::from_kernel(f, this.clone().into_any())))
    }

    fn property_mask(&self) -> i32 {
        property::BINARY_SERIALIZABLE | property::RUNNABLE | property::DSO_EXPORTABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl LibraryModule {
    /// A tvm-ffi kernel: `<prefix><name>` (the entry through `__tvm_main__` / `__tvm_ffi_main`).
    fn ffi_function(&self, this: &ObjRef<Module>, prefix: &str, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let symbol = match name {
            "__tvm_main__" if prefix.is_empty() => {
                let Some(addr) = self.source.lookup("__tvm_main__") else { return Ok(None) };
                // SAFETY: `__tvm_main__` is the string symbol naming the entry function.
                unsafe { symbols::read_c_str(addr) }
            }
            "__tvm_main__" => format!("{prefix}main"),
            _ => format!("{prefix}{name}"),
        };
        let Some(addr) = self.source.lookup(&symbol) else { return Ok(None) };
        if !symbols::is_function(addr as usize) {
            return Err(Error::type_err(format!(
                "symbol '{symbol}' of {} is data, not a function",
                self.source.describe()
            )));
        }
        // SAFETY: the exported functions of a tvm-ffi library are its kernels, `TVMFFISafeCallType`s.
        let f = unsafe { std::mem::transmute::<*mut c_void, ffi_kernel::SafeCall>(addr) };
        Ok(Some(ffi_kernel::kernel(f, name.to_string(), this.clone().into_any())))
    }
}

/// `TVMBackendGetFuncFromEnv`: `ctx` is what we stored in the library's `__tvm_module_ctx`, its
/// image's `LibContext`. Looks in the imports of a live module of that image, then the global
/// registry; the handle stays valid as long as the image.
pub fn get_func_from_env(ctx: *mut c_void, name: &str) -> Result<*mut ObjectHeader> {
    // SAFETY: `ctx` was written by `finish` as `Arc::as_ptr` of the image's context, which every
    // module of the image holds; compiled code runs only while one of them lives.
    let ctx = unsafe { ctx.cast::<LibContext>().as_ref() }
        .ok_or_else(|| Error::value("TVMBackendGetFuncFromEnv: null module context"))?;
    let mut cache = ctx.env_funcs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = cache.get(name) {
        return Ok(f.as_ptr());
    }
    let mut found = None;
    'search: for module in ctx.modules() {
        for import in module.imports() {
            if let Some(f) = Module::get_function(&import, name, true)? {
                found = Some(f);
                break 'search;
            }
        }
    }
    let f = found.or_else(|| registry::get(name)).ok_or_else(|| {
        Error::attribute(format!("Cannot find function {name} in the imported modules or global registry"))
    })?;
    let ptr = f.as_ptr();
    cache.insert(name.to_string(), f);
    Ok(ptr)
}

/// The functions compiled code calls back through its context slots (`__TVMFuncCall`,
/// `__TVMBackendAllocWorkspace`, ...): the C boundary defines them and installs the table once, at
/// the runtime's init point, so the loader does not depend on the boundary above it.
/// Has forks take the loaders' process-wide locks.
pub(crate) fn handle_forks() {
    context::handle_forks();
    symbols::handle_forks();
    blob::handle_forks();
}

static CALLBACKS: once_cell::sync::OnceCell<Vec<(&'static str, usize)>> = once_cell::sync::OnceCell::new();

/// Installs the callback table; the first installation wins.
pub fn install_callbacks(table: &[(&'static str, *mut c_void)]) {
    let _ = CALLBACKS.set(table.iter().map(|&(name, addr)| (name, addr as usize)).collect());
}

fn fill_context(source: &dyn SymbolSource) -> Result<()> {
    // Without the table a kernel would call through a null slot: refuse to load instead.
    let table = CALLBACKS.get().ok_or_else(|| {
        Error::tvm("the runtime is not initialised: call tvm_runtime::init() before loading libraries")
    })?;
    for &(name, addr) in table {
        if let Some(slot) = source.lookup(name) {
            // SAFETY: TVM's codegen exports these names as writable function-pointer globals;
            // `addr` is the C boundary's function of that name.
            unsafe { symbols::write_slot(slot, addr as *mut c_void) };
        }
    }
    Ok(())
}

fn finish(source: Arc<dyn SymbolSource>) -> Result<ObjRef<Module>> {
    fill_context(&*source)?;
    let layout = layout_of(&*source);
    let slot = source.lookup(layout.context);
    let context = slot.map(|s| (LibContext::for_slot(s as usize), AtomicUsize::new(0)));
    let lib = Module::new(LibraryModule { source: ManuallyDrop::new(source.clone()), abi: layout.abi, context });
    if let (Some(slot), Some((ctx, header))) = (slot, &lib.node::<LibraryModule>().expect("just made").context) {
        header.store(lib.as_ptr() as usize, Ordering::Relaxed);
        ctx.register(&lib);
        // SAFETY: the context slot is a writable `void*` global of the library.
        unsafe { symbols::write_slot(slot, Arc::as_ptr(ctx).cast_mut().cast()) };
    }
    match source.lookup(layout.blob) {
        Some(addr) => {
            // SAFETY: the symbol is the module blob: a u64 length followed by the bytes.
            let bytes = unsafe { symbols::read_blob(addr.cast()) };
            let root = blob::load_tree_in(layout.container, bytes, lib)?;
            // Parsed: every module copied what it keeps (a factory's weights among them, which a
            // prepared file may replace at once), so the blob's pages, as large as the embedded
            // weights, need not stay resident.
            pages::release_read_only(bytes);
            Ok(root)
        }
        None => Ok(lib),
    }
}

/// Loads an `export_library` shared object: the root module of its tree.
/// (In a process whose files are confined, `crate::files`, the path must resolve beneath its
/// directory through no link.)
pub fn load_shared_library(path: &str) -> Result<ObjRef<Module>> {
    let resolved = crate::files::existing_file(std::path::Path::new(path))?;
    let resolved = resolved.to_str().ok_or_else(|| Error::value(format!("'{path}' is not UTF-8")))?;
    finish(Arc::new(Dso::open(resolved)?)).map_err(|e| e.context(format!("loading '{path}'")))
}

/// `runtime.SystemLib(prefix)`: the operators linked into the host.
pub fn system_lib(prefix: &str) -> Result<ObjRef<Module>> {
    finish(Arc::new(SystemLib { prefix: prefix.to_string() }))
}

/// `runtime.ModuleLoadFromFile` / `TVMModLoadFromFile`.
pub fn load_file(path: &str, format: &str) -> Result<ObjRef<Module>> {
    // Through the fork gate: a fork waits for a load in flight (see `backend::fork`).
    let _inside = crate::backend::fork::inside();
    load_plugins_from_env()?;
    let fmt = if format.is_empty() {
        std::path::Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .ok_or_else(|| Error::value(format!("cannot deduce the format of '{path}' (no file extension)")))?
    } else {
        format
    };
    match fmt {
        "so" | "dll" | "dylib" | "dso" => {
            if crate::files::confinement().is_none() && !std::path::Path::new(path).exists() {
                return Err(Error::value(format!("cannot load '{path}': no such file")));
            }
            load_shared_library(path)
        }
        // Any other format is a registered loader's (`runtime.module.loadfile_<format>`), a
        // plug-in's among them, as upstream asks.
        other => plugin::load_file(path, other).unwrap_or_else(|| {
            let mut formats = plugin::registered("runtime.module.loadfile_");
            formats.sort_unstable();
            Err(Error::value(format!(
                "Loader for .{other} files is not registered (runtime.module.loadfile_{other}); registered formats: {}. \
                 A plug-in that reads them registers that function when it is loaded",
                formats.join(", ")
            )))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::RetValue;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    /// A loaded image standing in for a file: its context slot is at `slot`, and as it goes it
    /// notes whether a context can still be found there.
    struct Image {
        slot: usize,
        context_found_as_it_went: Arc<AtomicBool>,
    }

    impl SymbolSource for Image {
        fn lookup(&self, name: &str) -> Option<*mut c_void> {
            (name == "__tvm_module_ctx").then_some(self.slot as *mut c_void)
        }
        fn describe(&self) -> String {
            "a test image".into()
        }
    }

    impl Drop for Image {
        fn drop(&mut self) {
            self.context_found_as_it_went.store(context::live_at(self.slot), Ordering::SeqCst);
        }
    }

    /// Loads an image with its slot at `slot`, hands its kernels a function that only the
    /// context (and the caller) hold, lets the library go, and gives back that function and
    /// whether the context outlived the image.
    fn load_hand_out_and_drop(slot: usize, name: &str) -> (ObjRef<PackedFunc>, bool) {
        crate::init();
        let went = Arc::new(AtomicBool::new(false));
        let lib = finish(Arc::new(Image { slot, context_found_as_it_went: went.clone() })).unwrap();
        registry::register(name, PackedFunc::native(|_| Ok(RetValue::Int(7))), true).unwrap();
        // SAFETY: the slot holds what `finish` wrote there, the image's context.
        let ctx = unsafe { (slot as *const *mut c_void).read() };
        let handed = get_func_from_env(ctx, name).unwrap();
        registry::remove(name);
        let f = counted(handed);
        drop(lib);
        (f, went.load(Ordering::SeqCst))
    }

    /// A count of our own on the function at `header` (the handle a kernel would keep).
    fn counted(header: *mut ObjectHeader) -> ObjRef<PackedFunc> {
        // SAFETY: `header` is a live function the context holds.
        unsafe { crate::object::AnyObject::try_retain_raw(header) }.unwrap().downcast::<PackedFunc>().ok().unwrap()
    }

    /// The context goes before the image does: an image mapped at the same address afterwards
    /// must not find this one's cached functions. Those stay while something is mapped at the
    /// slot (a kernel there holds their handles) and go with the mapping.
    #[test]
    fn a_context_goes_before_its_image_and_its_functions_go_with_the_mapping() {
        // Inside this binary's image: still mapped after the library goes.
        static MAPPED_SLOT: AtomicUsize = AtomicUsize::new(0);
        let (f, outlived) = load_hand_out_and_drop(MAPPED_SLOT.as_ptr() as usize, "tvmrt.test.retired_mapped");
        assert!(!outlived, "the context was still found as its image went");
        assert_eq!(f.ref_count(), 2, "a function handed to a still-mapped image's kernels was let go");
        // On the heap: mapped by no image, so nothing can call what was handed out.
        let heap_slot = Box::new(0usize);
        let (f, outlived) = load_hand_out_and_drop(&*heap_slot as *const usize as usize, "tvmrt.test.retired_gone");
        assert!(!outlived);
        assert_eq!(f.ref_count(), 1, "a function handed to an image gone was kept");
    }
}
