//! The per-executor state: input slot memory, the derived weights and activation arena of its
//! layout (see `layout`), and which memory each entry uses. Inputs are bound per storage slot, so
//! every entry planned into a slot (a `__nop` reshape of a weight included) sees the same bytes;
//! operator outputs live where the layout puts their alias root.
//!
//! Safe code: it decides which memory each entry uses and hands that to `kernels` (the tensor
//! table, the calls and the copies), which holds it for as long as the entry points there.

#![forbid(unsafe_code)]

use super::arena::Arena;
use super::fold;
use super::kernels::{External, Mem, Ops, ZeroCopy};
use super::layout::{self, Folding, Home, Layout};
use super::plan::{Part, Plan};
use crate::error::{Error, Result};
use crate::memory_plan::SlotRole;
use crate::object::ObjRef;
use crate::tensor::{Buffer, NDArray, RawTensor, Weight};
use std::collections::HashSet;
use std::sync::{Arc, Weak};

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
    fn owned(buffer: Buffer) -> SlotMemory {
        SlotMemory::Owned(Arc::new(buffer))
    }

    fn memory(&self) -> Mem {
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

/// Where operator outputs that change every run live.
#[derive(Default)]
enum Activations {
    /// Not laid out yet.
    #[default]
    None,
    /// This executor's own arena: a buffer per part (per device).
    Own(Parts),
    /// An arena shared with executors that run in turn (one device), and the generation of it bound.
    Shared { arena: Arc<Arena>, buffer: Arc<Buffer>, generation: u64 },
}

impl Activations {
    fn at(&self, offset: usize) -> Mem {
        match self {
            Activations::None => Mem::None,
            Activations::Own(parts) => parts.at(offset),
            Activations::Shared { buffer, .. } => Mem::Buffer(buffer.clone(), offset),
        }
    }
}

/// A region of the layout (the activation arena, the output region) in memory: one buffer per
/// part, each on its part's device, at the part's base offset in the region.
#[derive(Clone, Default)]
struct Parts(Vec<(Part, Arc<Buffer>)>);

impl Parts {
    fn new(parts: &[Part]) -> Result<Parts> {
        parts.iter().map(|&p| Ok((p, Arc::new(Buffer::zeroed_on(p.device, p.len)?)))).collect::<Result<_>>().map(Parts)
    }

    /// Whether this memory has exactly these parts.
    fn fits(&self, parts: &[Part]) -> bool {
        self.0.len() == parts.len() && self.0.iter().zip(parts).all(|((a, _), b)| a == b)
    }

    /// The memory at `offset` of the region.
    fn at(&self, offset: usize) -> Mem {
        self.0
            .iter()
            .find(|(p, _)| (p.base..p.base + p.len).contains(&offset))
            .map_or(Mem::None, |(p, b)| Mem::Buffer(b.clone(), offset - p.base))
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|(p, _)| p.len).sum()
    }
}

pub struct Instance {
    pub plan: Arc<Plan>,
    /// Per storage slot; only input slots are bound (operator outputs live by the layout).
    slots: Vec<SlotMemory>,
    /// Zero-copy input bindings, per slot.
    slot_override: Vec<Option<External>>,
    /// Zero-copy output bindings, per entry.
    entry_override: Vec<Option<External>>,
    /// The entry tensors, their memory and the operators' calls.
    ops: Ops,
    /// Names loaded as parameters (hidden from `get_input_info`).
    pub param_names: HashSet<String>,
    all_bound: bool,
    layout: Layout,
    /// The layout may not match the bindings any more (a weight bound, made private, redirected).
    stale: bool,
    /// Per slot: the holders of its weight when the layout was made (see `holders_changed`).
    holders: Vec<usize>,
    /// Derived weights a prepared params file brought, per alias root, for the next layout to use
    /// instead of running the folded operators; `adopted` says whether one did.
    to_adopt: Option<Vec<(usize, Arc<Weight>)>>,
    adopted: bool,
    /// Per alias root: the weights derived from the bound weights.
    derived: Vec<Option<Arc<Weight>>>,
    /// Per slot: the weight the derived weights were computed from.
    derived_from: Vec<Option<Weak<Weight>>>,
    activations: Activations,
    /// The graph outputs' region (`Home::Output`), allocated at the first layout and kept.
    outputs: Option<Parts>,
    /// Per entry: the array `entry_view` handed out, handed out again while it shows the entry.
    /// Upstream hands out its entries themselves, so a host's array follows the entry's zero-copy
    /// bindings; `refresh` points these arrays wherever the entry goes, when they can follow.
    views: Vec<Option<ObjRef<NDArray>>>,
    /// Which weight-only operators to fold (`set_fold_weights`, `TVM_RT_FOLD_WEIGHTS`).
    fold: Folding,
    /// Keep every folded result (debug executors read any node's output).
    keep_derived: bool,
    /// The node `execute_node` ran last (debug executors).
    pub last_executed: Option<usize>,
}

