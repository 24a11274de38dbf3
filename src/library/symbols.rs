//! Where operator symbols come from: a dlopen'ed shared library or the system-library table that
//! `--system-lib` objects fill from their static constructors. Reading and writing the data
//! symbols a library exports happens here.

use crate::error::{Error, Result};
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

pub trait SymbolSource: Send + Sync {
    fn lookup(&self, name: &str) -> Option<*mut c_void>;
    fn describe(&self) -> String;
    /// A digest of the file the code was loaded from, as it was loaded; `None` for code that is
    /// not a file of its own (the system library).
    fn file_digest(&self) -> Option<u64> {
        None
    }
}

pub struct Dso {
    lib: libloading::os::unix::Library,
    path: String,
    /// The file `dlopen` loaded, held open: its bytes stay readable after the path is replaced
    /// (an atomic redeploy), so its digest is that of the code that runs.
    file: Option<std::fs::File>,
    digest: std::sync::OnceLock<Option<u64>>,
}

/// The file's identity: the same device and inode is the same file.
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl Dso {
    pub fn open(path: &str) -> Result<Dso> {
        let named_file = std::path::Path::new(path).is_file();
        if named_file {
            super::elf::check_complete(path)?;
        }
        // The file is opened before dlopen, and is the one dlopen loaded if the path still names
        // it afterwards; a path replaced in between is tried again.
        for _ in 0..3 {
            let file = named_file.then(|| std::fs::File::open(path).ok()).flatten();
            let lib = load(path, file.as_ref())?;
            let same = match (&file, std::fs::metadata(path)) {
                (Some(f), Ok(now)) => f.metadata().is_ok_and(|held| identity(&held) == identity(&now)),
                _ => true,
            };
            if same {
                return Ok(Dso { lib, path: path.to_string(), file, digest: std::sync::OnceLock::new() });
            }
        }
        Err(Error::value(format!("cannot load library '{path}': the file keeps being replaced while it loads")))
    }
}

/// `dlopen`s a model library. RTLD_LOCAL keeps two models' same-named kernels apart. RTLD_NOW
/// (upstream loads lazily) resolves every symbol before any code of the library runs: a symbol
/// nowhere to be found is an error here, not a "symbol lookup error" that ends the process at
/// the first call.
///
/// A system-lib build calls this runtime's C API by name (`TVMBackendRegisterSystemLibSymbol`
/// from a static constructor, `TVMBackend*` from its kernels). Hosts that link the runtime have
/// those names in the global scope; one that loaded it locally (Python's ctypes, our package)
/// does not, or has another TVM runtime's there: the library is then loaded from a copy whose
/// references to this runtime's names are renamed and bound to it alone (see [`super::bridge`]).
///
/// `held` is the file as opened before loading (its names, and the copy's bytes, are read from
/// it: the very file whose identity the caller checks).
fn load(path: &str, held: Option<&std::fs::File>) -> Result<libloading::os::unix::Library> {
    let open = |p: &str| {
        // SAFETY: loading runs the library's constructors; loading a model library is exactly
        // what the caller asked for.
        unsafe { libloading::os::unix::Library::open(Some(p), libc::RTLD_NOW | libc::RTLD_LOCAL) }
    };
    let failed = |e: &dyn std::fmt::Display| Error::value(format!("cannot load library '{path}': {e}"));
    // Files that are not ELF libraries are left to dlopen to judge (and name).
    let refs = held.and_then(|mut f| super::bridge::undefined_names(&mut f).ok()).unwrap_or_default();
    let ours: Vec<(super::bridge::Reference, *mut c_void)> = match OwnImage::open() {
        Some(image) => refs.into_iter().filter_map(|r| image.symbol(&r.name).map(|a| (r, a))).collect(),
        None => Vec::new(),
    };
    // Nothing of ours, or every name already ours in the global scope (a host linking the runtime).
    // The global scope as a library loaded now sees it: the main program's handle (RTLD_DEFAULT
    // from here would search this runtime's own scope too).
    // SAFETY: dlopen(NULL) returns the main program's handle, never loading anything.
    let global = unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_LAZY) };
    let global_is_ours = |name: &str, addr: *mut c_void| {
        let Ok(cname) = std::ffi::CString::new(name) else { return false };
        // SAFETY: a lookup by a NUL-terminated name in the main program's handle.
        !global.is_null() && unsafe { libc::dlsym(global, cname.as_ptr()) } == addr
    };
    let plain = ours.iter().all(|(r, addr)| global_is_ours(&r.name, *addr));
    if !global.is_null() {
        // SAFETY: the handle dlopen(NULL) gave, closed once.
        unsafe { libc::dlclose(global) };
    }
    // (Names of ours were read from the held file: when there are any, there is one.)
    let (false, Some(mut file)) = (plain, held) else {
        return open(path).map_err(|e| failed(&e));
    };
    let renames = bridge_names(&ours).map_err(|e| failed(&e))?;
    let mut bytes = Vec::new();
    std::io::Seek::rewind(&mut file)
        .and_then(|_| std::io::Read::read_to_end(&mut file, &mut bytes))
        .map_err(|e| Error::io(path, e))?;
    let copy = super::bridge::with_renamed(&bytes, &renames).map_err(|e| failed(&e))?;
    let file = loadable_copy(&copy, "tvmrt-model").map_err(|e| failed(&e))?;
    open(&file.path()).map_err(|e| failed(&e))
}

