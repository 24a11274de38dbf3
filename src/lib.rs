//! A drop-in `libtvm_runtime.so` for TVM graph-executor models, written in Rust.
//!
//! Architecture, from the C boundary inwards:
//!
//! - [`capi`]: every exported `extern "C"` function of TVM's classic C API. Thin: it checks and
//!   converts arguments, calls the core, and maps errors to `-1` + `TVMGetLastError`. Panics
//!   never cross it.
//! - [`packed`]: packed-call values, the PackedFunc object, containers, the global registry.
//! - [`object`]: reference-counted objects with TVM's C layout, so handles cross freely.
//! - [`library`]: loading compiled operator libraries (`dlopen`, context slots, module blob).
//! - [`executor`]: the graph executor, split into an immutable, shared [`executor::plan::Plan`]
//!   and per-executor [`executor::instance::Instance`] state; weights bind per storage slot, so
//!   executors (and factories) share one copy.
//! - [`graph`], [`memory_plan`], [`params`]: the formats, parsed and validated up front.
//! - [`backend`]: what kernels call back into (thread pool, workspaces).
//! - [`tensor`]: aligned buffers and the NDArray object.
//!
//! `unsafe` lives in the C boundary, the object and tensor memory code, library loading, the
//! kernel-calling parts of the executor (`instance`, a pointer in `functions`), and the thread pool.
//! The formats, planning, the executor's logic, factories, parameters and the registry are
//! `#![forbid(unsafe_code)]`.

#![allow(non_upper_case_globals)]

pub mod backend;
pub mod capi;
pub mod contrib_sort;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod executor;
pub mod fuzzing;
pub mod globals;
pub mod graph;
pub mod last_error;
pub mod library;
pub mod memory_plan;
pub mod module;
pub mod object;
pub mod packed;
pub mod params;
pub mod python_env;
pub mod stream;
pub mod tensor;
pub mod time_evaluator;

pub use error::{Error, Result};