impl Instance {
    /// A new instance. Memory comes when first needed: input slots when set or loaded (so a weight
    /// that will be shared is never allocated twice), activations once the weights are known.
    pub fn new(plan: Arc<Plan>, keep_derived: bool) -> Result<Instance> {
        let slots = plan
            .linked
            .iter()
            .map(|linked| linked.as_ref().map_or(SlotMemory::Unbound, |w| SlotMemory::Weight(w.clone())))
            .collect::<Vec<_>>();
        let ops = Ops::new(&plan);
        let n_slots = slots.len();
        let n_entries = plan.graph.entries.len();
        // Inputs whose data the library links in are weights.
        let param_names = (0..plan.num_inputs())
            .filter(|&i| plan.linked[plan.graph.entries[plan.input_entries[i]].storage_id].is_some())
            .map(|i| plan.input_name(i).to_string())
            .collect();
        let mut inst = Instance {
            plan,
            slots,
            slot_override: vec![None; n_slots],
            entry_override: vec![None; n_entries],
            ops,
            param_names,
            all_bound: false,
            layout: Layout::default(),
            stale: true,
            holders: Vec::new(),
            to_adopt: None,
            adopted: false,
            derived: Vec::new(),
            derived_from: vec![None; n_slots],
            activations: Activations::None,
            outputs: None,
            views: vec![None; n_entries],
            // A debug executor runs and times every node, as upstream's, unless told to fold.
            fold: if keep_derived { Folding::Off } else { Folding::by_default() },
            keep_derived,
            last_executed: None,
        };
        inst.refresh()?;
        Ok(inst)
    }

    /// Points every entry tensor at its current memory. Until the layout is brought up to date,
    /// activations stay in the previous layout's memory, which the tensors hold meanwhile. Binds
    /// every entry it can; the first entry a device could not bind is the error.
    fn refresh(&mut self) -> Result<()> {
        let plan = self.plan.clone();
        let mut failed = Ok(());
        for (eid, e) in plan.graph.entries.iter().enumerate() {
            let mem = self.memory_of(eid, e.storage_id);
            if let Err(err) = self.ops.bind(eid, mem) {
                failed = failed.and(Err(err.context(format!("binding entry {eid}"))));
            }
            // The array handed out for the entry follows it, where it can.
            if self.views[eid].as_ref().is_some_and(|view| !self.ops.follow(eid, view)) {
                self.views[eid] = None;
            }
        }
        self.all_bound =
            self.slots.iter().zip(&plan.storage.slots).all(|(m, s)| m.is_bound() || s.role != SlotRole::Input);
        failed
    }

    /// The memory entry `eid` (in slot `sid`) uses now: a zero-copy binding, else its home.
    fn memory_of(&self, eid: usize, sid: usize) -> Mem {
        if let Some(x) = self.entry_override[eid].or(self.slot_override[sid]) {
            return Mem::External(x);
        }
        match self.layout.homes.get(eid).copied().unwrap_or(Home::Slot) {
            Home::Slot => self.slots[sid].memory(),
            Home::Arena(offset) => self.activations.at(offset),
            Home::Output(offset) => self.outputs.as_ref().map_or(Mem::None, |o| o.at(offset)),
            Home::Derived => {
                self.derived.get(self.plan.alias_root[eid]).cloned().flatten().map_or(Mem::None, Mem::Weight)
            }
            Home::Transient => Mem::None,
        }
    }

