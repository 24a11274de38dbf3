//! A drop-in `libtvm_runtime.so` for TVM graph-executor models, written in Rust.
//!
//! Architecture: the top-level modules form layers, each using only its own and those below;
//! [docs/ARCHITECTURE.md](../docs/ARCHITECTURE.md) states the order (and `tests/layers.rs` holds
//! the crate to it). From the bottom:
//!
//! - base: [`error`], [`dlpack`], [`dtype`], [`files`] (paths confined beneath a directory),
//!   [`host_memory`], [`cxx_abi`] (what the C++ layer defines and every object carries), ...;
//! - [`backend`]: what kernels call back into (thread pool, workspaces);
//! - [`device`]: one `DeviceApi` per device type (the CPU, OpenCL): allocation, copies,
//!   synchronisation, attributes, kernel scratch, OpenCL's programs and launches; OpenCL's
//!   library is opened at first use. Everything above speaks to the trait, never to a device's
//!   library;
//! - [`object`]: reference-counted objects with TVM's C layout, so handles cross freely; each
//!   family declares its own payload types;
//! - [`tensor`]: buffers, weights and the NDArray object, on the host or on a device;
//! - [`packed`]: packed-call values, the PackedFunc object, containers, the global registry;
//! - [`module`], then the formats ([`graph`], [`memory_plan`], [`params`], [`prepared_params`]),
//!   parsed and validated up front;
//! - [`library`]: loading compiled operator libraries (`dlopen`, context slots, the module blob
//!   and its module kinds, the `opencl` one among them);
//! - [`time_evaluator`], [`profiling`]: timing, and upstream's Report objects and their formats;
//! - [`executor`]: the graph executor, split into an immutable, shared [`executor::plan::Plan`]
//!   and per-executor [`executor::instance::Instance`] state (safe code choosing each entry's
//!   memory; `executor::kernels` holds the tensors and calls the kernels); weights bind per
//!   storage slot, so executors (and factories) share one copy, and activations may come from a
//!   pool of arenas ([`executor::pool`]) that runs lease; the debug executor fills a Report;
//! - [`rpc`]: TVM's RPC both ways: the wire format and a serving session with no socket in them,
//!   the client's session, remote devices behind the device layer's trait (installed at `init`);
//! - the faces: `globals` (the built-in global functions), [`capi`] (every exported `extern "C"`
//!   function of TVM's classic C API: thin, it checks and converts arguments, calls the core, and
//!   maps errors to `-1` + `TVMGetLastError`; panics never cross it; [`init`] is the one init
//!   point), `cxx` (what the C++ layer calls), [`tvm_ffi`] (beside upstream's `libtvm_ffi.so`:
//!   what upstream's runtime registers there, our modules and functions as its objects).

