//! Transactions: a call that changes several bindings (loading or sharing weights, changing what
//! is folded) either completes, or fails and leaves the executor exactly as it was: the same
//! memory behind every slot and entry, the same layout, the same arrays handed out, the same
//! bytes in memory it wrote in place.
//!
//! The journal is a copy of the state taken when the call begins. Its copies of `Arc`s keep the
//! old memory alive to put back, so they count as holders: sharing decisions that read holder
//! counts (is a weight held by anybody else? may a buffer be frozen in place?) subtract the
//! journal's own holds, and decide inside a transaction exactly as outside one.

#![forbid(unsafe_code)]

use super::activations::{Activations, Parts};
use super::slots::SlotMemory;
use super::Instance;
use crate::error::Result;
use crate::executor::bindings::{Bindings, Mem};
use crate::executor::kernels::External;
use crate::executor::layout::{Folding, Layout};
use crate::object::ObjRef;
use crate::tensor::{Buffer, FileMap, NDArray, Weight};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

pub(super) struct Journal {
    slots: Vec<SlotMemory>,
    slot_override: Vec<Option<External>>,
    entry_override: Vec<Option<External>>,
    param_names: HashSet<String>,
    bindings: Bindings,
    all_bound: bool,
    layout: Layout,
    stale: bool,
    holders: Vec<usize>,
    to_adopt: Option<Vec<(usize, Arc<Weight>)>>,
    adopted: bool,
    derived: Vec<Option<Arc<Weight>>>,
    derived_from: Vec<Option<Weak<Weight>>>,
    activations: Activations,
    outputs: Option<Parts>,
    views: Vec<Option<ObjRef<NDArray>>>,
    fold: Folding,
    last_executed: Option<usize>,
    prepared: Option<String>,
    mapped_files: Vec<Arc<FileMap>>,
    seen_shared: Vec<Option<(Weak<Weight>, std::time::Instant)>>,
    unfold_at: Option<std::time::Instant>,
    /// Bytes overwritten in place since the call began (caller memory, or memory the journal
    /// puts back), per entry: written back, last first.
    writes: Vec<(usize, Vec<u8>)>,
    /// The journal's own holds of each weight and buffer, by address.
    weight_holds: HashMap<usize, usize>,
    buffer_holds: HashMap<usize, usize>,
}

fn key<T>(a: &Arc<T>) -> usize {
    Arc::as_ptr(a) as usize
}

impl Journal {
    fn of(st: &Instance) -> Journal {
        let mut j = Journal {
            slots: st.slots.clone(),
            slot_override: st.slot_override.clone(),
            entry_override: st.entry_override.clone(),
            param_names: st.param_names.clone(),
            bindings: st.ops.snapshot(),
            all_bound: st.all_bound,
            layout: st.layout.clone(),
            stale: st.stale,
            holders: st.holders.clone(),
            to_adopt: st.to_adopt.clone(),
            adopted: st.adopted,
            derived: st.derived.clone(),
            derived_from: st.derived_from.clone(),
            activations: st.activations.clone(),
            outputs: st.outputs.clone(),
            views: st.views.clone(),
            fold: st.fold,
            last_executed: st.last_executed,
            prepared: st.prepared.clone(),
            mapped_files: st.mapped_files.clone(),
            seen_shared: st.seen_shared.clone(),
            unfold_at: st.unfold_at,
            writes: Vec::new(),
            weight_holds: HashMap::new(),
            buffer_holds: HashMap::new(),
        };
        let mut weights: Vec<&Arc<Weight>> = Vec::new();
        let mut buffers: Vec<&Arc<Buffer>> = Vec::new();
        for m in &j.slots {
            match m {
                SlotMemory::Weight(w) => weights.push(w),
                SlotMemory::Owned(b) => buffers.push(b),
                SlotMemory::Unbound => {}
            }
        }
        for m in j.bindings.memory() {
            match m {
                Mem::Weight(w) => weights.push(w),
                Mem::Buffer(b, _) => buffers.push(b),
                Mem::None | Mem::External(_) | Mem::Lent(_) => {}
            }
        }
        weights.extend(j.derived.iter().flatten());
        weights.extend(j.to_adopt.iter().flatten().map(|(_, w)| w));
        buffers.extend(j.activations.buffers());
        buffers.extend(j.outputs.iter().flat_map(Parts::buffers));
        let (mut wh, mut bh) = (HashMap::new(), HashMap::new());
        weights.into_iter().for_each(|w| *wh.entry(key(w)).or_insert(0) += 1);
        buffers.into_iter().for_each(|b| *bh.entry(key(b)).or_insert(0) += 1);
        (j.weight_holds, j.buffer_holds) = (wh, bh);
        j
    }

