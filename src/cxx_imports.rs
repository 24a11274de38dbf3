//! The `std::vector<Module>` C++ hosts read as a module's `imports_` (upstream's `ModuleNode`
//! layout puts it right after the object header; the headers' inline `imports()` returns it). The
//! module's own list stays authoritative; this mirror is rebuilt by the C++ layer
//! (`cxx/runtime.cc`) whenever that list changes, and holds counts of its own.

use crate::module::Module;
use crate::object::{ObjRef, ObjectHeader};
use std::cell::UnsafeCell;
use std::ffi::c_void;

extern "C" {
    fn tvmrt_cxx_set_imports(vector: *mut c_void, modules: *const *mut ObjectHeader, n: usize);
    fn tvmrt_cxx_drop_imports(vector: *mut c_void);
}

/// Three pointers: an empty `std::vector` is three nulls, which is how a module starts.
#[repr(C)]
pub struct CxxImports {
    words: UnsafeCell<[usize; 3]>,
}

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
    /// write lock, so nobody else rebuilds at the same time.
    pub fn set(&self, imports: &mut [ObjRef<Module>]) {
        let handles: Vec<*mut ObjectHeader> = imports.iter().map(ObjRef::as_ptr).collect();
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
