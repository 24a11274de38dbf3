//! The per-executor state: input slot memory, the derived weights and activation arena of its
//! layout (see `layout`), the entry tensors kernels read and write, and the prepared argument
//! arrays of every operator. Inputs are bound per storage slot, so every entry planned into a slot
//! (a `__nop` reshape of a weight included) sees the same bytes; operator outputs live where the
//! layout puts their alias root.
//!
//! This file builds the raw `DLTensor`s and calls kernels: the executor's unsafe corner.

use super::arena::Arena;
use super::layout::{self, Folding, Home, Layout};
use super::plan::{OpKind, Plan};
use crate::dlpack::{kTVMDLTensorHandle, kTVMNullptr, DLTensor, TVMBackendPackedCFunc, TVMValue};
use crate::error::{Error, Result};
use crate::last_error;
use crate::memory_plan::SlotRole;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc};
use crate::tensor::{raw, weight, Buffer, NDArray, RawTensor, Weight};
use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr::NonNull;
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

    fn data(&self) -> Option<*mut c_void> {
        match self {
            SlotMemory::Unbound => None,
            SlotMemory::Owned(b) => Some(b.as_ptr().cast()),
            // Kernels take every argument as `void*`; weight slots are only ever operator inputs.
            SlotMemory::Weight(w) => Some(w.as_ptr().cast_mut().cast()),
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
    /// This executor's own arena.
    Own(Arc<Buffer>),
    /// An arena shared with executors that run in turn, and the generation of it bound.
    Shared { arena: Arc<Arena>, buffer: Arc<Buffer>, generation: u64 },
}

impl Activations {
    fn buffer(&self) -> Option<&Arc<Buffer>> {
        match self {
            Activations::None => None,
            Activations::Own(b) | Activations::Shared { buffer: b, .. } => Some(b),
        }
    }
}

/// The entry tensors kernels receive, in one allocation whose address never changes. Operator
/// argument arrays point into it, so it is only reached through raw pointers: no reference to the
/// whole table exists while those pointers do.
struct TensorTable {
    ptr: NonNull<DLTensor>,
    len: usize,
}

impl TensorTable {
    fn new(tensors: Vec<DLTensor>) -> TensorTable {
        let len = tensors.len();
        let raw = Box::into_raw(tensors.into_boxed_slice());
        TensorTable { ptr: NonNull::new(raw.cast()).expect("a box is never null"), len }
    }

    /// The address of entry `eid`'s tensor.
    fn at(&self, eid: usize) -> *mut DLTensor {
        assert!(eid < self.len, "entry {eid} of {}", self.len);
        // SAFETY: in bounds of the allocation.
        unsafe { self.ptr.as_ptr().add(eid) }
    }

    fn set_data(&mut self, eid: usize, data: *mut c_void) {
        // SAFETY: a live tensor of the table; `&mut self` means no kernel runs on it now.
        unsafe { (*self.at(eid)).data = data };
    }

    fn data(&self, eid: usize) -> *mut c_void {
        // SAFETY: a live tensor of the table.
        unsafe { (*self.at(eid)).data }
    }
}

impl Drop for TensorTable {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` of a boxed slice of this length; dropped once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
    }
}

enum Call {
    Nop,
    Copy,
    Kernel(TVMBackendPackedCFunc),
    Packed(ObjRef<PackedFunc>),
}

struct OpCall {
    node: usize,
    call: Call,
    /// Derived from weights once: `run` skips it.
    folded: bool,
    values: Box<[TVMValue]>,
    codes: Box<[i32]>,
}

pub struct Instance {
    pub plan: Arc<Plan>,
    /// Per storage slot; only input slots are bound (operator outputs live by the layout).
    slots: Vec<SlotMemory>,
    /// Zero-copy input bindings, per slot.
    slot_override: Vec<Option<*mut c_void>>,
    /// Zero-copy output bindings, per entry.
    entry_override: Vec<Option<*mut c_void>>,
    tensors: TensorTable,
    calls: Vec<OpCall>,
    /// Names loaded as parameters (hidden from `get_input_info`).
    pub param_names: HashSet<String>,
    all_bound: bool,
    layout: Layout,
    /// The layout may not match the bindings any more (a weight bound, made private, redirected).
    stale: bool,
    /// Per alias root: the weights derived from the bound weights.
    derived: Vec<Option<Arc<Weight>>>,
    /// Per slot: the weight the derived weights were computed from.
    derived_from: Vec<Option<Weak<Weight>>>,
    activations: Activations,
    /// The graph outputs' region (`Home::Output`), allocated at the first layout and kept.
    outputs: Option<Arc<Buffer>>,
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

// SAFETY: the raw pointers address memory this instance keeps alive (its slots, its tensor table,
// the plan's shapes), or memory a caller bound with zero-copy and promised to keep; the instance is
// only used behind the executor's mutex.
unsafe impl Send for Instance {}

impl Instance {
    /// A new instance. Memory comes when first needed: input slots when set or loaded (so a weight
    /// that will be shared is never allocated twice), activations once the weights are known.
    pub fn new(plan: Arc<Plan>, keep_derived: bool) -> Result<Instance> {
        let slots = plan
            .linked
            .iter()
            .map(|linked| linked.as_ref().map_or(SlotMemory::Unbound, |w| SlotMemory::Weight(w.clone())))
            .collect::<Vec<_>>();
        let tensors = TensorTable::new(
            plan.graph
                .entries
                .iter()
                .map(|e| DLTensor {
                    data: std::ptr::null_mut(),
                    device: plan.device,
                    ndim: e.shape.len() as i32,
                    dtype: e.dtype,
                    // Kernels never write shapes; the plan outlives the instance's tensors.
                    shape: e.shape.as_ptr().cast_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                })
                .collect(),
        );
        let calls = plan
            .ops
            .iter()
            .map(|op| OpCall {
                node: op.node,
                call: match &op.kind {
                    OpKind::Nop => Call::Nop,
                    OpKind::Copy => Call::Copy,
                    OpKind::Kernel { raw: Some(f), .. } => Call::Kernel(*f),
                    OpKind::Kernel { func, raw: None } => Call::Packed(func.clone()),
                },
                folded: false,
                values: op.args.iter().map(|&eid| TVMValue { v_handle: tensors.at(eid).cast() }).collect(),
                codes: vec![kTVMDLTensorHandle; op.args.len()].into_boxed_slice(),
            })
            .collect();
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
            tensors,
            calls,
            param_names,
            all_bound: false,
            layout: Layout::default(),
            stale: true,
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
        inst.refresh();
        Ok(inst)
    }

    /// Points every entry tensor at its current memory. Until the layout is brought up to date,
    /// activations point into the previous layout's memory, which is still held.
    fn refresh(&mut self) {
        let plan = self.plan.clone();
        let arena = self.activations.buffer().map(|b| (b.as_ptr(), b.len()));
        let outputs = self.outputs.as_ref().map(|b| (b.as_ptr(), b.len()));
        for (eid, e) in plan.graph.entries.iter().enumerate() {
            let sid = e.storage_id;
            let home = self.layout.homes.get(eid).copied().unwrap_or(Home::Slot);
            let data = self.entry_override[eid].or(self.slot_override[sid]).or_else(|| match home {
                Home::Slot => self.slots[sid].data(),
                Home::Arena(at) => arena.map(|(p, len)| {
                    assert!(at + plan.entry_bytes[eid] <= len, "entry {eid} outside the activation arena");
                    p.wrapping_add(at).cast()
                }),
                Home::Output(at) => outputs.map(|(p, len)| {
                    assert!(at + plan.entry_bytes[eid] <= len, "entry {eid} outside the output region");
                    p.wrapping_add(at).cast()
                }),
                Home::Derived => self.derived.get(plan.alias_root[eid])?.as_ref().map(|w| w.as_ptr().cast_mut().cast()),
                Home::Transient => None,
            });
            let data = data.unwrap_or(std::ptr::null_mut());
            self.tensors.set_data(eid, data);
            self.follow(eid, data.cast());
        }
        self.all_bound =
            self.slots.iter().zip(&plan.storage.slots).all(|(m, s)| m.is_bound() || s.role != SlotRole::Input);
    }

    /// Points the array handed out for entry `eid` at `data`, the entry's memory now, when the
    /// array can be trusted there: caller memory bound with zero-copy (the caller keeps it alive),
    /// or a place in the buffer the array holds. Otherwise the array keeps what it showed and
    /// the next `entry_view` makes a new one.
    fn follow(&mut self, eid: usize, data: *mut u8) {
        let Some(view) = &self.views[eid] else { return };
        if view.data_ptr() == data {
            return;
        }
        let sid = self.plan.graph.entries[eid].storage_id;
        let bound = self.entry_override[eid].or(self.slot_override[sid]).is_some();
        let bytes = self.plan.entry_bytes[eid];
        let inside = view.buffer().is_some_and(|b| {
            let start = b.as_ptr() as usize;
            (start..=start + b.len().saturating_sub(bytes)).contains(&(data as usize))
        });
        if !data.is_null() && (bound || inside) {
            // SAFETY: `data` is caller memory bound with zero-copy, alive while bound (the
            // binding's contract), or inside the buffer the array keeps alive; the array is used
            // by no one during the call (the executor is locked; hosts must not use an array of
            // an executor while binding its memory, as with upstream).
            unsafe { view.retarget(data.cast()) }
        } else {
            self.views[eid] = None;
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
            Activations::Own(b) => b.len(),
            _ => 0,
        };
        arena + self.outputs.as_ref().map_or(0, |b| b.len())
    }

    /// Brings the layout up to date with the bindings: decides what to fold, runs the folded
    /// operators if their weights changed (if one fails, nothing is folded), and sizes the
    /// activation arena.
    pub fn prepare(&mut self) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        let plan = self.plan.clone();
        let constant_slot: Vec<bool> = (0..self.slots.len())
            .map(|sid| match &self.slots[sid] {
                SlotMemory::Weight(w) => self.slot_override[sid].is_none() && self.fold.folds(w),
                _ => false,
            })
            .collect();
        let redirected: Vec<bool> = self.entry_override.iter().map(Option::is_some).collect();
        let param_slot = self.param_slots();
        let weight_slot: Vec<bool> =
            self.slots.iter().zip(&param_slot).map(|(m, &param)| param || matches!(m, SlotMemory::Weight(_))).collect();
        let keep_all = self.keep_derived;
        let layout_with = |fold: bool| {
            Layout::new(
                &plan,
                &layout::Facts {
                    constant_slot: &constant_slot,
                    weight_slot: &weight_slot,
                    redirected: &redirected,
                    fold,
                    keep_all,
                },
            )
        };
        let mut layout = layout_with(self.fold != Folding::Off)?;
        let sources: Vec<Option<Weak<Weight>>> = self
            .slots
            .iter()
            .zip(&constant_slot)
            .map(|(m, &c)| match m {
                SlotMemory::Weight(w) if c => Some(Arc::downgrade(w)),
                _ => None,
            })
            .collect();
        let same_sources = sources.iter().zip(&self.derived_from).all(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => a.ptr_eq(b),
            (None, None) => true,
            _ => false,
        });
        let refold = layout.folded != self.layout.folded || layout.homes != self.layout.homes || !same_sources;
        let mut derived = None;
        if refold && layout.folds_anything() {
            match self.fold_weights(&layout) {
                Ok(d) => derived = Some(d),
                // An operator failed on the weights (or memory ran out): fold nothing, so every
                // operator runs at `run`, which reports the failure where upstream does.
                Err(_) => layout = layout_with(false)?,
            }
        }
        // Memory for the layout before anything is committed: nothing changes if there is none.
        if self.outputs.is_none() && plan.output_region_bytes > 0 {
            match Buffer::zeroed(plan.output_region_bytes) {
                Ok(b) => self.outputs = Some(Arc::new(b)),
                Err(e) => {
                    self.refresh();
                    return Err(e);
                }
            }
        }
        let activations = match self.activations_for(layout.arena_bytes) {
            Ok(a) => a,
            Err(e) => {
                // Folding pointed tensors at scratch memory now freed: back to the old layout.
                self.refresh();
                return Err(e);
            }
        };
        if refold {
            self.derived = derived.unwrap_or_default();
            self.derived_from = sources;
        }
        self.activations = activations;
        for (call, &folded) in self.calls.iter_mut().zip(&layout.folded) {
            call.folded = folded;
        }
        self.layout = layout;
        self.stale = false;
        self.refresh();
        Ok(())
    }

    /// Runs the operators `layout` folds, into memory of their own, and keeps the results it
    /// keeps as weights (one copy per distinct content in the process).
    fn fold_weights(&mut self, layout: &Layout) -> Result<Vec<Option<Arc<Weight>>>> {
        let plan = self.plan.clone();
        let n = plan.graph.num_entries();
        let root = &plan.alias_root;
        let mut scratch: Vec<Option<Buffer>> = (0..n).map(|_| None).collect();
        // The last folded operator reading each result: results kept only to derive others are
        // freed after it.
        let mut last_read = vec![None; n];
        for (i, op) in plan.ops.iter().enumerate().filter(|&(i, _)| layout.folded[i]) {
            for &e in op.outputs() {
                let r = root[e];
                if layout.homes[e] != Home::Slot && scratch[r].is_none() {
                    scratch[r] = Some(Buffer::zeroed(plan.root_bytes[r])?);
                }
            }
            op.inputs().iter().for_each(|&e| last_read[root[e]] = Some(i));
        }
        for e in 0..n {
            if let Some(b) = &scratch[root[e]] {
                self.tensors.set_data(e, b.as_ptr().cast());
            }
        }
        for i in (0..plan.ops.len()).filter(|&i| layout.folded[i]) {
            run_call(&plan, &mut self.calls[i])?;
            for &e in plan.ops[i].inputs() {
                let r = root[e];
                if last_read[r] == Some(i) && layout.homes[r] == Home::Transient {
                    scratch[r] = None;
                }
            }
        }
        Ok(scratch
            .into_iter()
            .enumerate()
            .map(|(r, b)| b.filter(|_| layout.homes[r] == Home::Derived).map(|b| weight::intern(Weight::freeze(b))))
            .collect())
    }

    /// Activation memory of `need` bytes: this executor's own arena (a new one whenever the size
    /// changes, so a smaller layout returns memory), or the shared one, grown if needed.
    fn activations_for(&self, need: usize) -> Result<Activations> {
        Ok(match &self.activations {
            Activations::Own(b) if b.len() == need => Activations::Own(b.clone()),
            Activations::None | Activations::Own(_) => Activations::Own(Arc::new(Buffer::zeroed(need)?)),
            Activations::Shared { arena, .. } => {
                arena.reserve(need)?;
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
            SlotMemory::Unbound => Buffer::zeroed(bytes)?,
            SlotMemory::Weight(w) => {
                self.stale = true;
                w.to_buffer(0, bytes)?
            }
        };
        self.slots[sid] = SlotMemory::owned(fresh);
        self.refresh();
        Ok(())
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
        self.refresh();
        Ok(())
    }

    /// Slot `sid` as a weight others may share. Memory of this executor's own is frozen into one:
    /// without a copy when nothing else holds it, as a copy when a view handed out earlier still
    /// does (a write through that view must not reach the executors that share the weight).
    pub fn share_out(&mut self, sid: usize) -> Result<Arc<Weight>> {
        let bytes = self.plan.storage.slots[sid].bytes;
        let weight = match std::mem::take(&mut self.slots[sid]) {
            SlotMemory::Weight(w) => w,
            SlotMemory::Unbound => Arc::new(Weight::freeze(Buffer::zeroed(bytes)?)),
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

    /// A read-only look at entry `eid`, for copying out of it (the layout must be prepared).
    fn entry_source(&self, eid: usize) -> RawTensor<'_> {
        // SAFETY: our own tensor (shape from the plan, no strides); its data, when set, holds the
        // entry's bytes for as long as `self` is borrowed.
        unsafe { RawTensor::from_ptr(self.tensors.at(eid)) }.expect("own tensors are well formed")
    }

    /// The address of entry `eid`'s data (null while unbound).
    pub fn entry_data(&self, eid: usize) -> *const u8 {
        self.tensors.data(eid).cast()
    }

    /// An NDArray of entry `eid`: a view of this executor's own memory (kept alive by the array),
    /// a copy when the entry is a weight (a write through the array must not reach the other
    /// holders), or a view of caller memory bound with zero-copy. A view is the same array every
    /// time while it shows the entry, and follows the entry's zero-copy bindings (upstream's
    /// `get_input` / `get_output` hand out the entry itself).
    pub fn entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        self.prepare()?;
        if let Some(view) = &self.views[eid] {
            if view.data_ptr() == self.tensors.data(eid).cast() {
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
        let sid = e.storage_id;
        if self.entry_override[eid].is_some() || self.slot_override[sid].is_some() {
            // SAFETY: caller memory bound with zero-copy, which the caller keeps alive for as long
            // as it is bound (the contract of set_input_zero_copy / set_output_zero_copy).
            return Ok((unsafe { NDArray::external(self.tensors.data(eid), &e.shape, e.dtype) }, true));
        }
        let weight_copy =
            |w: &Weight| Ok((NDArray::from_bytes(&e.shape, e.dtype, &w.bytes()[..plan.entry_bytes[eid]])?, false));
        let view = |a: Result<ObjRef<NDArray>>| a.map(|a| (a, true));
        match self.layout.homes[eid] {
            Home::Slot => {
                if !self.slots[sid].is_bound() {
                    self.make_private(sid)?;
                }
                match &self.slots[sid] {
                    SlotMemory::Owned(buf) => view(NDArray::view_of(buf, 0, &e.shape, e.dtype)),
                    SlotMemory::Weight(w) => weight_copy(w),
                    SlotMemory::Unbound => unreachable!("bound above"),
                }
            }
            Home::Arena(at) => {
                view(NDArray::view_of(self.activations.buffer().expect("prepared"), at, &e.shape, e.dtype))
            }
            Home::Output(at) => view(NDArray::view_of(self.outputs.as_ref().expect("prepared"), at, &e.shape, e.dtype)),
            Home::Derived => weight_copy(self.derived[plan.alias_root[eid]].as_ref().expect("prepared")),
            Home::Transient => Err(Error::value(format!(
                "entry {eid} is derived from weights only and was not kept (a debug executor keeps every node's output)"
            ))),
        }
    }

    /// Makes input entry `eid` writable without touching anyone else's memory: caller memory
    /// bound with zero-copy is written in place, a weight or a missing slot becomes private first.
    /// Returns where to write the entry's bytes.
    fn prepare_write(&mut self, eid: usize) -> Result<*mut u8> {
        let sid = self.plan.graph.entries[eid].storage_id;
        if self.slot_override[sid].is_none() {
            if self.plan.storage.slots[sid].role == SlotRole::Input {
                self.make_private(sid)?;
            } else {
                // An input sharing a storage id with operator outputs lives in the arena.
                self.prepare()?;
            }
        }
        Ok(self.tensors.data(eid).cast())
    }

    /// Copies `src`, already checked to have entry `eid`'s shape and dtype, into it.
    pub fn write_entry_matched(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        let to = self.prepare_write(eid)?;
        // SAFETY: `to` is this executor's private (or zero-copy bound) memory for the entry,
        // `entry_bytes[eid]` long (its slot is at least as big); `&mut self` keeps kernels off it.
        unsafe { raw::copy_to_own(src, to, self.plan.entry_bytes[eid]) }
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
        if self.entry_data(eid).is_null() && self.plan.entry_bytes[eid] > 0 {
            return Err(Error::value(format!("entry {eid} is derived from weights only and was not kept")));
        }
        // SAFETY: the entry's memory holds `entry_bytes[eid]` bytes; `dst` is the caller's tensor,
        // writable per the packed-call contract.
        unsafe { raw::copy_from_own(self.entry_data(eid), dst, self.plan.entry_bytes[eid]) }
    }

    /// Copies raw bytes into input entry `eid`; the sizes must match.
    pub fn write_entry_bytes(&mut self, eid: usize, bytes: &[u8]) -> Result<()> {
        let n = self.plan.entry_bytes[eid];
        if n != bytes.len() {
            return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
        }
        let to = self.prepare_write(eid)?;
        if n > 0 {
            // SAFETY: as in `write_entry_matched`; `bytes` is a distinct slice of `n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, n) };
        }
        Ok(())
    }

    /// Copies entry `oeid` of `other`, already checked to have entry `eid`'s shape and dtype, into
    /// input entry `eid` of this executor.
    pub fn copy_entry_from(&mut self, eid: usize, other: &mut Instance, oeid: usize) -> Result<()> {
        other.prepare()?;
        self.write_entry_matched(eid, other.entry_source(oeid))
    }

    /// Redirects the slot of input entry `eid` to caller memory.
    pub fn bind_input_external(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.check_external(eid, src)?;
        let sid = self.plan.graph.entries[eid].storage_id;
        self.slot_override[sid] = Some(src.data_ptr().cast());
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
        self.refresh();
        Ok(())
    }

    /// Redirects output entry `eid` to caller memory, and the operator results it aliases
    /// through `__nop` (so their producer writes there, and every reader follows). A `__nop` of a
    /// graph input stops the walk: the input keeps its memory, and the output, which no operator
    /// writes, shows the caller's bytes, as upstream's.
    pub fn bind_output_external(&mut self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        self.check_external(eid, dst)?;
        let ptr = dst.data_ptr().cast();
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
        self.refresh();
        Ok(())
    }

    fn check_external(&self, eid: usize, t: RawTensor<'_>) -> Result<()> {
        let e = &self.plan.graph.entries[eid];
        if t.device() != self.plan.device {
            return Err(Error::value(format!(
                "zero-copy tensor is on device {:?}, the executor on {:?}",
                t.device(),
                self.plan.device
            )));
        }
        if t.data_ptr() as usize % 64 != 0 {
            return Err(Error::value("zero-copy tensor data must be aligned to 64 bytes"));
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
                self.slots[sid] = SlotMemory::owned(Buffer::zeroed(self.plan.storage.slots[sid].bytes)?);
            }
        }
        self.refresh();
        Ok(())
    }

    /// Moves this executor's activations into `arena` (its own are released).
    pub fn join_arena(&mut self, arena: Arc<Arena>) -> Result<()> {
        self.prepare()?;
        arena.reserve(self.layout.arena_bytes)?;
        let (buffer, generation) = arena.current();
        self.activations = Activations::Shared { arena, buffer, generation };
        self.refresh();
        Ok(())
    }

    pub fn arena(&self) -> Option<&Arc<Arena>> {
        match &self.activations {
            Activations::Shared { arena, .. } => Some(arena),
            _ => None,
        }
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run_ops(&mut self, range: std::ops::Range<usize>) -> Result<()> {
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
                        self.refresh();
                    }
                }
                Some(guard)
            }
            None => None,
        };
        let plan = &self.plan;
        for call in &mut self.calls[range] {
            if !call.folded {
                run_call(plan, call)?;
            }
        }
        Ok(())
    }

    pub fn run(&mut self) -> Result<()> {
        self.run_ops(0..self.calls.len())
    }
}

