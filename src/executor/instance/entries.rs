//! Reading and writing entries from outside: the arrays `get_input` / `get_output` hand out, and
//! the copies of `set_input`, `get_output(i, out)` and parameters written into memory that cannot
//! take a weight as it is.

#![forbid(unsafe_code)]

use super::slots::SlotMemory;
use super::Instance;
use crate::error::{Error, Result};
use crate::executor::bindings::Ops;
use crate::executor::layout::Home;
use crate::memory_plan::SlotRole;
use crate::object::ObjRef;
use crate::tensor::{NDArray, RawTensor};

impl Instance {
    /// An NDArray of entry `eid`: a view of this executor's own memory (kept alive by the array),
    /// a copy when the entry is a weight (a write through the array must not reach the other
    /// holders), or a view of caller memory bound with zero-copy. A view is the same array every
    /// time while it shows the entry, and follows the entry's zero-copy bindings (upstream's
    /// `get_input` / `get_output` hand out the entry itself).
    #[inline]
    pub fn entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        self.prepare()?;
        if let Some(view) = &self.views[eid] {
            if view.data_ptr().cast_const() == self.ops.data(eid) {
                return Ok(view.clone());
            }
        }
        self.new_entry_view(eid)
    }

    #[inline(never)]
    fn new_entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        let (array, is_view) = self.new_entry_array(eid)?;
        if is_view {
            self.views[eid] = Some(array.clone());
        }
        Ok(array)
    }

    /// A new array of entry `eid` (see `entry_view`), and whether it is a view of the entry.
    fn new_entry_array(&mut self, eid: usize) -> Result<(ObjRef<NDArray>, bool)> {
        let plan = self.plan.clone();
        let e = &plan.graph.entries[eid];
        if self.layout.homes[eid] == Home::Transient && self.entry_override[eid].is_none() {
            return Err(Error::value(format!(
                "entry {eid} is derived from weights only and was not kept (a debug executor keeps every node's output)"
            )));
        }
        if self.layout.homes[eid] == Home::Slot && !self.slots[e.storage_id].is_bound() {
            self.make_private(e.storage_id)?;
        }
        if let Some(view) = self.ops.view(eid, &e.shape, e.dtype)? {
            return Ok((view, true));
        }
        // A weight (bound or derived): a copy, which a host may write without reaching it.
        let mut bytes = vec![0u8; plan.entry_bytes[eid]];
        crate::tensor::raw::copy_to_bytes(self.ops.source(eid)?, &mut bytes)?;
        Ok((NDArray::from_bytes(&e.shape, e.dtype, &bytes)?, false))
    }

    /// Makes input entry `eid` writable without touching anyone else's memory: caller memory
    /// bound with zero-copy is written in place, a weight or a missing slot becomes private first.
    /// Inside a transaction, the bytes about to be overwritten in place are kept to put back.
    #[inline]
    fn prepare_write(&mut self, eid: usize) -> Result<()> {
        let sid = self.plan.graph.entries[eid].storage_id;
        if self.slot_override[sid].is_none() {
            if self.plan.storage.slots[sid].role == SlotRole::Input {
                self.make_private(sid)?;
            } else {
                // An input sharing a storage id with operator outputs lives in the arena.
                self.prepare()?;
            }
        }
        if self.in_transaction() && self.journal_needs_bytes(eid) {
            let mut old = vec![0u8; self.plan.entry_bytes[eid]];
            crate::tensor::raw::copy_to_bytes(self.ops.source(eid)?, &mut old)?;
            self.journal_keep_bytes(eid, old);
        }
        Ok(())
    }

    /// Makes entry `eid` writable and writes it with `write`. When the entry first needs memory
    /// of its own (the first write, or the first since its weight was shared), a write that then
    /// fails leaves the slot as it was: in a transaction, which the common case does not pay for.
    #[inline]
    fn write_with(&mut self, eid: usize, write: impl FnOnce(&mut Ops) -> Result<()>) -> Result<()> {
        let sid = self.plan.graph.entries[eid].storage_id;
        let rebinds = self.slot_override[sid].is_none()
            && self.plan.storage.slots[sid].role == SlotRole::Input
            && !matches!(self.slots[sid], SlotMemory::Owned(_));
        if rebinds {
            return self.transaction(|st| {
                st.prepare_write(eid)?;
                write(&mut st.ops)
            });
        }
        self.prepare_write(eid)?;
        write(&mut self.ops)
    }

    /// Copies `src`, already checked to have entry `eid`'s shape and dtype, into it.
    #[inline]
    pub fn write_entry_matched(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.write_with(eid, |ops| ops.write_from(eid, src))
    }

    /// Copies raw bytes into input entry `eid`; the sizes must match.
    pub fn write_entry_bytes(&mut self, eid: usize, bytes: &[u8]) -> Result<()> {
        let n = self.plan.entry_bytes[eid];
        if n != bytes.len() {
            return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
        }
        self.write_with(eid, |ops| ops.write_bytes(eid, bytes))
    }

    /// Copies entry `eid` into `dst`, of any shape and dtype of the entry's byte size.
    pub fn copy_entry_to(&mut self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        let e = &self.plan.graph.entries[eid];
        // The entry's own shape and dtype, the usual case, have its byte size: nothing to compute.
        let n =
            if dst.dtype() == e.dtype && dst.has_shape(&e.shape) { self.plan.entry_bytes[eid] } else { dst.nbytes()? };
        if n != self.plan.entry_bytes[eid] {
            return Err(Error::value(format!(
                "cannot copy {} bytes into {n} bytes ({} {:?})",
                self.plan.entry_bytes[eid],
                dst.dtype(),
                dst.shape()
            )));
        }
        self.read_entry_matched(eid, dst)
    }

    /// Copies entry `eid` into `dst`, already checked to have its shape and element size.
    pub fn read_entry_matched(&mut self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        self.prepare()?;
        self.ops.read_into(eid, dst)
    }

    /// Copies entry `oeid` of `other`, already checked to have entry `eid`'s shape and dtype, into
    /// input entry `eid` of this executor.
    pub fn copy_entry_from(&mut self, eid: usize, other: &mut Instance, oeid: usize) -> Result<()> {
        other.prepare()?;
        self.write_entry_matched(eid, other.ops.source(oeid)?)
    }

    pub fn entry_data(&self, eid: usize) -> *const u8 {
        self.ops.data(eid)
    }

    pub fn slot(&self, sid: usize) -> &SlotMemory {
        &self.slots[sid]
    }
}
