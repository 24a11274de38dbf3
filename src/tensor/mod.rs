//! Host tensors: raw aligned memory, the NDArray object, and access to caller-owned DLTensors.

mod buffer;
pub(crate) mod ndarray;
pub mod raw;
pub(crate) mod weight;

pub use buffer::{Buffer, FileMap, Recycle, ALIGNMENT};
pub use ndarray::NDArray;
pub use raw::RawTensor;
pub use weight::{ImageForm, Weight};
