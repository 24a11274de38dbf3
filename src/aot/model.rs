//! What every executor of one AOT artefact shares, read once: the metadata (with the one constant
//! pool), the entry function.

#![forbid(unsafe_code)]

use super::metadata::{self, Metadata};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::PackedFunc;

/// What every executor of one artefact shares.
pub struct Model {
    pub meta: Metadata,
    /// `<mod_name>___tvm_main__`: inputs, outputs, then (with USMP) the constant pool and the
    /// workspace pools, as DLTensors.
    pub main: ObjRef<PackedFunc>,
    /// Bytes past each workspace pool its kernels write, measured at load (`overrun`): every
    /// executor's pool has that much more, then a canary.
    pub workspace_overrun: Vec<usize>,
}

impl Model {
    pub fn load(code: &ObjRef<Module>) -> Result<Model> {
        let meta = metadata::of_library(code)?;
        let entry = format!("{}___tvm_main__", meta.mod_name);
        let main = Module::get_function(code, &entry, true)?
            .ok_or_else(|| Error::attribute(format!("the AOT artefact's library has no entry function '{entry}'")))?;
        let workspace_overrun = super::overrun::measure(&meta, &main)?;
        Ok(Model { meta, main, workspace_overrun })
    }

    /// The entry's tensors and pools, as JSON.
    pub fn describe(&self) -> serde_json::Value {
        let infos = |ts: &[super::metadata::TensorInfo]| -> Vec<serde_json::Value> {
            ts.iter()
                .map(|t| serde_json::json!({"name": t.name, "dtype": t.dtype.to_string(), "shape": t.shape}))
                .collect()
        };
        serde_json::json!({
            "mod_name": self.meta.mod_name,
            "inputs": infos(&self.meta.inputs),
            "outputs": infos(&self.meta.outputs),
            "workspace_pools": infos(&self.meta.workspace_pools),
            // Bytes past each pool its kernels write (TVM's planner sized them too small).
            "workspace_overrun": self.workspace_overrun,
            "constants": self.meta.constants.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        })
    }

    /// Bytes held once per model (the constant pool) and by each executor (its inputs, outputs
    /// and workspace pools), as JSON.
    pub fn memory_usage(&self) -> serde_json::Value {
        let bytes = |ts: &[super::metadata::TensorInfo]| -> usize {
            ts.iter().map(|t| crate::dtype::tensor_bytes(&t.shape, t.dtype).unwrap_or(0)).sum()
        };
        serde_json::json!({
            "constant_pool": self.meta.constant_pool.as_ref().map_or(0, |p| p.nbytes()),
            "per_executor": {
                "inputs": bytes(&self.meta.inputs),
                "outputs": bytes(&self.meta.outputs),
                // As held: each pool with what its kernels write past it, and the canary.
                "workspace_pools": bytes(&self.meta.workspace_pools)
                    + self.workspace_overrun.iter().map(|n| n + super::overrun::CANARY_BYTES).sum::<usize>(),
            },
        })
    }
}