    /// Whether the weight in slot `sid` is held by nothing but this executor.
    pub fn weight_is_own(&self, sid: usize) -> bool {
        match &self.slots[sid] {
            // The slot's own count, and one per entry tensor bound to it.
            SlotMemory::Weight(w) => Arc::strong_count(w) == 1 + self.ops.bound_to(w),
            _ => false,
        }
    }

    /// Whether slot `sid` is bound to caller memory with zero-copy.
    pub fn slot_redirected(&self, sid: usize) -> bool {
        self.slot_override[sid].is_some()
    }

    pub fn slot(&self, sid: usize) -> &SlotMemory {
        &self.slots[sid]
    }

    /// Per storage slot: holds an input known as a parameter (loaded, shared, a factory's).
    pub fn param_slots(&self) -> Vec<bool> {
        let plan = &self.plan;
        let mut out = vec![false; self.slots.len()];
        for (i, &eid) in plan.input_entries.iter().enumerate() {
            if self.param_names.contains(plan.input_name(i)) {
                out[plan.graph.entries[eid].storage_id] = true;
            }
        }
        out
    }

    /// Which weight-only operators this executor folds.
    pub fn set_fold(&mut self, fold: Folding) {
        if self.fold != fold {
            self.fold = fold;
            self.stale = true;
        }
    }

    /// The current layout (as of the last [`Instance::prepare`]).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Bytes of the distinct derived weights this executor holds (two results with equal bytes
    /// are one weight).
    pub fn derived_bytes(&self) -> usize {
        let mut seen = HashSet::new();
        self.derived.iter().flatten().filter(|w| seen.insert(Arc::as_ptr(w))).map(|w| w.len()).sum()
    }

    /// Bytes of this executor's own activation memory: its arena (unless shared) and its outputs.
    pub fn own_activation_bytes(&self) -> usize {
        let arena = match &self.activations {
            Activations::Own(parts) => parts.bytes(),
            _ => 0,
        };
        arena + self.outputs.as_ref().map_or(0, Parts::bytes)
    }

