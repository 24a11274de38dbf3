//! The `std::vector<Module>` C++ hosts read as a module's `imports_` (upstream's `ModuleNode`
//! layout puts it right after the object header; the headers' inline `imports()` returns it). The
//! module's own list stays authoritative; this mirror is rebuilt by the C++ layer
//! (`cxx/modules.cc`) whenever that list changes, and holds counts of its own.

use super::{tvmrt_cxx_drop_imports, tvmrt_cxx_set_imports};
use std::cell::UnsafeCell;
use std::ffi::c_void;

/// Three pointers: an empty `std::vector` is three nulls, which is how a module starts.
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
