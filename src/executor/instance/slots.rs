//! Input slots: the memory behind each graph input's storage slot, and how weights come and go
//! (bound from a params blob or a factory, shared out to another executor, made private on a
//! write). Each change binds the entries again, all or nothing: a change a device refuses leaves
//! the slot as it was.

#![forbid(unsafe_code)]

use super::Instance;
use crate::error::{Error, Result};
use crate::executor::bindings::Mem;
use crate::executor::layout::Home;
use crate::memory_plan::SlotRole;
use crate::tensor::{Buffer, Weight};
use std::sync::Arc;

/// The memory behind one input storage slot (graph inputs and their `__nop` aliases). A shared
/// weight is a variant of its own, so no path can mistake it for memory this executor may write.
#[derive(Clone, Default)]
pub enum SlotMemory {
    /// Nothing yet: input slots get memory when first needed, so a weight that will be shared is
    /// never allocated twice.
    #[default]
    Unbound,
    /// This executor's own memory, writable (inputs, private weights). Others may hold the `Arc`
    /// through views (`get_input`), never to share it as a weight.
    Owned(Arc<Buffer>),
    /// A weight, read-only: shared with other executors, a factory, a mapped file or a library,
    /// or loaded by this executor and frozen so that what is derived from it can be kept.
    Weight(Arc<Weight>),
}

impl SlotMemory {
    pub(super) fn owned(buffer: Buffer) -> SlotMemory {
        SlotMemory::Owned(Arc::new(buffer))
    }

    pub(super) fn memory(&self) -> Mem {
        match self {
            SlotMemory::Unbound => Mem::None,
            SlotMemory::Owned(b) => Mem::Buffer(b.clone(), 0),
            SlotMemory::Weight(w) => Mem::Weight(w.clone()),
        }
    }

    pub fn is_bound(&self) -> bool {
        !matches!(self, SlotMemory::Unbound)
    }
}

impl Instance {
    /// Puts `memory` in slot `sid` and binds the entries to it; when they cannot be bound, the
    /// slot keeps what it had and nothing changes.
    fn put_slot(&mut self, sid: usize, memory: SlotMemory) -> Result<()> {
        let old = std::mem::replace(&mut self.slots[sid], memory);
        let was_stale = self.stale;
        // What is folded from this slot depends on what it holds.
        self.stale |= matches!(old, SlotMemory::Weight(_)) || matches!(self.slots[sid], SlotMemory::Weight(_));
        if let Err(e) = self.refresh() {
            self.slots[sid] = old;
            self.stale = was_stale;
            return Err(e);
        }
        Ok(())
    }

    /// Gives slot `sid` writable memory of this executor's own: fresh zeros for an unbound slot, a
    /// private copy of a weight (copy on write; what was derived from it is derived again).
    #[inline]
    pub fn make_private(&mut self, sid: usize) -> Result<()> {
        if let SlotMemory::Owned(_) = &self.slots[sid] {
            return Ok(());
        }
        self.give_private_memory(sid)
    }

