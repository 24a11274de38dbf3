//! What kernels of TVM 0.21 and later call through their context slots (tvm-ffi's C ABI names,
//! filled with this runtime's functions when their library loads) and the one tvm-ffi function
//! such a library imports by name, `TVMFFIErrorSetRaisedFromCStrParts`.
//!
//! Only that one name is exported: a host that also loads upstream's `libtvm_ffi.so` keeps its
//! own `TVMFFI*` functions, and this runtime's kernels reach ours through their slots.

use super::{c_str, fail, guard, guard_status};
use crate::error::{Error, Result};
use crate::last_error;
use crate::library::ffi_kernel::{index, TVMFFIAny};
use crate::packed::{ArgsBuilder, PackedFunc, RetValue};
use std::ffi::{c_char, c_int, c_void, CStr};

unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: callers pass NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn raise(kind: &str, message: &str) {
    let kind = if kind.is_empty() { "RuntimeError" } else { kind };
    last_error::set(&format!("{kind}: {message}"));
}

/// `TVMFFIErrorSetRaisedFromCStr(kind, message)`: the error a kernel reports before returning -1.
pub unsafe extern "C" fn ffi_error_set_raised(kind: *const c_char, message: *const c_char) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: C strings from the kernel.
        let (k, m) = unsafe { (text(kind), text(message)) };
        raise(&k, &m);
    });
}

/// `TVMFFIErrorSetRaisedFromCStrParts` of upstream's libtvm_ffi when the process has it (set by
/// the tvm-ffi face as it binds): a kernel of a library libtvm_ffi loaded may have bound its
/// import of that name to ours (a host that put this runtime first), and libtvm_ffi, which called
/// it, looks for the error in its own state.
pub static ALSO_RAISE_IN: once_cell::sync::OnceCell<unsafe extern "C" fn(*const c_char, *const *const c_char, i32)> =
    once_cell::sync::OnceCell::new();

/// The same with the message in parts (what TVM 0.22 and later kernels call directly).
#[no_mangle]
pub unsafe extern "C" fn TVMFFIErrorSetRaisedFromCStrParts(
    kind: *const c_char,
    parts: *const *const c_char,
    num_parts: i32,
) {
    if let Some(theirs) = ALSO_RAISE_IN.get() {
        // SAFETY: the caller's arguments, passed on as they came.
        unsafe { theirs(kind, parts, num_parts) };
    }
    let _ = std::panic::catch_unwind(|| {
        let mut message = String::new();
        if !parts.is_null() {
            for i in 0..num_parts.max(0) as usize {
                // SAFETY: `num_parts` C strings, as the caller says.
                message.push_str(&unsafe { text(*parts.add(i)) });
            }
        }
        // SAFETY: a C string from the kernel.
        raise(&unsafe { text(kind) }, &message);
    });
}

/// `TVMFFIEnvModLookupFromImports(library_ctx, name, out)`: a function for a kernel, found as
/// `TVMBackendGetFuncFromEnv` finds them (its handle is this runtime's function object, which
/// only the slot below calls).
pub unsafe extern "C" fn ffi_lookup_from_imports(
    ctx: *mut c_void,
    name: *const c_char,
    out: *mut *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the kernel's string and out-pointer.
        unsafe {
            let name = c_str(name, "function name")?;
            let f = crate::library::get_func_from_env(ctx, name)?;
            super::out(out, f.cast(), "TVMFFIEnvModLookupFromImports")
        }
    })
}

/// A cell as a classic argument.
fn push_cell(b: &mut ArgsBuilder, c: &TVMFFIAny) -> Result<()> {
    match c.type_index {
        index::NONE => b.null(),
        index::INT | index::BOOL => b.int(c.value as i64),
        index::FLOAT => b.float(f64::from_bits(c.value)),
        index::DATA_TYPE => {
            b.dtype(crate::dlpack::DLDataType::new(c.value as u8, (c.value >> 8) as u8, (c.value >> 16) as u16))
        }
        index::RAW_STR => {
            // SAFETY: a raw string cell holds a NUL-terminated string alive for the call.
            let s = unsafe { text(c.value as *const c_char) };
            b.str(&s)
        }
        // SAFETY: the kernel's own tensor or pointer, alive for the call; the callee's contract.
        index::DL_TENSOR_PTR | index::OPAQUE_PTR => unsafe { b.handle(c.value as *mut c_void) },
        t => return Err(Error::type_err(format!("a tvm-ffi value of type index {t} cannot be passed on"))),
    };
    Ok(())
}

/// `TVMFFIFunctionCall(func, args, n, result)` for the functions the lookup above hands out.
pub unsafe extern "C" fn ffi_function_call(
    func: *mut c_void,
    args: *mut TVMFFIAny,
    num_args: i32,
    result: *mut TVMFFIAny,
) -> c_int {
    guard_status(|| {
        // SAFETY: `func` came from `ffi_lookup_from_imports` (checked to be a function object);
        // `args` holds `num_args` cells and `result` one, as the caller says.
        unsafe {
            let Some(f) = crate::object::payload_of::<PackedFunc>(func.cast()) else {
                return fail(Error::type_err("TVMFFIFunctionCall: the handle is not a function of this runtime"));
            };
            let cells = if num_args <= 0 || args.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(args, num_args as usize)
            };
            let mut b = ArgsBuilder::new();
            for c in cells {
                if let Err(e) = push_cell(&mut b, c) {
                    return fail(e);
                }
            }
            let cell = match f.call(&b.args()) {
                Ok(RetValue::None) => TVMFFIAny::default(),
                Ok(RetValue::Int(i)) => TVMFFIAny { type_index: index::INT, small_len: 0, value: i as u64 },
                Ok(RetValue::Float(x)) => TVMFFIAny { type_index: index::FLOAT, small_len: 0, value: x.to_bits() },
                Ok(other) => {
                    return fail(Error::type_err(format!("a function returned {other:?} to a tvm-ffi kernel")))
                }
                Err(e) => return fail(e),
            };
            if !result.is_null() {
                result.write(cell);
            }
            0
        }
    })
}

static INIT_ONCE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `TVMFFIHandleInitOnce(addr, init)`: fills `*addr` once.
pub unsafe extern "C" fn ffi_handle_init_once(
    addr: *mut *mut c_void,
    init: Option<unsafe extern "C" fn(*mut *mut c_void) -> c_int>,
) -> c_int {
    guard_status(|| {
        let (Some(init), false) = (init, addr.is_null()) else {
            return fail(Error::value("TVMFFIHandleInitOnce: null address or function"));
        };
        let _one = INIT_ONCE.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's handle slot, written only here under the lock.
        unsafe {
            if (*addr).is_null() {
                let mut made = std::ptr::null_mut();
                let rc = init(&mut made);
                if rc != 0 {
                    return rc;
                }
                *addr = made;
            }
        }
        0
    })
}

/// The slots a tvm-ffi library has beside the classic ones.
pub fn context_functions() -> [(&'static str, *mut c_void); 5] {
    [
        ("__TVMFFIErrorSetRaisedFromCStr", ffi_error_set_raised as *mut c_void),
        ("__TVMFFIErrorSetRaisedFromCStrParts", TVMFFIErrorSetRaisedFromCStrParts as *mut c_void),
        ("__TVMFFIEnvModLookupFromImports", ffi_lookup_from_imports as *mut c_void),
        ("__TVMFFIFunctionCall", ffi_function_call as *mut c_void),
        ("__TVMFFIHandleInitOnce", ffi_handle_init_once as *mut c_void),
    ]
}