/// A file holding `bytes` for `dlopen`, under a name no other load has (the loader takes a name
/// it has loaded already for that library), in a directory of its own that only this user can
/// enter (nobody can swap the file between writing and loading); both are removed when it drops
/// (the loaded image stays mapped).
struct LoadableCopy {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
}

impl LoadableCopy {
    fn path(&self) -> String {
        self.file.to_string_lossy().into_owned()
    }
}

impl Drop for LoadableCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn loadable_copy(bytes: &[u8], name: &str) -> Result<LoadableCopy> {
    use std::os::unix::ffi::OsStrExt;
    let template = std::env::temp_dir().join("tvmrt-load-XXXXXX");
    let mut raw = template.as_os_str().as_bytes().to_vec();
    raw.push(0);
    // SAFETY: mkdtemp fills in the template's Xs in place (a NUL-terminated buffer of ours) and
    // makes the directory with mode 0700.
    let made = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(Error::tvm(format!("a private directory to load from: {}", std::io::Error::last_os_error())));
    }
    raw.pop();
    let dir = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&raw));
    let copy = LoadableCopy { file: dir.join(format!("{name}.so")), dir };
    std::fs::write(&copy.file, bytes).map_err(|e| Error::io(copy.path(), e))?;
    Ok(copy)
}

/// The names bridged so far, by this runtime's name: each renamed once for the process, its
/// absolute symbol in an object loaded globally once.
static BRIDGED: Lazy<Mutex<HashMap<String, String>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// The new name of each reference to one of this runtime's names, with every new name answered
/// in the global scope by an object of absolute symbols (made and loaded here for names not
/// bridged before).
fn bridge_names(refs: &[(super::bridge::Reference, *mut c_void)]) -> Result<Vec<(super::bridge::Reference, String)>> {
    let mut bridged = BRIDGED.lock().unwrap_or_else(|e| e.into_inner());
    let mut fresh: Vec<(String, String, u64)> = Vec::new();
    for (r, addr) in refs {
        if bridged.contains_key(&r.name) || fresh.iter().any(|(n, _, _)| *n == r.name) {
            continue;
        }
        let renamed = super::bridge::renamed(&r.name, bridged.len() + fresh.len())
            .ok_or_else(|| Error::value(format!("cannot bridge the name '{}'", r.name)))?;
        fresh.push((r.name.clone(), renamed, *addr as u64));
    }
    if !fresh.is_empty() {
        let symbols: Vec<(String, u64)> = fresh.iter().map(|(_, renamed, addr)| (renamed.clone(), *addr)).collect();
        let machine = if cfg!(target_arch = "aarch64") { 183 } else { 62 };
        let object = super::bridge::object(machine, "libtvmrt-bridge.so", &symbols);
        let file = loadable_copy(&object, "tvmrt-bridge")?;
        // SAFETY: an object of absolute symbols only: no code, no constructors. Loaded globally
        // (its names hold a `~`: no other library refers to them) and kept for the process.
        let lib = unsafe { libloading::os::unix::Library::open(Some(file.path()), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
            .map_err(|e| Error::tvm(format!("loading the bridge to the runtime's C API: {e}")))?;
        std::mem::forget(lib);
        // Answered now: later loads reuse these names.
        for (name, renamed, _) in fresh {
            bridged.insert(name, renamed);
        }
    }
    Ok(refs.iter().map(|(r, _)| (r.clone(), bridged[&r.name].clone())).collect())
}

/// This runtime's own image, opened once per load to look up the names it defines.
struct OwnImage {
    handle: *mut c_void,
    /// Where the image is mapped: an address whose image starts here is the image's own.
    base: *mut c_void,
}

impl OwnImage {
    fn open() -> Option<OwnImage> {
        // SAFETY: dladdr fills plain data (all zeros is valid) for an address of this image; the
        // file name it gives is the loader's NUL-terminated string, and RTLD_NOLOAD only reopens
        // the image already loaded.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(OwnImage::open as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            let handle = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            // (Not `then_some`: it would build, and so drop and close, an image of a null handle.)
            if handle.is_null() {
                return None;
            }
            Some(OwnImage { handle, base: info.dli_fbase })
        }
    }

    /// The address of `name` if the image defines and exports it (not a name of a library it
    /// depends on, which a lookup in its handle also finds).
    fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let cname = std::ffi::CString::new(name).ok()?;
        // SAFETY: a lookup by a NUL-terminated name in our own handle, and the image that address
        // is in (dladdr fills plain data).
        unsafe {
            let a = libc::dlsym(self.handle, cname.as_ptr());
            let mut info: libc::Dl_info = std::mem::zeroed();
            let ours = !a.is_null() && libc::dladdr(a, &mut info) != 0 && info.dli_fbase == self.base;
            ours.then_some(a)
        }
    }
}