//! ## Where `unsafe` lives
//!
//! In these files and no others (`tests/unsafe_map.rs` keeps the list true both ways):
//! - the C boundary: `src/capi/`, `src/last_error.rs`;
//! - objects and memory in TVM's layouts: `src/object/mod.rs`, `src/object/native.rs`,
//!   `src/host_memory.rs`, `src/tensor/buffer.rs`, `src/tensor/ndarray.rs`, `src/tensor/raw.rs`,
//!   `src/tensor/weight.rs`, `src/packed/args.rs` (also the typed accessors whose functions'
//!   contracts promise more than a call: zero-copy tensors, files to map),
//!   `src/packed/containers.rs`, `src/packed/function.rs`, `src/packed/value.rs`;
//! - the C++ layer: what it defines (`src/cxx_abi.rs`) and what it calls (`src/cxx/`);
//! - beside upstream's `libtvm_ffi.so`: `src/tvm_ffi/` (its C ABI found in the process and
//!   called; its objects' cells read; ours handed to it by count);
//! - loading compiled code: `src/library/mod.rs`, `src/library/context.rs`,
//!   `src/library/symbols.rs`, `src/library/pages.rs` (what is mapped where, pages given back),
//!   `src/library/linked.rs` (weights linked into a library),
//!   `src/library/opencl.rs` (a packed call's buffer handles launched as OpenCL kernels),
//!   `src/library/plugin.rs` (a plug-in's loaders, given a stream over a module blob),
//!   `src/library/ffi_kernel.rs` (TVM 0.21+ kernels, called through tvm-ffi's `Any` cells),
//!   `src/aot/metadata.rs` (an AOT library's description of itself, read from its data),
//!   `src/aot/executor.rs` (its input arrays written, outputs copied out),
//!   `src/python_env.rs`;
//! - calling kernels: `src/executor/kernels.rs` (the executor's one unsafe room: the tensor
//!   table, the calls, the copies into and out of entry memory and the views of it),
//!   `src/contrib_sort.rs` and `src/cache_flush.rs` (kernels of ours); the Relax VM's shape
//!   heap, written between kernels by the builtins of the call that made it:
//!   `src/relax/builtins.rs`;
//! - files a caller names, resolved beneath a directory without following links:
//!   `src/files/beneath.rs`;
//! - RPC: `src/rpc/memory.rs` (copies into and out of the memory a session handed out, checked
//!   before), `src/rpc/remote_device.rs` (the client's records behind remote arrays' `data`),
//!   `src/rpc/fd.rs` (a socket a host hands over);
//! - devices: `src/device/` (each device's API over its own library, whose handles only that
//!   device's module interprets);
//! - threads: `src/backend/thread_pool/`, `src/backend/affinity.rs`, `src/backend/fork.rs` (what a
//!   forked child cannot inherit); the C allocator's free pages given back: `src/host_memory.rs`.
//!
//! The formats, planning, the executor's layout and factories, parameters and the registry are
//! `#![forbid(unsafe_code)]`.

//! What safe Rust code cannot do with this crate (each was possible once; the examples must not
//! compile): make an array over arbitrary memory, write an array others may be reading, map a
//! file that may change underneath, or claim another type's object index (handing Python an
//! arbitrary pointer is the C boundary's alone: `python_env` is private).
//!
//! ```compile_fail,E0133
//! let a = tvm_runtime::tensor::NDArray::external(std::ptr::null_mut(), &[4], tvm_runtime::dlpack::DLDataType::F32, tvm_runtime::dlpack::DLDevice::CPU);
//! ```
//! ```compile_fail,E0133
//! let a = tvm_runtime::tensor::NDArray::empty(&[4], tvm_runtime::dlpack::DLDataType::F32, tvm_runtime::dlpack::DLDevice::CPU).unwrap();
//! a.copy_from_bytes(&[0u8; 16]).unwrap();
//! ```
//! ```compile_fail,E0133
//! let map = tvm_runtime::tensor::FileMap::open("/etc/hostname");
//! ```
//! ```compile_fail,E0277
//! struct Mine;
//! impl tvm_runtime::object::ObjectType for Mine {
//!     const TYPE_INDEX: u32 = 0;
//! }
//! ```
//! ```compile_fail,E0596
//! let b = std::sync::Arc::new(tvm_runtime::tensor::Buffer::zeroed(4).unwrap());
//! b.write(0, &[1]).unwrap();
//! ```

#![allow(non_upper_case_globals)]

pub mod aot;
pub mod backend;
mod cache_flush;
pub mod capi;
mod contrib_sort;
/// cbindgen:ignore
mod cxx;
/// cbindgen:ignore
pub mod cxx_abi;
/// cbindgen:ignore
pub mod device;
/// cbindgen:ignore
pub mod digest;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod executor;
pub mod files;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod globals;
pub mod graph;
pub mod host_memory;
pub(crate) mod last_error;
pub mod library;
pub mod memory_plan;
pub mod module;
pub mod object;
pub mod packed;
pub mod params;
/// cbindgen:ignore
pub mod prepared_params;
/// cbindgen:ignore
pub mod profiling;
mod python_env;
pub mod relax;
/// cbindgen:ignore
pub mod rpc;
mod stream;
pub mod tensor;
pub mod time_evaluator;
/// cbindgen:ignore
pub mod tvm_ffi;
/// cbindgen:ignore
pub mod vm;

pub use capi::init;
pub use error::{Error, Result};
