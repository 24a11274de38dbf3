//! The per-executor state: which memory each entry uses (input slots, the derived weights and
//! activation arena of its layout, zero-copy bindings), kept consistent with the bindings.
//! Inputs are bound per storage slot, so every entry planned into a slot (a `__nop` reshape of a
//! weight included) sees the same bytes; operator outputs live where the layout puts their alias
//! root.
//!
//! The state is spread over rooms by what they decide: `slots` (weights in and out), `entries`
//! (reads, writes and the arrays handed out), `zero_copy` (caller memory), `activations` (the
//! arena and the output region), `journal` (calls that complete or change nothing). This file
//! holds the state, the layout and the run. Safe code throughout: `kernels` holds the memory
//! each entry points at and calls the kernels.
//!
//! Every change of memory binds all entries at once or none (`refresh`), and the state only
//! commits what could be bound: a refused binding leaves the executor as it was, so no entry is
//! ever left without the memory its state says it has (and `kernels` refuses to launch an
//! operator on an entry without memory, whatever the cause).

#![forbid(unsafe_code)]

mod activations;
mod entries;
mod journal;
mod slots;
mod zero_copy;

use super::bindings::{Mem, Ops};
use super::fold;
use super::kernels::External;
use super::layout::{self, Folding, Home, Layout};
use super::peers::{self, Peer};
use super::plan::Plan;
use crate::error::Result;
use crate::object::ObjRef;
use crate::tensor::{Buffer, FileMap, NDArray, Weight};
use activations::{Activations, Parts};
use journal::Journal;
pub use slots::SlotMemory;
use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

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
    /// Every input slot has memory (inputs never set read as zeros once `run` binds them).
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
    /// Threads this executor's kernels use (`set_num_threads`; 0: the process's).
    pub num_threads: usize,
    /// Per slot: the weight last seen held by others too, and when. Under `Folding::Shared` a
    /// weight stays folded for `keep_folded` after its other holders go, so a long-lived executor
    /// whose sharers come and go per request does not derive its weights again for each.
    seen_shared: Vec<Option<(Weak<Weight>, Instant)>>,
    keep_folded: Duration,
    /// When the folding kept only for that runs out (the next run lays out again then).
    unfold_at: Option<Instant>,
    /// What became of the derived weights of the last prepared params file loaded: "used", or
    /// why not (reported by `get_memory_usage`).
    pub prepared: Option<String>,
    /// The files entries' weights are mapped from, checked for changes before each run.
    mapped_files: Vec<Arc<FileMap>>,
    /// The state to put back if the call under way fails (see `journal`).
    journal: Option<Box<Journal>>,
    /// On a device: this executor's entry among the holders of its weights (see `peers`), and the
    /// registry's generation when the layout was made.
    peer: Peer,
    peers_seen: u64,
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
            seen_shared: vec![None; n_slots],
            keep_folded: layout::keep_folded_default(),
            num_threads: 0,
            unfold_at: None,
            prepared: None,
            mapped_files: Vec::new(),
            journal: None,
            peer: Peer::default(),
            peers_seen: 0,
        };
        inst.refresh()?;
        Ok(inst)
    }

    /// Points every entry tensor at its current memory, all or nothing: when a device cannot bind
    /// one entry (the error names it), every tensor keeps what it had. Until the layout is brought
    /// up to date, activations stay in the previous layout's memory, which the tensors hold.
    pub(super) fn refresh(&mut self) -> Result<()> {
        let plan = self.plan.clone();
        let mems = plan.graph.entries.iter().enumerate().map(|(eid, e)| self.memory_of(eid, e.storage_id)).collect();
        self.ops.bind_all(mems)?;
        // The arrays handed out for the entries follow them, where they can.
        for eid in 0..self.views.len() {
            if self.views[eid].as_ref().is_some_and(|view| !self.ops.follow(eid, view)) {
                self.views[eid] = None;
            }
        }
        let need = self.slots_needing_memory();
        self.all_bound = self.slots.iter().zip(need).all(|(m, need)| m.is_bound() || !need);
        self.mapped_files = self.ops.mapped_files();
        Ok(())
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

    /// How many holds of `weight` are this executor's: its slot's, one per entry tensor bound to
    /// it, and those of a journal keeping it to put back.
    fn own_holds(&self, weight: &Arc<Weight>) -> usize {
        1 + self.ops.bound_to(weight) + self.journal_holds_weight(weight)
    }

    /// How many entry tensors hold `buffer`.
    pub(super) fn ops_holds_buffer(&self, buffer: &Arc<Buffer>) -> usize {
        self.ops.bound_to_buffer(buffer)
    }

    /// Whether the weight in slot `sid` is held by nothing but this executor.
    pub fn weight_is_own(&self, sid: usize) -> bool {
        match &self.slots[sid] {
            SlotMemory::Weight(w) => Arc::strong_count(w) == self.own_holds(w),
            _ => false,
        }
    }

    /// Whether slot `sid` is bound to caller memory with zero-copy.
    pub fn slot_redirected(&self, sid: usize) -> bool {
        self.slot_override[sid].is_some()
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

    /// Brings the layout up to date with the bindings: decides what to fold, runs the folded
    /// operators if their weights changed (if one fails, nothing is folded), sizes the activation
    /// arena, and binds every entry. Commits only once all of it worked: on failure the executor
    /// keeps its previous layout and memory, and stays out of date (the next call tries again).
    #[inline]
    pub fn prepare(&mut self) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        self.prepare_now()
    }

    #[inline(never)]
    fn prepare_now(&mut self) -> Result<()> {
        let plan = self.plan.clone();
        let (peer_folds, peers_seen) = self.peer_folds();
        let (recent, seen_shared, unfold_at) = self.recently_shared(peer_folds);
        let facts = self.layout_facts(&recent, peer_folds);
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
        let (outputs, activations) = self.memory_for(&layout)?;
        // Commit, binding every entry; put everything back if a device refuses a binding.
        let old_outputs = std::mem::replace(&mut self.outputs, outputs);
        let old_activations = std::mem::replace(&mut self.activations, activations);
        let old_layout = std::mem::replace(&mut self.layout, layout);
        let old_derived = refold.then(|| {
            let d = std::mem::replace(&mut self.derived, derived.unwrap_or_default());
            (d, std::mem::replace(&mut self.derived_from, sources))
        });
        self.ops.set_folded(&self.layout.folded);
        if let Err(e) = self.refresh() {
            self.outputs = old_outputs;
            self.activations = old_activations;
            self.layout = old_layout;
            if let Some((d, from)) = old_derived {
                (self.derived, self.derived_from) = (d, from);
            }
            self.ops.set_folded(&self.layout.folded);
            return Err(e);
        }
        self.stale = false;
        self.release_unneeded_textures();
        self.pool_need();
        self.holders = self.holder_counts();
        (self.seen_shared, self.unfold_at, self.peers_seen) = (seen_shared, unfold_at, peers_seen);
        Ok(())
    }

    /// Whether other holders of the weights make them worth folding (`Folding::Shared`): on the
    /// host any other holder; on a device only another executor of this model (see `peers`), with
    /// the generation of the registry that answer is of.
    fn peer_folds(&self) -> (bool, u64) {
        if crate::device::is_host(self.plan.device) {
            return (true, 0);
        }
        let first_weight = self.slots.iter().find_map(|m| match m {
            SlotMemory::Weight(w) => Some(w),
            _ => None,
        });
        self.peer.hold(&self.plan, first_weight.filter(|_| self.fold == Folding::Shared))
    }

    /// Per slot: whether its weight is to be folded because it was shared lately, though it is not
    /// now; the sightings of shared weights as of now; and when the first such kept folding runs
    /// out.
    #[allow(clippy::type_complexity)]
    fn recently_shared(&self, peer_folds: bool) -> (Vec<bool>, Vec<Option<(Weak<Weight>, Instant)>>, Option<Instant>) {
        let now = Instant::now();
        let mut seen = self.seen_shared.clone();
        let mut until: Option<Instant> = None;
        let recent = (0..self.slots.len())
            .map(|sid| {
                let SlotMemory::Weight(w) = &self.slots[sid] else { return false };
                if !self.weight_is_own(sid) {
                    if peer_folds {
                        seen[sid] = Some((Arc::downgrade(w), now));
                    }
                    return false;
                }
                match &seen[sid] {
                    Some((was, at)) if was.ptr_eq(&Arc::downgrade(w)) && now < *at + self.keep_folded => {
                        let end = *at + self.keep_folded;
                        until = Some(until.map_or(end, |u| u.min(end)));
                        self.fold == Folding::Shared
                    }
                    _ => false,
                }
            })
            .collect();
        (recent, seen, until.filter(|_| self.fold == Folding::Shared))
    }

    /// The derived weights brought by `adopt`, per alias root, if they hold every result `layout`
    /// keeps (each of its size; results the layout does not keep are left out).
    fn adoptable(&mut self, layout: &Layout) -> Option<Vec<Option<Arc<Weight>>>> {
        let list = self.to_adopt.take()?;
        let plan = &self.plan;
        let mut derived = vec![None; plan.graph.num_entries()];
        for r in (0..plan.graph.num_entries()).filter(|&r| plan.alias_root[r] == r && layout.homes[r] == Home::Derived)
        {
            let (_, w) = list.iter().find(|(root, w)| *root == r && w.len() == plan.root_bytes[r])?;
            derived[r] = Some(w.clone());
        }
        self.adopted = true;
        Some(derived)
    }

    /// Takes derived weights computed elsewhere (a prepared params file) for the next layout, which
    /// folds everything with them; returns whether they served it (they hold every result it keeps).
    /// When they do not, the executor keeps its folding and computes what it folds itself.
    pub fn adopt(&mut self, derived: Vec<(usize, Arc<Weight>)>) -> Result<bool> {
        let fold = self.fold;
        self.to_adopt = Some(derived);
        self.adopted = false;
        self.fold = Folding::All;
        self.stale = true;
        let prepared = self.prepare();
        self.to_adopt = None;
        prepared?;
        let used = self.adopted || !self.layout.homes.contains(&Home::Derived);
        if !used {
            self.set_fold(fold);
            self.prepare()?;
        }
        Ok(used)
    }

    /// Whether this executor runs on the derived weights of a prepared params file it loaded.
    pub fn runs_on_prepared(&self) -> bool {
        self.prepared.as_deref() == Some("used") && self.derived.iter().any(Option::is_some)
    }

    /// The derived weights this executor holds, per alias root.
    pub fn derived_weights(&self) -> Vec<(usize, Arc<Weight>)> {
        self.derived.iter().enumerate().filter_map(|(r, w)| w.clone().map(|w| (r, w))).collect()
    }

    /// How many hold the weight in `slot` besides this executor's journal (0 for no weight).
    fn holders_of(&self, slot: &SlotMemory) -> usize {
        match slot {
            SlotMemory::Weight(w) => Arc::strong_count(w) - self.journal_holds_weight(w),
            _ => 0,
        }
    }

    /// Per slot: [`Instance::holders_of`] its memory.
    fn holder_counts(&self) -> Vec<usize> {
        self.slots.iter().map(|m| self.holders_of(m)).collect()
    }

    /// Whether a weight gained or lost holders since the layout was made: under `Folding::Shared`
    /// that decides what is folded (a second executor sharing the weights folds them in both; the
    /// last one left alone runs them again and lets what was derived go).
    fn holders_changed(&self) -> bool {
        self.fold == Folding::Shared
            && (self.holders.len() != self.slots.len()
                || self.slots.iter().zip(&self.holders).any(|(m, &n)| self.holders_of(m) != n)
                || (!crate::device::is_host(self.plan.device) && peers::generation() != self.peers_seen))
    }

    /// What decides the layout besides the plan, from the bindings now (`recent`: per slot, a
    /// weight shared lately that folding treats as shared still).
    fn layout_facts(&self, recent: &[bool], peer_folds: bool) -> LayoutFacts {
        let constant_slot = (0..self.slots.len())
            .map(|sid| match &self.slots[sid] {
                SlotMemory::Weight(w) => {
                    let shared = (peer_folds && !self.weight_is_own(sid)) || recent[sid];
                    self.slot_override[sid].is_none() && self.fold.folds(w, shared)
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

    /// [`Instance::prepare`], also when only the weights' holders changed (another executor
    /// began or stopped sharing them).
    pub fn prepare_for_holders(&mut self) -> Result<()> {
        self.stale |= self.holders_changed();
        self.prepare()
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run_ops(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        self.run_with(|ops, plan| ops.run(plan, range))
    }

    /// Runs every operator in order, as `run` does, each through `each(i, run_it)`, which calls
    /// `run_it` once: the debug executor times them, nothing else in between.
    pub fn run_each(
        &mut self,
        mut each: impl FnMut(usize, &mut dyn FnMut() -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        self.run_with(|ops, plan| (0..plan.ops.len()).try_for_each(|i| each(i, &mut || ops.run(plan, i..i + 1))))
    }

    /// Brings everything up to date for a run (the files weights are mapped from unchanged, the
    /// layout, every input slot bound, a pooled arena leased for the run), then calls `f`.
    fn run_with<T>(&mut self, f: impl FnOnce(&mut Ops, &Plan) -> Result<T>) -> Result<T> {
        self.mapped_files.iter().try_for_each(|m| m.check_unchanged())?;
        if self.unfold_at.is_some_and(|t| Instant::now() >= t) {
            self.stale = true;
        }
        self.prepare_for_holders()?;
        if !self.all_bound {
            self.bind_all()?;
        }
        // A pooled executor's activations have memory only while it runs: an arena leased now,
        // given back (after the device finished with it) once nothing here points into it.
        let lease = self.lease_arena()?;
        let (ops, plan) = (&mut self.ops, &self.plan);
        let result = crate::backend::thread_pool::with_threads(self.num_threads, || f(ops, plan));
        if lease.is_some() {
            self.end_lease();
        }
        drop(lease);
        result
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

#[cfg(test)]
mod tests;
