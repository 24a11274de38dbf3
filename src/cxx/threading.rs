//! The entry points behind the C++ threading API of `tvm/runtime/threading_backend.h`
//! (`cxx/threading.cc`): configuring the pool, its concurrency, and the cores a mode uses.

use crate::backend::affinity::{self, Mode};
use crate::backend::thread_pool;
use crate::capi::guard;
use crate::error::Error;
use std::ffi::c_int;

/// The listed cores of a C array.
///
/// # Safety
/// `cores` must hold `n` values when `n > 0`.
unsafe fn listed(cores: *const u32, n: usize) -> crate::error::Result<Vec<usize>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if cores.is_null() {
        return Err(Error::value(format!("{n} cores listed at null")));
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(cores, n) }.iter().map(|&c| c as usize).collect())
}

/// `threading::Configure(mode, nthreads, cpus)`; `*used` receives the threads launches now use.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_threading_configure(
    mode: c_int,
    nthreads: c_int,
    cores: *const u32,
    n: usize,
    used: *mut c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the C++ layer passes a vector's data and size.
        let cores = unsafe { listed(cores, n) }?;
        let threads = thread_pool::configure(Mode::from_code(mode.into()), nthreads.max(0) as usize, &cores)?;
        if !used.is_null() {
            // SAFETY: the C++ layer's out-pointer.
            unsafe { *used = threads as c_int };
        }
        Ok(())
    })
}

/// The cores `mode` runs on, written to `out` (at most `cap`); returns how many
/// there are, or -1 with the error set.
#[no_mangle]
pub unsafe extern "C" fn tvmrt_threading_cores(
    mode: c_int,
    cores: *const u32,
    n: usize,
    out: *mut u32,
    cap: usize,
) -> c_int {
    let mut count = 0;
    let rc = guard(|| {
        // SAFETY: the C++ layer passes a vector's data and size.
        let found = affinity::cores_for(Mode::from_code(mode.into()), &unsafe { listed(cores, n) }?)?;
        for (i, &c) in found.iter().take(if out.is_null() { 0 } else { cap }).enumerate() {
            // SAFETY: `out` holds `cap` values.
            unsafe { *out.add(i) = c as u32 };
        }
        count = found.len() as c_int;
        Ok(())
    });
    if rc == 0 {
        count
    } else {
        -1
    }
}

#[no_mangle]
pub extern "C" fn tvmrt_threading_max_concurrency() -> c_int {
    std::panic::catch_unwind(thread_pool::max_concurrency).map_or(1, |n| n as c_int)
}

#[no_mangle]
pub extern "C" fn tvmrt_threading_set_max_concurrency(value: c_int) {
    // A negative value changes nothing, as upstream's.
    if let Ok(value) = usize::try_from(value) {
        let _ = std::panic::catch_unwind(|| thread_pool::set_max_concurrency(value));
    }
}

#[no_mangle]
pub extern "C" fn tvmrt_threading_num_threads() -> c_int {
    std::panic::catch_unwind(thread_pool::num_threads).map_or(1, |n| n as c_int)
}

#[no_mangle]
pub extern "C" fn tvmrt_threading_reset() {
    let _ = std::panic::catch_unwind(thread_pool::reset);
}