    /// Puts everything back. Nothing here can fail, except writing back bytes overwritten in
    /// device memory when the device itself fails (host memory is always written back).
    fn roll_back(self, st: &mut Instance) {
        st.slots = self.slots;
        st.slot_override = self.slot_override;
        st.entry_override = self.entry_override;
        st.param_names = self.param_names;
        st.ops.restore(self.bindings);
        st.all_bound = self.all_bound;
        st.ops.set_folded(&self.layout.folded);
        st.layout = self.layout;
        st.stale = self.stale;
        st.holders = self.holders;
        st.to_adopt = self.to_adopt;
        st.adopted = self.adopted;
        st.derived = self.derived;
        st.derived_from = self.derived_from;
        st.activations = self.activations;
        st.outputs = self.outputs;
        st.views = self.views;
        st.fold = self.fold;
        st.last_executed = self.last_executed;
        st.prepared = self.prepared;
        st.mapped_files = self.mapped_files;
        st.seen_shared = self.seen_shared;
        st.unfold_at = self.unfold_at;
        // Arrays handed out that followed their entries during the call follow them back.
        for eid in 0..st.views.len() {
            if let Some(view) = st.views[eid].clone() {
                if !st.ops.follow(eid, &view) {
                    st.views[eid] = None;
                }
            }
        }
        for (eid, bytes) in self.writes.into_iter().rev() {
            let _ = st.ops.write_bytes(eid, &bytes);
        }
        // A pool this executor stays in learns the need of the layout put back.
        st.pool_need();
    }
}

impl Instance {
    /// Runs `body`; when it fails, puts this executor back as it was before (see the module
    /// docs). Inside another transaction, the outer one puts it back.
    pub fn transaction<T>(&mut self, body: impl FnOnce(&mut Instance) -> Result<T>) -> Result<T> {
        if self.journal.is_some() {
            return body(self);
        }
        self.journal = Some(Box::new(Journal::of(self)));
        let result = body(self);
        let journal = self.journal.take().expect("begun above");
        if result.is_err() {
            journal.roll_back(self);
        }
        result
    }

    /// A transaction over two executors (sharing from one into the other): both complete, or
    /// both are put back.
    pub fn transaction_pair<T>(
        a: &mut Instance,
        b: &mut Instance,
        body: impl FnOnce(&mut Instance, &mut Instance) -> Result<T>,
    ) -> Result<T> {
        a.transaction(|a| b.transaction(|b| body(a, b)))
    }

    #[inline]
    pub(super) fn in_transaction(&self) -> bool {
        self.journal.is_some()
    }

    /// How many holds of `weight` the journal has.
    pub(super) fn journal_holds_weight(&self, weight: &Arc<Weight>) -> usize {
        self.journal.as_ref().and_then(|j| j.weight_holds.get(&key(weight)).copied()).unwrap_or(0)
    }

    /// How many holds of `buffer` the journal has.
    pub(super) fn journal_holds_buffer(&self, buffer: &Arc<Buffer>) -> usize {
        self.journal.as_ref().and_then(|j| j.buffer_holds.get(&key(buffer)).copied()).unwrap_or(0)
    }

    /// Whether the journal keeps `view` as entry `eid`'s array (1) or not (0).
    pub(super) fn journal_holds_view(&self, eid: usize, view: &ObjRef<NDArray>) -> usize {
        self.journal.as_ref().and_then(|j| j.views[eid].as_ref()).map_or(0, |v| usize::from(ObjRef::ptr_eq(v, view)))
    }

    /// Whether writing entry `eid` in place would change bytes the journal cannot otherwise put
    /// back (caller memory, or memory it holds), and they are not kept yet.
    pub(super) fn journal_needs_bytes(&self, eid: usize) -> bool {
        let Some(j) = &self.journal else { return false };
        if j.writes.iter().any(|(e, _)| *e == eid) {
            return false;
        }
        match self.ops.memory_of(eid) {
            Mem::External(_) => true,
            Mem::Buffer(b, _) => j.buffer_holds.contains_key(&key(b)),
            // Values of a run: nobody expects them back.
            Mem::Weight(_) | Mem::None | Mem::Lent(_) => false,
        }
    }

    pub(super) fn journal_keep_bytes(&mut self, eid: usize, bytes: Vec<u8>) {
        if let Some(j) = &mut self.journal {
            j.writes.push((eid, bytes));
        }
    }
}
