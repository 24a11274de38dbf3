//! Zero-copy bindings: inputs read from, and outputs written into, the caller's memory
//! (`set_input_zero_copy`, `set_output_zero_copy`), checked before anything changes.

#![forbid(unsafe_code)]

use super::slots::SlotMemory;
use super::Instance;
use crate::error::{Error, Result};
use crate::executor::kernels::External;
use crate::executor::layout::Home;
use crate::tensor::raw::ZeroCopy;
use crate::tensor::RawTensor;

impl Instance {
    /// Redirects the slot of input entry `eid` to caller memory.
    pub fn bind_input_external(&mut self, eid: usize, src: ZeroCopy<'_>) -> Result<()> {
        self.check_external(eid, src.tensor())?;
        let sid = self.plan.graph.entries[eid].storage_id;
        if self.moves_alone(sid) {
            // What a host does before every run: the same data input, bound to caller memory
            // again. Only the entries of its slot move; nothing else is laid out anew.
            let x = External::of(&src);
            self.slot_override[sid] = Some(x);
            let plan = self.plan.clone();
            for &e in plan.slot_entries(sid) {
                self.ops.rebind_external(e, x);
                // An array handed out for the entry follows it, as after any binding.
                if self.views[e].as_ref().is_some_and(|view| !self.ops.follow(e, view)) {
                    self.views[e] = None;
                }
            }
            return Ok(());
        }
        let before = (self.slot_override[sid], self.entry_override.clone(), self.stale);
        self.slot_override[sid] = Some(External::of(&src));
        // The latest binding wins: outputs that alias this input (a `__nop` of it) bound to caller
        // memory before now read the input's new memory, as upstream's do.
        for &e in self.plan.slot_entries(sid) {
            if self.entry_override[e].take().is_some() {
                self.stale |= matches!(self.layout.homes.get(e), Some(Home::Derived | Home::Transient));
            }
        }
        // Only a weight redirected changes what can be folded: rebinding a data input before every
        // run costs no new layout.
        if matches!(self.slots[sid], SlotMemory::Weight(_)) {
            self.stale = true;
        }
        self.refresh().inspect_err(|_| {
            (self.slot_override[sid], self.entry_override, self.stale) = before;
        })
    }

    /// Whether slot `sid`'s entries can move to other caller memory by themselves: the slot is
    /// bound to caller memory already, it holds no weight (whose move changes what folds), and
    /// none of its entries is redirected on its own.
    fn moves_alone(&self, sid: usize) -> bool {
        self.slot_override[sid].is_some()
            && !matches!(self.slots[sid], SlotMemory::Weight(_))
            && self.plan.slot_entries(sid).iter().all(|&e| self.entry_override[e].is_none())
    }

    /// Redirects output entry `eid` to caller memory, and the operator results it aliases
    /// through `__nop` (so their producer writes there, and every reader follows). A `__nop` of a
    /// graph input stops the walk: the input keeps its memory, and the output, which no operator
    /// writes, shows the caller's bytes, as upstream's.
    pub fn bind_output_external(&mut self, eid: usize, dst: ZeroCopy<'_>) -> Result<()> {
        self.check_external(eid, dst.tensor())?;
        let before = (self.entry_override.clone(), self.stale);
        let ptr = External::of(&dst);
        let graph = &self.plan.graph;
        let mut stack = vec![eid];
        while let Some(e) = stack.pop() {
            self.entry_override[e] = Some(ptr);
            // A folded result redirected must be written by every run again.
            if matches!(self.layout.homes.get(e), Some(Home::Derived | Home::Transient)) {
                self.stale = true;
            }
            // The producer of `e`, if it is a __nop, reads an alias that must move too.
            let producer = graph.node_row_ptr.partition_point(|&start| start <= e) - 1;
            if let crate::graph::NodeKind::Op(a) = &graph.nodes[producer].kind {
                if a.func_name == "__nop" {
                    if let Some(&(src, idx)) = graph.nodes[producer].inputs.first() {
                        if matches!(graph.nodes[src].kind, crate::graph::NodeKind::Op(_)) {
                            stack.push(graph.entry_id(src, idx));
                        }
                    }
                }
            }
        }
        self.refresh().inspect_err(|_| {
            (self.entry_override, self.stale) = before;
        })
    }

    fn check_external(&self, eid: usize, t: RawTensor<'_>) -> Result<()> {
        let e = &self.plan.graph.entries[eid];
        let device = self.plan.entry_device[eid];
        if t.device() != device {
            return Err(Error::value(format!(
                "zero-copy tensor is on device {}, the entry on device {}",
                crate::device::describe(t.device()),
                crate::device::describe(device)
            )));
        }
        if t.place().data.is_null() && self.plan.entry_bytes[eid] > 0 {
            return Err(Error::value("zero-copy tensor has no data (a null data pointer)"));
        }
        if crate::device::is_host(t.device()) {
            if t.data_ptr() as usize % 64 != 0 {
                return Err(Error::value("zero-copy tensor data must be aligned to 64 bytes"));
            }
        } else if t.place().offset != 0 {
            // Kernels take a device tensor's data without its offset.
            return Err(Error::value("a zero-copy tensor on a device must have byte_offset 0"));
        }
        if !t.has_shape(&e.shape) || t.dtype() != e.dtype {
            return Err(Error::value(format!(
                "zero-copy tensor is {} {:?}, the entry is {} {:?}",
                t.dtype(),
                t.shape(),
                e.dtype,
                e.shape
            )));
        }
        if !t.is_compact() {
            return Err(Error::value("zero-copy tensor must be compact"));
        }
        if let Some(image) = self.plan.storage.slots[e.storage_id].texture {
            // Kernels read and write this entry as an image of the slot's extent; a caller's
            // tensor is memory of unknown form.
            return Err(Error::value(format!(
                "entry {eid} lives in texture memory ('{}'): it is set and read by copy, not bound with zero-copy",
                image.texture.scope()
            )));
        }
        Ok(())
    }
}