impl Drop for OwnImage {
    fn drop(&mut self) {
        // SAFETY: the handle `open` got, closed once.
        unsafe { libc::dlclose(self.handle) };
    }
}

impl SymbolSource for Dso {
    fn lookup(&self, name: &str) -> Option<*mut c_void> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        // SAFETY: we only take the address; its use is decided by the caller.
        unsafe { self.lib.get::<*mut c_void>(&cname) }.ok().map(|s| *s).filter(|p| !p.is_null())
    }

    fn describe(&self) -> String {
        self.path.clone()
    }

    /// Read once, from the file held open since loading.
    fn file_digest(&self) -> Option<u64> {
        *self.digest.get_or_init(|| {
            use std::os::unix::fs::FileExt;
            let file = self.file.as_ref()?;
            let len = file.metadata().ok()?.len() as usize;
            let mut bytes = vec![0u8; len];
            file.read_exact_at(&mut bytes, 0).ok()?;
            Some(crate::digest::xxh64(&bytes))
        })
    }
}

static SYSTEM_LIB: Lazy<Mutex<HashMap<String, usize>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// `TVMBackendRegisterSystemLibSymbol`.
pub fn register_system_symbol(name: &str, ptr: *mut c_void) {
    SYSTEM_LIB.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), ptr as usize);
}

pub struct SystemLib {
    pub prefix: String,
}

impl SymbolSource for SystemLib {
    fn lookup(&self, name: &str) -> Option<*mut c_void> {
        let table = SYSTEM_LIB.lock().unwrap_or_else(|e| e.into_inner());
        table.get(&format!("{}{name}", self.prefix)).or_else(|| table.get(name)).map(|&p| p as *mut c_void)
    }

    fn describe(&self) -> String {
        format!("system library '{}'", self.prefix)
    }
}

/// Whether `addr`, an address `lookup` found, is a function rather than data. Answers from the
/// dynamic symbol table; symbols it cannot see (a system library linked into the host) pass.
pub fn is_function(addr: usize) -> bool {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    const STT_FUNC: u8 = 2;
    const STT_GNU_IFUNC: u8 = 10;
    // SAFETY: dladdr1 only reads the loader's tables; both out-pointers are ours.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut sym: *mut c_void = std::ptr::null_mut();
        if libc::dladdr1(addr as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) == 0 || sym.is_null() {
            return true;
        }
        let sym = &*sym.cast::<libc::Elf64_Sym>();
        if sym.st_value as usize + info.dli_fbase as usize != addr && info.dli_saddr as usize != addr {
            return true;
        }
        matches!(sym.st_info & 0xf, STT_FUNC | STT_GNU_IFUNC)
    }
}

