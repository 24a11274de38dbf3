//! `cache_flush_cpu_non_first_arg`: evicts every argument but the first from the CPU's caches
//! before a timed round (`time_evaluator(..., f_preproc="cache_flush_cpu_non_first_arg")`), so a
//! kernel is timed reading its weights from memory, as in a model's run, rather than from a cache
//! the previous round warmed. A kernel of ours, hence unsafe: it touches the arguments' memory.

use crate::error::Result;
use crate::packed::{Args, RetValue};

const LINE: usize = 64;

pub fn flush_non_first_args(args: &Args<'_>) -> Result<RetValue> {
    for i in 1..args.len() {
        let Ok(t) = args.tensor(i) else { continue };
        if !crate::device::is_host(t.device()) {
            continue;
        }
        let (start, n) = (t.data_ptr() as usize, t.nbytes()?);
        for line in (start & !(LINE - 1)..start + n).step_by(LINE) {
            // SAFETY: `line` is within (or the cache line holding the start of) the tensor's
            // bytes, which the caller passed as a live tensor; flushing a line changes no data.
            unsafe { flush_line(line as *const u8) };
        }
    }
    fence();
    Ok(RetValue::None)
}

#[cfg(target_arch = "x86_64")]
unsafe fn flush_line(p: *const u8) {
    // SAFETY: the caller's promise: a mapped address.
    unsafe { std::arch::x86_64::_mm_clflush(p) }
}

#[cfg(target_arch = "x86_64")]
fn fence() {
    // SAFETY: a memory fence, no operands.
    unsafe { std::arch::x86_64::_mm_mfence() }
}

#[cfg(target_arch = "aarch64")]
unsafe fn flush_line(p: *const u8) {
    // SAFETY: the caller's promise: a mapped address; `dc civac` cleans and invalidates its line.
    unsafe { std::arch::asm!("dc civac, {0}", in(reg) p, options(nostack, preserves_flags)) }
}

#[cfg(target_arch = "aarch64")]
fn fence() {
    // SAFETY: a barrier, no operands.
    unsafe { std::arch::asm!("dmb ishst", options(nostack, preserves_flags)) }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn flush_line(_: *const u8) {}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn fence() {}