    #[inline(never)]
    fn give_private_memory(&mut self, sid: usize) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        let device = self.plan.slot_device[sid];
        let fresh = match &self.slots[sid] {
            SlotMemory::Owned(_) => return Ok(()),
            SlotMemory::Unbound => self.plan.new_slot_buffer(sid)?,
            SlotMemory::Weight(w) if self.plan.image_form(sid).is_some() => {
                // An image of the slot's own, holding the weight's pixels.
                let mut image = self.plan.new_slot_buffer(sid)?;
                image.write(0, &w.bytes()?)?;
                image
            }
            SlotMemory::Weight(w) => w.to_buffer(device, 0, bytes)?,
        };
        self.put_slot(sid, SlotMemory::owned(fresh))
    }

    /// Binds slot `sid` to a weight; the weight must cover the slot and be usable on the slot's
    /// device (else the error names both devices, and the slot is unchanged).
    pub fn bind_weight(&mut self, sid: usize, weight: Arc<Weight>) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        if weight.len() < bytes {
            return Err(Error::internal(format!(
                "a weight of {} bytes cannot back storage slot {sid} of {bytes} bytes",
                weight.len()
            )));
        }
        weight.check_usable_on(self.plan.slot_device[sid])?;
        self.put_slot(sid, SlotMemory::Weight(weight))
    }

    /// Makes input entry `eid` hold parameter `name`'s value, `weight`: bound without a copy when
    /// its slot can share (it holds that input alone, the weight covers it, and it is not bound to
    /// caller memory), else written into the entry's memory. Returns whether it was bound.
    pub fn set_param(&mut self, name: &str, eid: usize, weight: Arc<Weight>) -> Result<bool> {
        let sid = self.plan.graph.entries[eid].storage_id;
        let shares = self.plan.is_shareable_slot(sid)
            && weight.len() >= self.plan.storage.slots[sid].bytes
            && !self.slot_redirected(sid);
        let done = if shares {
            self.bind_weight(sid, weight)
        } else {
            let n = self.plan.entry_bytes[eid];
            weight.bytes().and_then(|all| {
                let b = all.get(..n).ok_or_else(|| Error::value(format!("{} bytes, the entry {n}", weight.len())))?;
                self.write_entry_bytes(eid, b)
            })
        };
        done.map_err(|e| e.context(format!("parameter '{name}'")))?;
        self.param_names.insert(name.to_string());
        Ok(shares)
    }

    /// Slot `sid` as a weight others may share. Memory of this executor's own is frozen into one:
    /// in place when nobody can write it any more, as a copy when a view handed out earlier still
    /// can (a write through that view must not reach the executors that share the weight).
    pub fn share_out(&mut self, sid: usize) -> Result<Arc<Weight>> {
        let weight = match &self.slots[sid] {
            SlotMemory::Weight(w) => return Ok(w.clone()),
            SlotMemory::Unbound => Weight::freeze(self.plan.new_slot_buffer(sid)?),
            SlotMemory::Owned(buf) if self.only_readers_of(sid, buf) => Weight::freeze_shared(buf.clone()),
            SlotMemory::Owned(buf) => Weight::freeze(buf.duplicate_range(0, buf.len())?),
        };
        let weight = Arc::new(weight);
        self.bind_weight(sid, weight.clone())?;
        Ok(weight)
    }

    /// Whether everything holding `buffer`, slot `sid`'s memory, only reads it from now on: the
    /// slot itself, this executor's tensors, the arrays it keeps to hand out again (and nobody
    /// else holds), and a journal keeping it to put back. Any other holder is a host's view.
    fn only_readers_of(&self, sid: usize, buffer: &Arc<Buffer>) -> bool {
        let plan = &self.plan;
        let kept_views = plan
            .slot_entries(sid)
            .iter()
            .filter(|&&e| {
                self.views[e].as_ref().is_some_and(|v| {
                    v.buffer().is_some_and(|b| Arc::ptr_eq(b, buffer))
                        && v.ref_count() as usize == 1 + self.journal_holds_view(e, v)
                })
            })
            .count();
        let known = 1 + self.ops_holds_buffer(buffer) + kept_views + self.journal_holds_buffer(buffer);
        Arc::strong_count(buffer) == known
    }

    /// Per slot: whether it needs memory of its own in the current layout: every input slot, and
    /// texture slots holding a value the layout leaves there (not one folded into a weight).
    pub(super) fn slots_needing_memory(&self) -> Vec<bool> {
        let plan = &self.plan;
        let mut need: Vec<bool> = plan.storage.slots.iter().map(|s| s.role == SlotRole::Input).collect();
        for (e, entry) in plan.graph.entries.iter().enumerate() {
            let sid = entry.storage_id;
            if plan.storage.slots[sid].texture.is_some() && self.layout.homes.get(e).is_none_or(|h| *h == Home::Slot) {
                need[sid] = true;
            }
        }
        need
    }

    /// Gives back the images of texture slots whose values the current layout keeps elsewhere
    /// (folded into weights): nothing is bound to them any more.
    pub(super) fn release_unneeded_textures(&mut self) {
        let need = self.slots_needing_memory();
        for (sid, slot) in self.plan.storage.slots.iter().enumerate() {
            if slot.role != SlotRole::Input && slot.texture.is_some() && !need[sid] {
                self.slots[sid] = SlotMemory::Unbound;
            }
        }
    }

    /// Binds every input slot that still has no memory (inputs never set read as zeros), and the
    /// texture slots the layout uses, all or nothing.
    pub(super) fn bind_all(&mut self) -> Result<()> {
        let plan = self.plan.clone();
        let need = self.slots_needing_memory();
        let missing: Vec<usize> =
            (0..self.slots.len()).filter(|&sid| !self.slots[sid].is_bound() && need[sid]).collect();
        let mut fresh = Vec::with_capacity(missing.len());
        for &sid in &missing {
            fresh.push(plan.new_slot_buffer(sid)?);
        }
        for (&sid, b) in missing.iter().zip(fresh) {
            self.slots[sid] = SlotMemory::owned(b);
        }
        if let Err(e) = self.refresh() {
            missing.iter().for_each(|&sid| self.slots[sid] = SlotMemory::Unbound);
            return Err(e);
        }
        Ok(())
    }
}
