//! Packed functions: calls, callbacks, the global registry.

use super::{borrow, c_str, fail, guard, guard_status, out, TVMFunctionHandle, TVMRetValueHandle};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{release, AnyObject, ObjectHeader};
use crate::packed::{registry, Args, PackedFunc, RetValue};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static RET_STR: RefCell<CString> = RefCell::new(CString::default());
    static RET_BYTES: RefCell<(Vec<u8>, TVMByteArray)> =
        const { RefCell::new((Vec::new(), TVMByteArray { data: std::ptr::null(), size: 0 })) };
    static GLOBAL_NAMES: RefCell<(Vec<CString>, Vec<*const c_char>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Whether `p` is this thread's bytes return buffer (`TVMByteArrayFree` leaves it alone).
pub(crate) fn is_ret_bytes(p: *const TVMByteArray) -> bool {
    RET_BYTES.with(|b| std::ptr::eq(&b.borrow().1, p))
}

/// Hands a return value to a C caller; strings and bytes live in thread-local storage until the
/// next call on this thread.
#[inline]
pub(crate) unsafe fn write_return(rv: RetValue, value: *mut TVMValue, code: *mut i32) -> Result<()> {
    if value.is_null() || code.is_null() {
        return Err(Error::value("null return value or type code pointer"));
    }
    let (v, c) = stored_return(rv);
    // SAFETY: both checked non-null above.
    unsafe { put_return(v, c, value, code) };
    Ok(())
}

/// Writes a result's value and type code to the caller's slots, first giving back a large bytes
/// result of this thread's earlier call (unless this result is bytes: it replaced them).
///
/// # Safety
/// `value` and `code` are non-null and writable.
#[inline]
unsafe fn put_return(v: TVMValue, c: i32, value: *mut TVMValue, code: *mut i32) {
    if c != kTVMBytes {
        release_large_bytes();
    }
    // SAFETY: per the contract.
    unsafe {
        value.write(v);
        code.write(c);
    }
}

/// Scalars as they are, objects with their count; strings and bytes go to thread-local storage.
fn stored_return(rv: RetValue) -> (TVMValue, i32) {
    match rv.into_c_scalar() {
        Ok(pair) => pair,
        Err(RetValue::Str(s)) => (store_str(&s), kTVMStr),
        Err(RetValue::DataType(t)) => (store_str(&t.to_string()), kTVMStr),
        Err(RetValue::Bytes(b)) => {
            let p = RET_BYTES.with(|slot| {
                let mut slot = slot.borrow_mut();
                let (was, is) = (slot.0.capacity() > LARGE_BYTES, b.capacity() > LARGE_BYTES);
                if is && !was {
                    THREADS_HOLDING_LARGE_BYTES.fetch_add(1, Ordering::Relaxed);
                } else if was && !is {
                    THREADS_HOLDING_LARGE_BYTES.fetch_sub(1, Ordering::Relaxed);
                }
                slot.0 = b;
                slot.1 = TVMByteArray { data: slot.0.as_ptr().cast(), size: slot.0.len() };
                &slot.1 as *const TVMByteArray
            });
            (TVMValue { v_handle: p.cast_mut().cast() }, kTVMBytes)
        }
        Err(_) => unreachable!("into_c_scalar only refuses strings, bytes and dtypes"),
    }
}

/// Bytes returned earlier live until the next call on the thread; a large buffer (a prepared
/// params file is the size of the weights) is given back then, not kept until the next bytes.
#[inline]
fn release_large_bytes() {
    // Most calls find no thread holding large bytes and skip the thread-local slot: in a shared
    // library each thread-local access is a call to __tls_get_addr, a tenth of a short call's
    // time. A thread only ever sees its own increment before its next call, so the count never
    // hides this thread's buffer (a thread that ended holding one leaves the count high: the
    // slow path, still right).
    if THREADS_HOLDING_LARGE_BYTES.load(Ordering::Relaxed) == 0 {
        return;
    }
    RET_BYTES.with(|slot| {
        if slot.borrow().0.capacity() > LARGE_BYTES {
            *slot.borrow_mut() = (Vec::new(), TVMByteArray { data: std::ptr::null(), size: 0 });
            THREADS_HOLDING_LARGE_BYTES.fetch_sub(1, Ordering::Relaxed);
        }
    });
}

/// A bytes result above this size is released at the thread's next call.
const LARGE_BYTES: usize = 1 << 16;

/// The threads whose bytes return slot holds more than `LARGE_BYTES`.
static THREADS_HOLDING_LARGE_BYTES: AtomicUsize = AtomicUsize::new(0);

fn store_str(s: &str) -> TVMValue {
    let c = CString::new(s.replace('\0', "")).expect("NULs removed");
    RET_STR.with(|slot| {
        *slot.borrow_mut() = c;
        TVMValue { v_str: slot.borrow().as_ptr() }
    })
}

/// Calls a packed function. Arguments are borrowed for the call. The result: codes 8, 9, 10
/// and 13 hand one reference to the caller; strings (code 11) and bytes (code 12) live in
/// thread-local storage until the next call on this thread; 4 means no result. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn TVMFuncCall(
    func: TVMFunctionHandle,
    arg_values: *mut TVMValue,
    type_codes: *mut c_int,
    num_args: c_int,
    ret_val: *mut TVMValue,
    ret_type_code: *mut c_int,
) -> c_int {
    // The hottest entry point: no `Result` is built on the way to a successful return.
    guard_status(|| {
        // SAFETY: the caller's handle and arrays are valid for the call.
        unsafe {
            let Some(f) = crate::object::payload_of::<PackedFunc>(func.cast()) else {
                return not_a_function(func);
            };
            let args = match Args::from_raw(arg_values, type_codes, num_args) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let result = f.call(&args);
            // Scalars and objects are read from the result in place: moving the whole result
            // (one wide copy of what the callee just wrote field by field) stalls the load on
            // store forwarding, a third of a short call's time.
            if let (Ok(rv), false) = (&result, ret_val.is_null() || ret_type_code.is_null()) {
                if let Some((v, c)) = rv.as_c_scalar() {
                    put_return(v, c, ret_val, ret_type_code);
                    // An object's count now belongs to the caller.
                    std::mem::forget(result);
                    return 0;
                }
            }
            match result.and_then(|rv| write_return(rv, ret_val, ret_type_code)) {
                Ok(()) => 0,
                Err(e) => fail(e),
            }
        }
    })
}

