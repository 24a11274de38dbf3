//! What compiled operators call: through the context slots of a loaded library, or by name when
//! they were built as a system library or with the C backend.

use super::{c_str, function::TVMFuncCall, guard, out, TVMFunctionHandle};
use crate::backend::{thread_pool, workspace};
use crate::dlpack::{FTVMParallelLambda, TVMParallelGroupEnv};
use crate::error::Error;
use crate::library;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

/// The context slots a library may export, with what to store in each.
pub fn context_functions() -> [(&'static str, *mut c_void); 7] {
    [
        ("__TVMFuncCall", TVMFuncCall as *mut c_void),
        ("__TVMAPISetLastError", super::error::TVMAPISetLastError as *mut c_void),
        ("__TVMBackendGetFuncFromEnv", TVMBackendGetFuncFromEnv as *mut c_void),
        ("__TVMBackendAllocWorkspace", TVMBackendAllocWorkspace as *mut c_void),
        ("__TVMBackendFreeWorkspace", TVMBackendFreeWorkspace as *mut c_void),
        ("__TVMBackendParallelLaunch", TVMBackendParallelLaunch as *mut c_void),
        ("__TVMBackendParallelBarrier", TVMBackendParallelBarrier as *mut c_void),
    ]
}

/// Finds a function for compiled code: the imports of its library, then the global registry.
/// The handle is borrowed and stays valid as long as the library.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendGetFuncFromEnv(
    mod_node: *mut c_void,
    func_name: *const c_char,
    out_func: *mut TVMFunctionHandle,
) -> c_int {
    guard(|| {
        // SAFETY: caller's string and out-pointer; `mod_node` is checked by the library.
        unsafe {
            let name = c_str(func_name, "function name")?;
            let f = library::get_func_from_env(mod_node, name)?;
            out(out_func, f.cast(), "TVMBackendGetFuncFromEnv")
        }
    })
}

/// Scratch memory for a kernel, 64-byte aligned, from the calling thread's pool; NULL on failure.
#[no_mangle]
pub extern "C" fn TVMBackendAllocWorkspace(
    device_type: c_int,
    device_id: c_int,
    nbytes: u64,
    _dtype_code_hint: c_int,
    _dtype_bits_hint: c_int,
) -> *mut c_void {
    super::guard_value(std::ptr::null_mut(), || {
        if device_type == crate::dlpack::kDLCPU {
            return workspace::alloc(nbytes).map(|p| p.cast());
        }
        let n = usize::try_from(nbytes).map_err(|_| Error::value(format!("workspace of {nbytes} bytes")))?;
        crate::device::api(device_type)?.alloc_workspace(device_id, n)
    })
}

/// Returns a workspace to the calling thread's pool; it must come from TVMBackendAllocWorkspace
/// on the same thread.
#[no_mangle]
pub extern "C" fn TVMBackendFreeWorkspace(device_type: c_int, device_id: c_int, ptr: *mut c_void) -> c_int {
    guard(|| {
        if device_type == crate::dlpack::kDLCPU {
            return workspace::free(ptr.cast());
        }
        crate::device::api(device_type)?.free_workspace(device_id, ptr)
    })
}

/// Runs `flambda` on `num_task` concurrent tasks (0 = all threads) and waits for them.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendParallelLaunch(
    flambda: FTVMParallelLambda,
    cdata: *mut c_void,
    num_task: c_int,
) -> c_int {
    guard(|| {
        let f = flambda.ok_or_else(|| Error::value("TVMBackendParallelLaunch: null lambda"))?;
        // SAFETY: the kernel's own lambda and closure data.
        unsafe { thread_pool::parallel_launch(f, cdata, num_task) }
    })
}

/// Waits until every task of the current parallel launch reaches the barrier.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendParallelBarrier(_task_id: c_int, penv: *mut TVMParallelGroupEnv) -> c_int {
    // SAFETY: `penv` is the environment the pool passed to this task.
    guard(|| unsafe { thread_pool::barrier(penv) })
}

/// Runs `f(cdata)` the first time a given handle slot is seen.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendRunOnce(
    handle: *mut *mut c_void,
    f: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    cdata: *mut c_void,
    _nbytes: c_int,
) -> c_int {
    static ONCE: Mutex<()> = Mutex::new(());
    let mut rc = 0;
    let status = guard(|| {
        if handle.is_null() {
            return Err(Error::value("TVMBackendRunOnce: null handle"));
        }
        let Some(f) = f else { return Ok(()) };
        let _g = ONCE.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's slot; serialised by the lock so the call happens once.
        unsafe {
            if (*handle).is_null() {
                *handle = 1 as *mut c_void;
                rc = f(cdata);
            }
        }
        Ok(())
    });
    if status != 0 {
        status
    } else {
        rc
    }
}

/// Records a symbol of a `--system-lib` object (called from its static constructors); the
/// module comes from the global `runtime.SystemLib`. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendRegisterSystemLibSymbol(name: *const c_char, ptr: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: caller's string.
        crate::library::symbols::register_system_symbol(unsafe { c_str(name, "symbol name") }?, ptr);
        Ok(())
    })
}

/// Front-end callbacks: Python's signal check and reference counting.
#[no_mangle]
pub unsafe extern "C" fn TVMBackendRegisterEnvCAPI(name: *const c_char, ptr: *mut c_void) -> c_int {
    // SAFETY: caller's string.
    // SAFETY: Python registers its own C-API functions under their names (the entry's contract).
    guard(|| unsafe { crate::python_env::register(c_str(name, "name")?, ptr) })
}
