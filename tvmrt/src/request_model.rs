//! What the tool runs in one call per request: a VM's program (`vm.rs`: Relay or Relax) or an
//! AOT executor (`aot.rs`). Its own module, so that each of those two reads it without reading the
//! other.

use std::path::PathBuf;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;

/// A model run in one call per request: a Relay or Relax VM executable, or an AOT executor
/// artefact, which the commands of `vm.rs` run alike.
pub struct VmModel {
    pub dir: PathBuf,
    pub label: String,
    /// The executable, or the AOT artefact's factory.
    pub exe: ObjRef<Module>,
    pub params: Vec<String>,
    pub device: DLDevice,
    pub engine: Engine,
    /// The inputs' dtypes and shapes, where the model records them (an AOT artefact's metadata, a
    /// Relax function's checks; a Relay VM executable records none).
    pub layouts: Vec<(tvm_runtime::dlpack::DLDataType, Vec<i64>)>,
    /// The outputs' names where the model records them (an AOT artefact's metadata); else the
    /// k-th is `output_k`, as for graph models.
    pub output_names: Vec<String>,
}

/// What runs the model: a VM's interpreter (Relay or Relax), or an AOT executor the factory's
/// named function makes.
pub enum Engine {
    Vm,
    Aot(String),
}
