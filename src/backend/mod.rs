//! What compiled kernels call back into: scratch memory and parallel launches.

pub mod thread_pool;
pub mod workspace;
