//! What the C++ layer (`cxx/*.cc`, linked into this library) defines and every object carries:
//! the symbols C++ provides (a module's vtable, a function object's call shim, the mirror of a
//! module's imports, a host module's virtual calls) and the layouts both sides read. Link-time
//! facts, present before any object is made, so the object, packed-function and module layers take
//! them from here, the bottom layer, and the C++ face (`cxx/`) is never imported from below.
//! Depends on nothing but `dlpack`.
//!
//! Layouts the two sides share are checked at compile time on both: C++ `static_assert`s in
//! `cxx/runtime.h`, Rust `const` assertions beside each type (`object::ObjectHeader`,
//! `module::Module`, `packed::PackedFunc`, `tensor::NDArray`) and below.

#![allow(clippy::missing_safety_doc)]

use crate::dlpack::{PackedCFn, TVMBackendPackedCFunc, TVMValue};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void};

/// `TVMArgs` as C++ passes it: by value, in memory.
#[repr(C)]
pub struct CxxArgs {
    pub values: *const TVMValue,
    pub codes: *const i32,
    pub num_args: i32,
}

extern "C" {
    /// The vtable pointer core modules carry 8 bytes before their object header (their C++
    /// class's, whose methods call back through the C API).
    pub(crate) fn tvmrt_cxx_module_vptr() -> *const c_void;
    /// The C++ call shim every function object carries right after its header; only its address
    /// is taken on this side.
    pub(crate) fn tvmrt_cxx_call_packed(obj: *const c_void, args: CxxArgs, rv: *mut c_void);
    /// A host module's function `name`, as one of this runtime's (null when it has none).
    pub(crate) fn tvmrt_cxx_host_module_get_function(
        obj: *mut c_void,
        name: *const c_char,
        out: *mut *mut c_void,
    ) -> c_int;
    /// One of this runtime's modules for the host's module `obj` (a new count; null with the last
    /// error set on failure).
    pub(crate) fn tvmrt_cxx_native_module(obj: *mut c_void) -> *mut c_void;
    /// A host module's type key (its virtual `type_key()`).
    pub(crate) fn tvmrt_cxx_host_module_type_key(obj: *mut c_void) -> *const c_char;
    /// A host module's source in `format` (what 0) or its format (what 1), as a copy to free()
    /// (a C status; the last error on failure).
    pub(crate) fn tvmrt_cxx_host_module_text(
        obj: *mut c_void,
        what: c_int,
        format: *const c_char,
        out: *mut *mut c_char,
    ) -> c_int;
    /// A host module's virtual `SaveToFile`.
    pub(crate) fn tvmrt_cxx_host_module_save(obj: *mut c_void, path: *const c_char, format: *const c_char) -> c_int;
    /// Appends one of this runtime's modules (borrowed) to a host module's `imports_`.
    pub(crate) fn tvmrt_cxx_host_module_import(obj: *mut c_void, dep: *mut c_void) -> c_int;
    /// A host module's `imports_`: their count, and up to `cap` of them into `out` as modules of
    /// this runtime (new counts; the count written is the smaller).
    pub(crate) fn tvmrt_cxx_host_module_imports(obj: *mut c_void, out: *mut *mut c_void, cap: usize) -> usize;
    /// Empties a host module's `imports_`.
    pub(crate) fn tvmrt_cxx_host_module_clear_imports(obj: *mut c_void);
    /// A `dmlc::Stream*` whose reads call `read(ctx, dst, n)` (null when out of memory).
    pub(crate) fn tvmrt_cxx_read_stream_new(
        read: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> usize,
        ctx: *mut c_void,
    ) -> *mut c_void;
    pub(crate) fn tvmrt_cxx_read_stream_free(stream: *mut c_void);
    /// Rebuilds the `std::vector<Module>` at `vector` from `n` module handles (counts of its own).
    fn tvmrt_cxx_set_imports(vector: *mut c_void, modules: *const *mut c_void, n: usize);
    /// Destroys the vector at `vector` (three nulls: an empty one).
    fn tvmrt_cxx_drop_imports(vector: *mut c_void);
    /// Calls an operator of a loaded library (`cxx/guard.cc`): a C++ exception it throws, which
    /// would abort the process on reaching a Rust frame, comes back as -1 and the last error.
    pub(crate) fn tvmrt_cxx_guarded_kernel(
        func: TVMBackendPackedCFunc,
        args: *mut TVMValue,
        codes: *mut i32,
        num_args: i32,
        ret: *mut TVMValue,
        ret_code: *mut i32,
        resource: *mut c_void,
    ) -> i32;
    /// Calls a tvm-ffi kernel (TVM 0.21 and later), likewise.
    pub(crate) fn tvmrt_cxx_guarded_ffi_kernel(
        func: crate::dlpack::SafeCall,
        this: *mut c_void,
        args: *const crate::dlpack::TVMFFIAny,
        num_args: i32,
        result: *mut crate::dlpack::TVMFFIAny,
    ) -> i32;
    /// Calls a host's callback, likewise.
    pub(crate) fn tvmrt_cxx_guarded_callback(
        func: PackedCFn,
        args: *mut TVMValue,
        codes: *mut i32,
        num_args: i32,
        ret: *mut c_void,
        resource: *mut c_void,
    ) -> i32;
}

