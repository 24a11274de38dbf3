//! The tvm-ffi face: this runtime beside upstream's `libtvm_ffi.so` (TVM 0.22 and later's ABI),
//! as upstream's `libtvm_runtime.so` sits there. When the process has libtvm_ffi as this library
//! loads (TVM's Python, and C++ hosts built against tvm-ffi's headers, load it first), the
//! runtime registers with it what upstream's does ([`globals`]): then `tvm.runtime.load_module`
//! and `Module::LoadFromFile` of a TVM 0.22-0.27 library hand its Relax executable to this
//! runtime, and the VM it makes answers hosts through libtvm_ffi's module and function objects
//! ([`module`], with `cxx/ffi_module.cc`), its values crossing as `Any` cells ([`cells`]).
//!
//! Only tvm-ffi's C ABI is spoken ([`api`]), the part that stays put across apache-tvm-ffi 0.1.x;
//! nothing links it: a host that never loads libtvm_ffi never needs it.

pub mod api;
pub mod cells;
pub mod globals;
pub mod module;
pub mod values;

/// Registers with libtvm_ffi when the process has it; once. Returns whether it did.
pub fn bind() -> bool {
    static BOUND: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *BOUND.get_or_init(|| match api::api() {
        Some(api) => {
            crate::capi::init();
            let _ = crate::capi::ffi::ALSO_RAISE_IN.set(api.error_set_raised_from_parts);
            globals::register(api);
            true
        }
        None => false,
    })
}

/// Binds as the library loads: libtvm_ffi's loader asks for the executable loader by name, with
/// no call into this runtime before it.
#[used]
#[link_section = ".init_array"]
static BIND_AT_LOAD: extern "C" fn() = {
    extern "C" fn bind_at_load() {
        let _ = std::panic::catch_unwind(bind);
    }
    bind_at_load
};
