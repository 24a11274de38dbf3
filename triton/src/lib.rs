//! `libtriton_tvm.so`: a Triton Inference Server backend (`backend: "tvm"`) for TVM artefacts,
//! graph-executor, Relay VM and AOT models alike, on this workspace's runtime.
//!
//! A model's builds (one artefact folder, or one per batch size or sequence length) are loaded
//! once when Triton loads the model; every instance is an executor over them, so N instances hold
//! one copy of the weights and of what is derived from them, and their activations come from one
//! pool of arenas. An execute call's requests are gathered along the batch axis onto the builds
//! that serve them fastest and scattered back; a request that is wrong is answered alone.
//!
//! Layers, from the bottom: `api` (Triton's C functions, found in the server's process), then the
//! safe core: `signature`, `artefact`, `engine` (a build and an instance's runner of it),
//! `config` (auto-complete and the checks), `batch`, `request`, `model`, `instance`; then the
//! faces: `handles` (Triton's objects read and written) and `entry` (the exported functions).
//!
//! `unsafe` lives in `api.rs`, `clock.rs`, `handles.rs`, `entry.rs` and `prepared.rs` (a file
//! mapped); the rest is safe code.

pub mod api;
pub mod artefact;
pub mod batch;
mod clock;
pub mod config;
pub mod engine;
pub mod entry;
pub mod handles;
pub mod instance;
pub mod model;
mod prepared;
pub mod request;
pub mod signature;
