//! The AOT executor (`relay.build(..., executor=Executor("aot"), runtime=Runtime("cpp"))`, TVM 0.9
//! to 0.19), which upstream deleted with the graph executor: the artefact's tree is
//! `AotExecutorFactory -> metadata_module -> library`, the library's compiled entry function runs
//! the whole model, and its `get_c_metadata` describes the entry's tensors and memory pools.
//!
//! - [`metadata`]: the library's `TVMMetadata`, read and checked (the one room reading its structures);
//! - [`model`]: what every executor of an artefact shares (the metadata, the entry function, one
//!   constant pool);
//! - [`factory`]: the blob's factory, which reads the model once;
//! - [`executor`]: upstream's function table over an executor's arrays and workspace pools.

pub mod executor;
pub mod factory;
pub mod metadata;
pub mod model;
pub mod overrun;

pub use executor::AotExecutor;
pub use factory::{AotFactory, LOADERS};