/// The `std::vector<Module>` C++ hosts read as a module's `imports_` (upstream's `ModuleNode`
/// layout puts it right after the object header; the headers' inline `imports()` returns it). The
/// module's own list stays authoritative; this mirror is rebuilt by the C++ layer
/// (`cxx/modules.cc`) whenever that list changes, and holds counts of its own. Three pointers:
/// an empty `std::vector` is three nulls, which is how a module starts.
#[repr(C)]
pub struct CxxImports {
    words: UnsafeCell<[usize; 3]>,
}

// libstdc++'s std::vector: begin, end, end of storage.
const _: () = assert!(std::mem::size_of::<CxxImports>() == 3 * std::mem::size_of::<*const c_void>());

// SAFETY: written only through `set`, which takes the module's import list mutably (its lock held).
unsafe impl Sync for CxxImports {}
// SAFETY: as above; the counts it holds are atomic.
unsafe impl Send for CxxImports {}

impl Default for CxxImports {
    fn default() -> Self {
        CxxImports { words: UnsafeCell::new([0; 3]) }
    }
}

impl CxxImports {
    /// Rebuilds the mirror from `imports`, the module's list, borrowed mutably: the caller holds its
    /// write lock, so nobody else rebuilds at the same time. `handle` gives each one's object.
    pub fn set<T>(&self, imports: &mut [T], handle: fn(&T) -> *mut c_void) {
        let handles: Vec<*mut c_void> = imports.iter().map(handle).collect();
        // SAFETY: the vector's storage is ours, written by no one else (see above); the handles are
        // live modules, of which the C++ layer takes counts of its own.
        unsafe { tvmrt_cxx_set_imports(self.words.get().cast(), handles.as_ptr(), handles.len()) }
    }
}

impl Drop for CxxImports {
    fn drop(&mut self) {
        // SAFETY: a vector made by `set`, or the three nulls of an empty one; destroyed once.
        unsafe { tvmrt_cxx_drop_imports(self.words.get().cast()) }
    }
}

/// Upstream's ModuleNode starts with a vtable pointer, 8 bytes before the object header that
/// handles point at: C++ hosts make virtual calls (`mod->type_key()`) through it. Module cells carry
/// the vtable of `cxx/modules.cc`'s module class, whose methods call back through the C API.
#[repr(C)]
pub struct ModulePrefix {
    vptr: *const c_void,
}

// SAFETY: the address of static, immutable data.
unsafe impl Send for ModulePrefix {}
// SAFETY: as above.
unsafe impl Sync for ModulePrefix {}

impl Default for ModulePrefix {
    fn default() -> ModulePrefix {
        // SAFETY: returns the address of a static vtable; no arguments, no state.
        ModulePrefix { vptr: unsafe { tvmrt_cxx_module_vptr() } }
    }
}
