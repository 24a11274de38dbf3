//! What an AOT artefact's kernels write past the workspace pools TVM planned for them, measured
//! once per model, and the canary every executor's pools carry after that bound.
//!
//! Why: TVM's unified memory planner (USMP, 0.16 to 0.19) sizes a kernel's vector-typed buffers
//! (`float32x16` accumulators of `dense_pack`, say) by their scalar element, so the kernels store
//! up to lanes x the planned bytes: a dense layer of hidden 1024 at batch 2 writes 1.9 KB past a
//! pool of 8.3 KB (its compiled offsets are fixed; nothing here can move them). Upstream allocates
//! the planned size and corrupts its heap. Here the first run of a model, on zeros, runs on pools
//! followed by a guard of canary bytes; what it disturbed is the bound every executor then gets
//! (the kernels' addresses do not depend on the data: the same code stores to the same offsets).
//! A write past the whole guard refuses the artefact at load. After every run the executor checks
//! a canary past that bound, so a write beyond it is an error, in memory of its own.

#![forbid(unsafe_code)]

use super::metadata::Metadata;
use crate::dlpack::{kDLUInt, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::packed::{ArgsBuilder, PackedFunc};
use crate::tensor::{Buffer, NDArray};
use std::sync::Arc;

/// The byte the guard and the canaries are filled with.
const CANARY: u8 = 0xA5;
/// The guard after each pool while measuring: the pool's size, at least this.
const GUARD_MIN: usize = 64 * 1024;
/// The canary after each executor's bound, checked after every run.
pub(crate) const CANARY_BYTES: usize = 64;
/// Bounds are rounded up to this (a vector store's width on the widest targets).
const ROUND: usize = 64;

/// A pool as a kernel sees it: `planned` bytes, then `extra` bytes of canary, in one block.
pub struct GuardedPool {
    block: Arc<Buffer>,
    planned: usize,
    pub tensor: ObjRef<NDArray>,
}

impl GuardedPool {
    /// A zeroed pool of `planned` bytes followed by `extra` canary bytes, on `device`.
    pub fn new(device: DLDevice, planned: usize, extra: usize) -> Result<GuardedPool> {
        let len = i64::try_from(planned).map_err(|_| Error::value("a workspace pool beyond the address space"))?;
        let mut block = Buffer::zeroed_on(device, planned.saturating_add(extra))?;
        block.write(planned, &vec![CANARY; extra])?;
        let block = Arc::new(block);
        // The extra bytes in the block, not in the shape: TVM 0.19's entry checks the pool's shape
        // against the size it planned.
        let tensor = NDArray::view_of(&block, 0, &[len], DLDataType::new(kDLUInt, 8, 1))?;
        Ok(GuardedPool { block, planned, tensor })
    }

    /// How many bytes past the planned pool were written: up to the last one that is no longer
    /// the canary, reading `from` bytes past the pool on (0 when untouched).
    pub fn written_past(&self, from: usize) -> Result<usize> {
        let mut tail = vec![0u8; self.block.len() - self.planned - from];
        self.block.read(self.planned + from, &mut tail)?;
        Ok(tail.iter().rposition(|&b| b != CANARY).map_or(0, |i| from + i + 1))
    }

    pub fn extra(&self) -> usize {
        self.block.len() - self.planned
    }
}

/// The bytes each workspace pool needs past its planned size, measured by one run of `main` on
/// zeros (nothing to measure without pools: no run). Errors when a run writes past the whole guard,
/// or fails.
pub fn measure(meta: &Metadata, main: &ObjRef<PackedFunc>) -> Result<Vec<usize>> {
    if meta.workspace_pools.is_empty() {
        return Ok(Vec::new());
    }
    let device = DLDevice::CPU;
    let (inputs, outputs) =
        (super::metadata::empty_arrays(&meta.inputs, device)?, super::metadata::empty_arrays(&meta.outputs, device)?);
    let pools = meta
        .workspace_pools
        .iter()
        .map(|p| {
            let planned = crate::dtype::tensor_bytes(&p.shape, p.dtype)?;
            GuardedPool::new(device, planned, planned.max(GUARD_MIN))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut args = ArgsBuilder::new();
    let tensors = inputs.iter().chain(&outputs).chain(&meta.constant_pool).chain(pools.iter().map(|p| &p.tensor));
    for t in tensors {
        args.object(t.clone().into_any());
    }
    main.call(&args.args()).map_err(|e| {
        e.context(
            "measuring what the AOT artefact's kernels write past the workspace pools TVM planned (one run on zeros)",
        )
    })?;
    meta.workspace_pools
        .iter()
        .zip(&pools)
        .map(|(info, pool)| {
            let past = pool.written_past(0)?;
            if past >= pool.extra() {
                return Err(Error::value(format!(
                    "the AOT artefact's kernels write {past} bytes or more past the workspace pool '{}' TVM planned \
                     ({} bytes): TVM's memory planner (tir.usmp) sized their buffers too small; rebuild without \
                     tir.usmp.enable",
                    info.name, pool.planned
                )));
            }
            Ok(past.div_ceil(ROUND) * ROUND)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_the_plan_are_found_to_the_byte() {
        let pool = GuardedPool::new(DLDevice::CPU, 100, 50).unwrap();
        assert_eq!(pool.extra(), 50);
        assert_eq!(pool.written_past(0).unwrap(), 0);
        let mut block = Buffer::zeroed(150).unwrap();
        block.write(100, &[CANARY; 50]).unwrap();
        block.write(117, &[0]).unwrap();
        let written = GuardedPool { block: Arc::new(block), planned: 100, tensor: pool.tensor.clone() };
        assert_eq!(written.written_past(0).unwrap(), 18);
        assert_eq!(written.written_past(20).unwrap(), 0);
        assert_eq!(written.written_past(10).unwrap(), 18);
    }
}