/// Stores `value` into a pointer-sized data symbol (the model's context slots).
///
/// # Safety
/// `slot` must be the address of a writable pointer-sized global, as TVM's codegen emits them.
pub unsafe fn write_slot(slot: *mut c_void, value: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { slot.cast::<*mut c_void>().write(value) }
}

/// Reads the `__tvm_dev_mblob` byte array at `addr`: a u64 length, then that many bytes.
///
/// # Safety
/// `addr` must be the address of a module blob exported by a loaded library.
pub unsafe fn read_blob<'a>(addr: *const u8) -> &'a [u8] {
    // SAFETY: per the contract, the blob starts with its length.
    unsafe {
        let len = addr.cast::<u64>().read_unaligned() as usize;
        std::slice::from_raw_parts(addr.add(8), len)
    }
}

/// Reads a NUL-terminated string symbol (`__tvm_main__`).
///
/// # Safety
/// `addr` must be the address of a NUL-terminated string in a loaded library.
pub unsafe fn read_c_str(addr: *const c_void) -> String {
    // SAFETY: per the contract.
    unsafe { std::ffi::CStr::from_ptr(addr.cast()) }.to_string_lossy().into_owned()
}

/// Has forks take the table of system-lib symbols.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&*SYSTEM_LIB);
}

/// Loads a plug-in (a library written against upstream's headers that registers globals, module
/// types and loaders from its static constructors) for the life of the process: its code stays
/// mapped, as the functions it registered point into it. Its references to this runtime's names
/// bind to this runtime as a model library's do (bridged when another runtime holds the global
/// scope). A plug-in names `libtvm_runtime.so` as a dependency: where this runtime is linked into
/// the program (the tool) and no library of that name is loaded, an empty one of that name is,
/// so the dependency is met by what is already here instead of a second runtime from disk.
/// A file loaded before (by its identity, whatever the path) is not loaded again: its
/// constructors would register its names a second time, which upstream's registry refuses by
/// ending the process.
pub(crate) fn load_plugin(path: &str) -> Result<()> {
    static LOADED: Lazy<Mutex<Plugins>> = Lazy::new(Default::default);
    let held = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let id = identity(&held.metadata().map_err(|e| Error::io(path, e))?);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    match loaded.seen(path, id) {
        Seen::Loaded => return Ok(()),
        Seen::Replaced => {
            eprintln!(
                "tvm_runtime: the plug-in '{path}' was replaced since it was loaded; the version loaded \
                 first stays in use (its globals are registered once per process: restart to load the new one)"
            );
            return Ok(());
        }
        Seen::New => {}
    }
    provide_runtime_soname()?;
    let lib = load(path, Some(&held))?;
    std::mem::forget(lib);
    loaded.insert(path, id);
    Ok(())
}

/// The plug-ins loaded in this process: by the path they were loaded from (as dlopen and Python's
/// `ctypes.CDLL` treat a path already loaded: the same library, whatever the file holds now) and by
/// the file's identity (the same file under another path). Loading a plug-in twice runs its
/// constructors twice, which register its globals again: upstream's registry aborts the process.
#[derive(Default)]
struct Plugins {
    paths: HashMap<String, (u64, u64)>,
    /// Paths whose replacement was reported (once each).
    reported: std::collections::HashSet<String>,
    files: std::collections::HashSet<(u64, u64)>,
}

#[derive(Debug, PartialEq)]
enum Seen {
    New,
    Loaded,
    /// Loaded from this path, whose file was replaced since: reported the first time.
    Replaced,
}

impl Plugins {
    fn seen(&mut self, path: &str, id: (u64, u64)) -> Seen {
        match self.paths.get(path) {
            Some(first) if *first != id => {
                if self.reported.insert(path.to_string()) {
                    Seen::Replaced
                } else {
                    Seen::Loaded
                }
            }
            Some(_) => Seen::Loaded,
            None if self.files.contains(&id) => Seen::Loaded,
            None => Seen::New,
        }
    }

    fn insert(&mut self, path: &str, id: (u64, u64)) {
        self.paths.insert(path.to_string(), id);
        self.files.insert(id);
    }
}