    /// Brings the layout up to date with the bindings: decides what to fold, runs the folded
    /// operators if their weights changed (if one fails, nothing is folded), and sizes the
    /// activation arena.
    pub fn prepare(&mut self) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        let plan = self.plan.clone();
        let facts = self.layout_facts();
        let mut layout = facts.layout(&plan, self.fold != Folding::Off)?;
        let sources = self.fold_sources(&facts.constant_slot);
        let refold = layout.folded != self.layout.folded
            || layout.homes != self.layout.homes
            || !fold::same_sources(&sources, &self.derived_from);
        let mut derived = None;
        if refold && layout.folds_anything() {
            // Another executor of this plan may have folded these very weights already.
            let folded = match self.adoptable(&layout).or_else(|| fold::cached(&plan, &layout, &sources)) {
                Some(d) => Ok(d),
                None => {
                    fold::fold(&plan, &mut self.ops, &layout).inspect(|d| fold::remember(&plan, &layout, &sources, d))
                }
            };
            match folded {
                Ok(d) => derived = Some(d),
                // An operator failed on the weights (or memory ran out): fold nothing, so every
                // operator runs at `run`, which reports the failure where upstream does.
                Err(_) => layout = facts.layout(&plan, false)?,
            }
        }
        // Memory for the layout before anything is committed: nothing changes if there is none.
        let activations = match self.memory_for(&layout) {
            Ok(a) => a,
            Err(e) => {
                // Folding pointed tensors at its scratch memory: back to the old layout's.
                let _ = self.refresh();
                return Err(e);
            }
        };
        if refold {
            self.derived = derived.unwrap_or_default();
            self.derived_from = sources;
        }
        self.activations = activations;
        self.ops.set_folded(&layout.folded);
        self.layout = layout;
        self.stale = false;
        let bound = self.refresh();
        self.holders = self.holder_counts();
        bound
    }

    /// The derived weights brought by `adopt`, per alias root, if they are exactly the ones
    /// `layout` keeps (each root of its size).
    fn adoptable(&mut self, layout: &Layout) -> Option<Vec<Option<Arc<Weight>>>> {
        let list = self.to_adopt.take()?;
        let plan = &self.plan;
        let kept: Vec<usize> = (0..plan.graph.num_entries())
            .filter(|&r| plan.alias_root[r] == r && layout.homes[r] == Home::Derived)
            .collect();
        let mut roots: Vec<usize> = list.iter().map(|(r, _)| *r).collect();
        roots.sort_unstable();
        if roots != kept || list.iter().any(|(r, w)| w.len() != plan.root_bytes[*r]) {
            return None;
        }
        let mut derived = vec![None; plan.graph.num_entries()];
        for (r, w) in list {
            derived[r] = Some(w);
        }
        self.adopted = true;
        Some(derived)
    }

    /// Takes derived weights computed elsewhere (a prepared params file) for the next layout, which
    /// folds everything; returns after laying out whether they fit it.
    pub fn adopt(&mut self, derived: Vec<(usize, Arc<Weight>)>) -> Result<bool> {
        self.to_adopt = Some(derived);
        self.adopted = false;
        self.fold = Folding::All;
        self.stale = true;
        self.prepare()?;
        self.to_adopt = None;
        Ok(self.adopted)
    }

    /// The derived weights this executor holds, per alias root.
    pub fn derived_weights(&self) -> Vec<(usize, Arc<Weight>)> {
        self.derived.iter().enumerate().filter_map(|(r, w)| w.clone().map(|w| (r, w))).collect()
    }

    /// Per slot: how many hold its weight (0 for other slots).
    fn holder_counts(&self) -> Vec<usize> {
        self.slots.iter().map(|m| if let SlotMemory::Weight(w) = m { Arc::strong_count(w) } else { 0 }).collect()
    }

    /// Whether a weight gained or lost holders since the layout was made: under `Folding::Shared`
    /// that decides what is folded (a second executor sharing the weights folds them in both; the
    /// last one left alone runs them again and lets what was derived go).
    fn holders_changed(&self) -> bool {
        self.fold == Folding::Shared
            && self.slots.iter().zip(&self.holders).any(|(m, &n)| match m {
                SlotMemory::Weight(w) => Arc::strong_count(w) != n,
                _ => n != 0,
            })
    }

    /// What decides the layout besides the plan, from the bindings now.
    fn layout_facts(&self) -> LayoutFacts {
        let constant_slot = (0..self.slots.len())
            .map(|sid| match &self.slots[sid] {
                SlotMemory::Weight(w) => {
                    self.slot_override[sid].is_none() && self.fold.folds(w, !self.weight_is_own(sid))
                }
                _ => false,
            })
            .collect();
        let param_slot = self.param_slots();
        let weight_slot =
            self.slots.iter().zip(&param_slot).map(|(m, &param)| param || matches!(m, SlotMemory::Weight(_))).collect();
        LayoutFacts {
            constant_slot,
            weight_slot,
            redirected: self.entry_override.iter().map(Option::is_some).collect(),
            keep_all: self.keep_derived,
        }
    }

    /// Per slot: the weight folding would derive from (to know when to fold again).
    fn fold_sources(&self, constant_slot: &[bool]) -> Vec<Option<Weak<Weight>>> {
        self.slots
            .iter()
            .zip(constant_slot)
            .map(|(m, &c)| match m {
                SlotMemory::Weight(w) if c => Some(Arc::downgrade(w)),
                _ => None,
            })
            .collect()
    }

    /// The output region (allocated once) and the activation memory `layout` needs.
    fn memory_for(&mut self, layout: &Layout) -> Result<Activations> {
        if self.outputs.is_none() && self.plan.output_region_bytes > 0 {
            self.outputs = Some(Parts::new(&self.plan.output_parts)?);
        }
        self.activations_for(layout)
    }

    /// Activation memory for `layout`: this executor's own arena (new whenever its parts change,
    /// so a smaller layout returns memory), or the shared one, grown if needed.
    fn activations_for(&self, layout: &Layout) -> Result<Activations> {
        Ok(match &self.activations {
            Activations::Own(parts) if parts.fits(&layout.arena_parts) => Activations::Own(parts.clone()),
            Activations::None | Activations::Own(_) => Activations::Own(Parts::new(&layout.arena_parts)?),
            Activations::Shared { arena, .. } => {
                arena.reserve(layout.arena_bytes)?;
                let (buffer, generation) = arena.current();
                Activations::Shared { arena: arena.clone(), buffer, generation }
            }
        })
    }

    /// Gives slot `sid` writable memory of this executor's own: fresh zeros for an unbound slot, a
    /// private copy of a weight (copy on write; what was derived from it is derived again).
    pub fn make_private(&mut self, sid: usize) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        let fresh = match &self.slots[sid] {
            SlotMemory::Owned(_) => return Ok(()),
            SlotMemory::Unbound => Buffer::zeroed_on(self.plan.slot_device[sid], bytes)?,
            SlotMemory::Weight(w) => {
                self.stale = true;
                w.to_buffer(self.plan.slot_device[sid], 0, bytes)?
            }
        };
        self.slots[sid] = SlotMemory::owned(fresh);
        self.refresh()
    }

    /// Binds slot `sid` to a weight; the weight must cover the slot.
    pub fn bind_weight(&mut self, sid: usize, weight: Arc<Weight>) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        if weight.len() < bytes {
            return Err(Error::internal(format!(
                "a weight of {} bytes cannot back storage slot {sid} of {bytes} bytes",
                weight.len()
            )));
        }
        self.slots[sid] = SlotMemory::Weight(weight);
        self.stale = true;
        self.refresh()
    }

    /// Makes input entry `eid` hold parameter `name`'s value, `weight`: bound without a copy when
    /// its slot can share (it holds that input alone, the weight covers it, and it is not bound to
    /// caller memory), else written into the entry's memory. Returns whether it was bound.
    pub fn set_param(&mut self, name: &str, eid: usize, weight: Arc<Weight>) -> Result<bool> {
        let sid = self.plan.graph.entries[eid].storage_id;
        let shares = self.plan.is_shareable_slot(sid)
            && weight.len() >= self.plan.storage.slots[sid].bytes
            && !self.slot_redirected(sid);
        if shares {
            self.bind_weight(sid, weight)?;
        } else {
            let n = self.plan.entry_bytes[eid];
            let write = weight.bytes().and_then(|all| {
                let b = all.get(..n).ok_or_else(|| Error::value(format!("{} bytes, the entry {n}", weight.len())))?;
                self.write_entry_bytes(eid, b)
            });
            write.map_err(|e| e.context(format!("parameter '{name}'")))?;
        }
        self.param_names.insert(name.to_string());
        Ok(shares)
    }

    /// Slot `sid` as a weight others may share. Memory of this executor's own is frozen into one:
    /// without a copy when nothing else holds it, as a copy when a view handed out earlier still
    /// does (a write through that view must not reach the executors that share the weight).
    pub fn share_out(&mut self, sid: usize) -> Result<Arc<Weight>> {
        let bytes = self.plan.storage.slots[sid].bytes;
        // This executor's own hold on the memory (its tensors, the arrays it keeps to hand out
        // again) does not count as a view of someone else's.
        for e in (0..self.plan.graph.num_entries()).filter(|&e| self.plan.graph.entries[e].storage_id == sid) {
            self.ops.unbind(e);
            self.views[e] = None;
        }
        let weight = match std::mem::take(&mut self.slots[sid]) {
            SlotMemory::Weight(w) => w,
            SlotMemory::Unbound => Arc::new(Weight::freeze(Buffer::zeroed_on(self.plan.slot_device[sid], bytes)?)),
            SlotMemory::Owned(buf) => match Arc::try_unwrap(buf) {
                Ok(buf) => Arc::new(Weight::freeze(buf)),
                Err(buf) => {
                    let copy = buf.duplicate_range(0, buf.len()).map(Weight::freeze);
                    self.slots[sid] = SlotMemory::Owned(buf);
                    Arc::new(copy?)
                }
            },
        };
        self.bind_weight(sid, weight.clone())?;
        Ok(weight)
    }

    pub fn entry_data(&self, eid: usize) -> *const u8 {
        self.ops.data(eid)
    }

    /// An NDArray of entry `eid`: a view of this executor's own memory (kept alive by the array),
    /// a copy when the entry is a weight (a write through the array must not reach the other
    /// holders), or a view of caller memory bound with zero-copy. A view is the same array every
    /// time while it shows the entry, and follows the entry's zero-copy bindings (upstream's
    /// `get_input` / `get_output` hand out the entry itself).
    pub fn entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        self.prepare()?;
        if let Some(view) = &self.views[eid] {
            if view.data_ptr().cast_const() == self.ops.data(eid) {
                return Ok(view.clone());
            }
        }
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
        let source = self.ops.source(eid);
        let mut bytes = vec![0u8; plan.entry_bytes[eid]];
        crate::tensor::raw::copy_to_bytes(source, &mut bytes)?;
        Ok((NDArray::from_bytes(&e.shape, e.dtype, &bytes)?, false))
    }

    /// Makes input entry `eid` writable without touching anyone else's memory: caller memory
    /// bound with zero-copy is written in place, a weight or a missing slot becomes private first.
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
        Ok(())
    }

    /// Copies `src`, already checked to have entry `eid`'s shape and dtype, into it.
    pub fn write_entry_matched(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.prepare_write(eid)?;
        self.ops.write_from(eid, src)
    }

    /// Copies entry `eid` into `dst`, of any shape and dtype of the entry's byte size.
    pub fn copy_entry_to(&mut self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        let n = dst.nbytes()?;
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

    /// Copies raw bytes into input entry `eid`; the sizes must match.
    pub fn write_entry_bytes(&mut self, eid: usize, bytes: &[u8]) -> Result<()> {
        let n = self.plan.entry_bytes[eid];
        if n != bytes.len() {
            return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
        }
        self.prepare_write(eid)?;
        self.ops.write_bytes(eid, bytes)
    }

    /// Copies entry `oeid` of `other`, already checked to have entry `eid`'s shape and dtype, into
    /// input entry `eid` of this executor.
    pub fn copy_entry_from(&mut self, eid: usize, other: &mut Instance, oeid: usize) -> Result<()> {
        other.prepare()?;
        self.write_entry_matched(eid, other.ops.source(oeid))
    }

    /// Redirects the slot of input entry `eid` to caller memory.
    pub fn bind_input_external(&mut self, eid: usize, src: ZeroCopy<'_>) -> Result<()> {
        self.check_external(eid, src.tensor())?;
        let sid = self.plan.graph.entries[eid].storage_id;
        self.slot_override[sid] = Some(src.memory());
        // The latest binding wins: outputs that alias this input (a `__nop` of it) bound to caller
        // memory before now read the input's new memory, as upstream's do.
        for (e, entry) in self.plan.graph.entries.iter().enumerate() {
            if entry.storage_id == sid && self.entry_override[e].take().is_some() {
                self.stale |= matches!(self.layout.homes.get(e), Some(Home::Derived | Home::Transient));
            }
        }
        // Only a weight redirected changes what can be folded: rebinding a data input before every
        // run costs no new layout.
        if matches!(self.slots[sid], SlotMemory::Weight(_)) {
            self.stale = true;
        }
        self.refresh()
    }

    /// Redirects output entry `eid` to caller memory, and the operator results it aliases
    /// through `__nop` (so their producer writes there, and every reader follows). A `__nop` of a
    /// graph input stops the walk: the input keeps its memory, and the output, which no operator
    /// writes, shows the caller's bytes, as upstream's.
    pub fn bind_output_external(&mut self, eid: usize, dst: ZeroCopy<'_>) -> Result<()> {
        self.check_external(eid, dst.tensor())?;
        let ptr = dst.memory();
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
        self.refresh()
    }

    fn check_external(&self, eid: usize, t: RawTensor<'_>) -> Result<()> {
        let e = &self.plan.graph.entries[eid];
        let device = self.plan.entry_device[eid];
        if t.device() != device {
            return Err(Error::value(format!(
                "zero-copy tensor is on device {:?}, the entry on {:?}",
                t.device(),
                device
            )));
        }
        if crate::device::is_host(t.device()) {
            if t.data_ptr() as usize % 64 != 0 {
                return Err(Error::value("zero-copy tensor data must be aligned to 64 bytes"));
            }
        } else if t.place().offset != 0 {
            // Kernels take a device tensor's data without its offset.
            return Err(Error::value("a zero-copy tensor on a device must have byte_offset 0"));
        }
        if t.shape() != &*e.shape || t.dtype() != e.dtype {
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
        Ok(())
    }

    /// Binds every input slot that still has no memory (inputs never set read as zeros).
    fn bind_all(&mut self) -> Result<()> {
        for sid in 0..self.slots.len() {
            if !self.slots[sid].is_bound() && self.plan.storage.slots[sid].role == SlotRole::Input {
                self.slots[sid] = SlotMemory::owned(Buffer::zeroed_on(
                    self.plan.slot_device[sid],
                    self.plan.storage.slots[sid].bytes,
                )?);
            }
        }
        self.refresh()
    }

    /// Moves this executor's activations into `arena` (its own are released).
    pub fn join_arena(&mut self, arena: Arc<Arena>) -> Result<()> {
        if arena.device() != self.plan.device || self.plan.devices.len() > 1 {
            return Err(Error::value("only executors on one and the same device can share an activation arena"));
        }
        self.prepare()?;
        arena.reserve(self.layout.arena_bytes)?;
        let (buffer, generation) = arena.current();
        self.activations = Activations::Shared { arena, buffer, generation };
        self.refresh()
    }

    pub fn arena(&self) -> Option<&Arc<Arena>> {
        match &self.activations {
            Activations::Shared { arena, .. } => Some(arena),
            _ => None,
        }
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run_ops(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        self.stale |= self.holders_changed();
        self.prepare()?;
        if !self.all_bound {
            self.bind_all()?;
        }
        let arena = self.arena().cloned();
        let _guard = match &arena {
            Some(a) => {
                let guard = a.try_acquire()?;
                if let Activations::Shared { buffer, generation, .. } = &mut self.activations {
                    let (b, g) = a.current();
                    if g != *generation {
                        // Another holder grew the arena since this executor last ran.
                        (*buffer, *generation) = (b, g);
                        self.refresh()?;
                    }
                }
                Some(guard)
            }
            None => None,
        };
        self.ops.run(&self.plan, range)
    }

    pub fn run(&mut self) -> Result<()> {
        self.run_ops(0..self.plan.ops.len())
    }
}

/// `layout::Facts`, owned.
struct LayoutFacts {
    constant_slot: Vec<bool>,
    weight_slot: Vec<bool>,
    redirected: Vec<bool>,
    keep_all: bool,
}

impl LayoutFacts {
    fn layout(&self, plan: &Plan, fold: bool) -> Result<Layout> {
        let facts = layout::Facts {
            constant_slot: &self.constant_slot,
            weight_slot: &self.weight_slot,
            redirected: &self.redirected,
            fold,
            keep_all: self.keep_all,
        };
        Layout::new(plan, &facts)
    }
}

/// Whether two lists of weights name the same weights.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::plan::tests::{graph, plan};

    /// x, w (inputs) -> c = copy(w) -> out = copy(c); out the output: `c` reads only `w`.
    fn instance() -> Instance {
        let json = graph(&[("x", "", 0), ("w", "", 0), ("c", "__copy", 1), ("out", "__copy", 2)], &[0, 1, 2, 3], &[3]);
        Instance::new(plan(&json), false).unwrap()
    }

    fn weight(v: u8, len: usize) -> Arc<Weight> {
        Arc::new(Weight::copy_of(&vec![v; len]).unwrap())
    }

    fn output(inst: &mut Instance) -> Vec<u8> {
        let view = inst.entry_view(3).unwrap();
        view.to_vec()
    }

    #[test]
    fn a_parameter_is_bound_without_a_copy_where_the_slot_can_share() {
        let mut inst = instance();
        let w = weight(7, 16);
        assert!(inst.set_param("w", 1, w.clone()).unwrap());
        assert!(matches!(inst.slot(1), SlotMemory::Weight(bound) if Arc::ptr_eq(bound, &w)));
        assert!(inst.param_names.contains("w"));
        inst.run().unwrap();
        assert_eq!(output(&mut inst), vec![7; 16]);
        // Folded: `c` was computed once, from the weight, and is what `out` copies.
        assert_eq!(inst.layout().folded, vec![true, false]);
        // A weight shorter than the slot cannot back it: its bytes are written instead.
        let mut inst = instance();
        let e = inst.set_param("w", 1, weight(1, 8)).unwrap_err().to_string();
        assert!(e.contains("parameter 'w'"), "{e}");
    }

    #[test]
    fn writing_a_weight_gives_a_private_copy_and_refolds() {
        let mut inst = instance();
        let w = weight(7, 16);
        inst.set_param("w", 1, w.clone()).unwrap();
        inst.run().unwrap();
        inst.write_entry_bytes(1, &[9; 16]).unwrap();
        assert!(matches!(inst.slot(1), SlotMemory::Owned(_)));
        assert_eq!(&*w.bytes().unwrap(), &[7; 16], "the weight itself is untouched");
        inst.run().unwrap();
        assert_eq!(output(&mut inst), vec![9; 16]);
        assert_eq!(inst.layout().folded, vec![false, false], "a private input is not folded from");
    }

    #[test]
    fn sharing_out_freezes_memory_unless_a_view_holds_it() {
        let mut inst = instance();
        inst.write_entry_bytes(1, &[3; 16]).unwrap();
        let before = inst.entry_data(1);
        let shared = inst.share_out(1).unwrap();
        assert_eq!(shared.as_ptr(), before, "nobody else held it: frozen in place");
        // A host's view of the private memory: sharing must not let its writes reach the sharers.
        let mut inst = instance();
        inst.write_entry_bytes(1, &[4; 16]).unwrap();
        let view = inst.entry_view(1).unwrap();
        let shared = inst.share_out(1).unwrap();
        assert_ne!(shared.as_ptr(), view.data_ptr().cast_const(), "a copy, since the view still holds the memory");
        assert_eq!((&*shared.bytes().unwrap(), view.to_vec()), (&[4u8; 16][..], vec![4; 16]));
    }

    #[test]
    fn an_entry_array_is_handed_out_again_while_it_shows_the_entry() {
        let mut inst = instance();
        inst.set_param("w", 1, weight(5, 16)).unwrap();
        inst.run().unwrap();
        let a = inst.entry_view(3).unwrap();
        let b = inst.entry_view(3).unwrap();
        assert!(ObjRef::ptr_eq(&a, &b));
        // A weight's array is a copy, new each time: writing it reaches nothing.
        let (w1, w2) = (inst.entry_view(1).unwrap(), inst.entry_view(1).unwrap());
        assert!(!ObjRef::ptr_eq(&w1, &w2) && w1.data_ptr() != w2.data_ptr());
    }
}