/// `TVMFuncCall`'s answer to a handle that is not one of our functions, out of its way.
#[cold]
#[inline(never)]
unsafe fn not_a_function(func: TVMFunctionHandle) -> c_int {
    // SAFETY: the caller's handle, as in `TVMFuncCall`; `borrow` says what is wrong with it.
    fail(unsafe { borrow::<PackedFunc>(func, "PackedFunc") }.err().unwrap_or_else(|| Error::internal("handle")))
}

/// Releases the caller's reference to a function (NULL is a no-op).
#[no_mangle]
pub unsafe extern "C" fn TVMFuncFree(func: TVMFunctionHandle) -> c_int {
    guard(|| {
        if !func.is_null() {
            // SAFETY: the caller gives up its count.
            unsafe {
                borrow::<PackedFunc>(func, "PackedFunc")?;
                release(func.cast());
            }
        }
        Ok(())
    })
}

/// Wraps a C callback as a packed function (one reference to the caller). `resource_handle`
/// is passed to every call; `fin`, if set, runs once with it when the function is destroyed.
#[no_mangle]
pub unsafe extern "C" fn TVMFuncCreateFromCFunc(
    func: TVMPackedCFunc,
    resource_handle: *mut std::ffi::c_void,
    fin: TVMPackedCFuncFinalizer,
    out_handle: *mut TVMFunctionHandle,
) -> c_int {
    guard(|| {
        let func = func.ok_or_else(|| Error::value("TVMFuncCreateFromCFunc: null function"))?;
        if out_handle.is_null() {
            return Err(Error::value("TVMFuncCreateFromCFunc: null output pointer"));
        }
        let f = PackedFunc::from_callback(func, resource_handle, fin);
        // SAFETY: checked non-null.
        unsafe { out(out_handle, f.into_raw().cast(), "TVMFuncCreateFromCFunc") }
    })
}

