//! The Rust side of the bridge to the C++ layer (`cxx/`), which gives C++ hosts the classes and
//! functions upstream's headers declare. Every bridge symbol is declared once for both sides in
//! `cxx/bridge.h`. Here: the ones C++ defines, with the types they pass (this file and `imports`
//! depend on nothing but `dlpack`, so every layer may call down into them), and the ones Rust
//! defines for C++, `extern "C"` functions like the C boundary's but left out of the public header
//! (`objects`, `host_module`, `threading`).
//!
//! Layouts the two sides share are checked at compile time on both: C++ `static_assert`s in
//! `cxx/runtime.h`, Rust `const` assertions beside each type (`object::ObjectHeader`,
//! `module::Module`, `packed::PackedFunc`, `tensor::NDArray`) and in `imports`.

#![allow(clippy::missing_safety_doc)]

pub mod host_module;
pub(crate) mod imports;
pub mod objects;
pub mod threading;

use crate::dlpack::TVMValue;
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
    /// A host module's type key (its virtual `type_key()`).
    pub(crate) fn tvmrt_cxx_host_module_type_key(obj: *mut c_void) -> *const c_char;
    /// Rebuilds the `std::vector<Module>` at `vector` from `n` module handles (counts of its own).
    pub(crate) fn tvmrt_cxx_set_imports(vector: *mut c_void, modules: *const *mut c_void, n: usize);
    /// Destroys the vector at `vector` (three nulls: an empty one).
    pub(crate) fn tvmrt_cxx_drop_imports(vector: *mut c_void);
}