fn provide_runtime_soname() -> Result<()> {
    static PROVIDED: Mutex<bool> = Mutex::new(false);
    let mut provided = PROVIDED.lock().unwrap_or_else(|e| e.into_inner());
    if *provided {
        return Ok(());
    }
    // SAFETY: RTLD_NOLOAD loads nothing: a handle to a library of that name already loaded, or null.
    let loaded = unsafe { libc::dlopen(c"libtvm_runtime.so".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if !loaded.is_null() {
        // SAFETY: the handle just taken, given back once.
        unsafe { libc::dlclose(loaded) };
    } else {
        let machine = if cfg!(target_arch = "aarch64") { 183 } else { 62 };
        let object = super::bridge::object(machine, "libtvm_runtime.so", &[]);
        let file = loadable_copy(&object, "libtvm_runtime")?;
        // SAFETY: an object with no symbols, code or constructors, kept for the process.
        let lib = unsafe { libloading::os::unix::Library::open(Some(file.path()), libc::RTLD_NOW | libc::RTLD_LOCAL) }
            .map_err(|e| Error::tvm(format!("standing in for libtvm_runtime.so: {e}")))?;
        std::mem::forget(lib);
    }
    *provided = true;
    Ok(())
}

/// The loaded objects' file names (the main program's is empty and left out).
fn loaded_objects() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: libc::size_t, data: *mut c_void) -> libc::c_int {
        // SAFETY: the loader's record, valid for the call; `data` is the list below.
        let (info, names) = unsafe { (&*info, &mut *data.cast::<Vec<std::ffi::CString>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated name the loader keeps.
            let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) };
            if !name.to_bytes().is_empty() {
                names.push(name.to_owned());
            }
        }
        0
    }
    let mut names: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: `visit` only reads the records and pushes to `names`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut names as *mut Vec<std::ffi::CString>).cast()) };
    names
}

/// Calls `f` with the blob `symbol` (a u64 length, then the bytes) of each loaded object that
/// defines it, as the object maps it. Each such object is held loaded until `f` returns: another
/// thread letting go of it meanwhile (a model unloaded while another loads) cannot unmap what `f`
/// reads.
pub fn with_loaded_blobs<R>(symbol: &std::ffi::CStr, f: impl FnOnce(&[&[u8]]) -> R) -> R {
    /// Counts taken on loaded objects, given back on drop (a panic in `f` included).
    struct Holds(Vec<*mut c_void>);
    impl Drop for Holds {
        fn drop(&mut self) {
            for &h in &self.0 {
                // SAFETY: a handle RTLD_NOLOAD gave below, given back once.
                unsafe { libc::dlclose(h) };
            }
        }
    }
    let mut holds = Holds(Vec::new());
    let mut blobs: Vec<&[u8]> = Vec::new();
    for name in loaded_objects() {
        // SAFETY: RTLD_NOLOAD only finds an object still loaded (it loads nothing, runs no
        // constructor) and takes a count on it, which `holds` gives back after `f`.
        unsafe {
            let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if h.is_null() {
                continue;
            }
            holds.0.push(h);
            let addr = libc::dlsym(h, symbol.as_ptr());
            if !addr.is_null() {
                // The object's blob, mapped while `holds` keeps the object.
                let blob = read_blob(addr.cast());
                if !blobs.iter().any(|b| b.as_ptr() == blob.as_ptr()) {
                    blobs.push(blob);
                }
            }
        }
    }
    f(&blobs)
}

#[cfg(test)]
mod plugin_tests {
    use super::{Plugins, Seen};

    #[test]
    fn a_path_loaded_once_stays_loaded_and_a_replaced_file_is_reported_once() {
        let mut p = Plugins::default();
        assert_eq!(p.seen("/a/p.so", (1, 10)), Seen::New);
        p.insert("/a/p.so", (1, 10));
        assert_eq!(p.seen("/a/p.so", (1, 10)), Seen::Loaded);
        // The same file under another name (a link) is the library already loaded.
        assert_eq!(p.seen("/b/link.so", (1, 10)), Seen::Loaded);
        // Replaced by a rebuild: kept, and said once.
        assert_eq!(p.seen("/a/p.so", (1, 11)), Seen::Replaced);
        assert_eq!(p.seen("/a/p.so", (1, 11)), Seen::Loaded);
        // Another file at another path is new.
        assert_eq!(p.seen("/a/q.so", (1, 12)), Seen::New);
    }
}