/// Sets the return value of a callback; `num_ret` must be 1.
#[no_mangle]
pub unsafe extern "C" fn TVMCFuncSetReturn(
    ret: TVMRetValueHandle,
    value: *mut TVMValue,
    type_code: *mut c_int,
    num_ret: c_int,
) -> c_int {
    guard(|| {
        if num_ret != 1 {
            return Err(Error::value(format!("TVMCFuncSetReturn: num_ret must be 1, got {num_ret}")));
        }
        if ret.is_null() || value.is_null() || type_code.is_null() {
            return Err(Error::value("TVMCFuncSetReturn: null argument"));
        }
        // SAFETY: `ret` is the slot `PackedFunc::call` passed to the callback; the value is the
        // callback's own, borrowed for this call.
        unsafe { *ret.cast::<RetValue>() = RetValue::from_borrowed_c(*value, *type_code)? };
        Ok(())
    })
}

/// Turns a borrowed callback argument into an owned value in place.
#[no_mangle]
pub unsafe extern "C" fn TVMCbArgToReturn(value: *mut TVMValue, code: *mut c_int) -> c_int {
    guard(|| {
        if value.is_null() || code.is_null() {
            return Err(Error::value("TVMCbArgToReturn: null argument"));
        }
        // SAFETY: checked non-null; the pair is a callback argument valid for the call.
        unsafe {
            match *code {
                kTVMObjectHandle
                | kTVMModuleHandle
                | kTVMPackedFuncHandle
                | kTVMNDArrayHandle
                | kTVMObjectRValueRefArg => {
                    let rv = RetValue::from_borrowed_c(*value, *code)?;
                    let (v, c) = rv.into_c_scalar().map_err(|_| Error::internal("object conversion"))?;
                    value.write(v);
                    code.write(c);
                }
                kTVMStr | kTVMBytes => {
                    return Err(Error::type_err("TVMCbArgToReturn: strings and bytes are not supported"))
                }
                _ => {}
            }
        }
        Ok(())
    })
}

/// Registers `f` under `name` (the registry takes its own reference; the caller keeps its own).
/// An existing name is an error unless `override_` is non-zero.
#[no_mangle]
pub unsafe extern "C" fn TVMFuncRegisterGlobal(name: *const c_char, f: TVMFunctionHandle, override_: c_int) -> c_int {
    guard(|| {
        super::init();
        // SAFETY: caller's string and handle, valid for the call.
        let (name, func) = unsafe {
            let name = c_str(name, "name")?;
            borrow::<PackedFunc>(f, "PackedFunc")?;
            let func = AnyObject::retain_raw(f.cast::<ObjectHeader>())
                .and_then(|o| o.downcast::<PackedFunc>().ok())
                .ok_or_else(|| Error::type_err("not a PackedFunc"))?;
            (name, func)
        };
        registry::register(name, func, override_ != 0)
    })
}

/// Looks up a global function: a new reference, or `*out` = NULL (and 0) when there is none.
#[no_mangle]
pub unsafe extern "C" fn TVMFuncGetGlobal(name: *const c_char, out_handle: *mut TVMFunctionHandle) -> c_int {
    guard(|| {
        super::init();
        // SAFETY: caller's string and out-pointer.
        unsafe {
            let name = c_str(name, "name")?;
            let h = registry::get(name).map_or(std::ptr::null_mut(), |f| f.into_raw().cast());
            out(out_handle, h, "TVMFuncGetGlobal")
        }
    })
}

/// The names of all global functions, in thread-local storage valid until the next call on
/// this thread.
#[no_mangle]
pub unsafe extern "C" fn TVMFuncListGlobalNames(out_size: *mut c_int, out_array: *mut *mut *const c_char) -> c_int {
    guard(|| {
        super::init();
        let names = registry::names();
        let (n, p) = GLOBAL_NAMES.with(|slot| {
            let mut slot = slot.borrow_mut();
            slot.0 = names.into_iter().filter_map(|s| CString::new(s).ok()).collect();
            slot.1 = slot.0.iter().map(|c| c.as_ptr()).collect();
            (slot.1.len() as c_int, slot.1.as_mut_ptr())
        });
        // SAFETY: caller's out-pointers.
        unsafe {
            out(out_size, n, "TVMFuncListGlobalNames")?;
            out(out_array, p, "TVMFuncListGlobalNames")
        }
    })
}

/// Removes a global function (absent names are not an error).
#[no_mangle]
pub unsafe extern "C" fn TVMFuncRemoveGlobal(name: *const c_char) -> c_int {
    guard(|| {
        super::init();
        // SAFETY: caller's string.
        registry::remove(unsafe { c_str(name, "name") }?);
        Ok(())
    })
}
