//! What compiled kernels call back into: scratch memory and parallel launches.

pub mod affinity;
pub mod fork;
pub mod thread_pool;
pub mod workspace;

/// Releases what kernels left behind on the calling thread: its idle workspaces and its worker
/// threads (whose own workspaces go with them), then asks glibc to return free heap pages.
pub fn release_idle_memory() {
    workspace::release_idle();
    thread_pool::release();
    crate::host_memory::return_free_heap();
}
