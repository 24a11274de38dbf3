//! Triton's statistics take `std::chrono::steady_clock` nanoseconds: on Linux, CLOCK_MONOTONIC.

/// Now, in CLOCK_MONOTONIC nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
