//! Host tensors: raw aligned memory, the NDArray object, and access to caller-owned DLTensors.

pub mod buffer;
pub mod ndarray;
pub mod raw;
pub mod weight;

pub use buffer::{Buffer, FileMap};
pub use ndarray::NDArray;
pub use raw::RawTensor;
pub use weight::Weight;