/// Calls one operator on the tensors its argument arrays address.
fn run_call(plan: &Plan, call: &mut OpCall) -> Result<()> {
    let rc = match &call.call {
        Call::Nop => 0,
        Call::Copy => {
            // SAFETY: both handles point into our tensor table, bound to memory of at least the
            // entries' sizes (Plan::new checks every slot covers its entries, layouts size every
            // value for its largest alias); the output is an operator output: arena or scratch
            // memory this executor owns.
            unsafe {
                let from = RawTensor::from_ptr(call.values[0].v_handle.cast())?;
                let to = RawTensor::from_ptr(call.values[1].v_handle.cast())?;
                raw::copy_tensor(from, to)
            }
            .map(|_| 0)
            .map_err(|e| op_error(plan, call.node, e))?
        }
        Call::Kernel(f) => {
            let mut ret = TVMValue::NULL;
            let mut code = kTVMNullptr;
            // SAFETY: the arrays address our entry tensors, bound to live memory of the sizes the
            // graph declares, which is what the operator checks and reads.
            unsafe {
                crate::packed::function::call_kernel(
                    *f,
                    call.values.as_mut_ptr(),
                    call.codes.as_mut_ptr(),
                    call.values.len(),
                    &mut ret,
                    &mut code,
                )
            }
        }
        Call::Packed(func) => {
            // SAFETY: as above; the values match their codes.
            let args = unsafe { Args::from_raw(call.values.as_ptr(), call.codes.as_ptr(), call.values.len() as i32)? };
            func.call(&args).map(|_| 0).map_err(|e| op_error(plan, call.node, e))?
        }
    };
    if rc != 0 {
        return Err(op_error(plan, call.node, Error::foreign(last_error::get())));
    }
    Ok(())
}

fn op_error(plan: &Plan, node: usize, e: Error) -> Error {
    let n = &plan.graph.nodes[node];
    let func = match &n.kind {
        crate::graph::NodeKind::Op(a) => a.func_name.as_str(),
        _ => "",
    };
    e.context(format!("operator {func} (node {node} '{}') failed", n.name))
}
