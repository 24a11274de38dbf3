//! The per-executor state: slot memory, the entry tensors kernels read and write, and the
//! prepared argument arrays of every operator. Memory is bound per storage slot, so every entry
//! planned into a slot (a `__nop` reshape of a weight included) sees the same bytes.
//!
//! This file builds the raw `DLTensor`s and calls kernels: the executor's unsafe corner.

use super::arena::Arena;
use super::plan::{OpKind, Plan};
use crate::dlpack::{kTVMDLTensorHandle, kTVMNullptr, DLTensor, TVMBackendPackedCFunc, TVMValue};
use crate::error::{Error, Result};
use crate::last_error;
use crate::memory_plan::SlotRole;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc};
use crate::tensor::{raw, Buffer, NDArray, RawTensor, Weight};
use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory behind one storage slot. A shared weight is a variant of its own, so no path can
/// mistake it for memory this executor may write.
#[derive(Clone, Default)]
pub enum SlotMemory {
    /// Nothing yet: input slots get memory when first needed, so a weight that will be shared is
    /// never allocated twice.
    #[default]
    Unbound,
    /// This executor's own memory, writable (activations, inputs, private weights). Others may
    /// hold the `Arc` through views (`get_input`, `get_output`), never to share it as a weight.
    Owned(Arc<Buffer>),
    /// A weight shared read-only with other executors, a factory, a mapped file or a library.
    Weight(Arc<Weight>),
    /// A range of an activation arena shared with executors that run in turn.
    Arena { buffer: Arc<Buffer>, offset: usize },
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
            SlotMemory::Arena { buffer, offset } => Some(buffer.as_ptr().wrapping_add(*offset).cast()),
        }
    }

    pub fn is_bound(&self) -> bool {
        !matches!(self, SlotMemory::Unbound)
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
    values: Box<[TVMValue]>,
    codes: Box<[i32]>,
}

pub struct Instance {
    pub plan: Arc<Plan>,
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
    /// The activation arena shared with other executors, and the generation bound.
    arena: Option<(Arc<Arena>, u64)>,
    /// The node `execute_node` ran last (debug executors).
    pub last_executed: Option<usize>,
}

// SAFETY: the raw pointers address memory this instance keeps alive (its slots, its tensor table,
// the plan's shapes), or memory a caller bound with zero-copy and promised to keep; the instance is
// only used behind the executor's mutex.
unsafe impl Send for Instance {}

impl Instance {
    /// A new instance; activation slots are allocated now, input slots when first needed (so a
    /// shared weight is never allocated twice).
    pub fn new(plan: Arc<Plan>) -> Result<Instance> {
        let slots = plan
            .storage
            .slots
            .iter()
            .zip(&plan.linked)
            .map(|(s, linked)| match (linked, &s.role) {
                (Some(w), _) => Ok(SlotMemory::Weight(w.clone())),
                (None, SlotRole::Activation) => Buffer::zeroed(s.bytes).map(SlotMemory::owned),
                _ => Ok(SlotMemory::Unbound),
            })
            .collect::<Result<Vec<_>>>()?;
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
            arena: None,
            last_executed: None,
        };
        inst.refresh();
        Ok(inst)
    }

    /// Points every entry tensor at its current memory.
    fn refresh(&mut self) {
        let plan = &self.plan;
        for (eid, e) in plan.graph.entries.iter().enumerate() {
            let sid = e.storage_id;
            let data = self.entry_override[eid]
                .or(self.slot_override[sid])
                .or_else(|| self.slots[sid].data())
                .unwrap_or(std::ptr::null_mut());
            self.tensors.set_data(eid, data);
        }
        self.all_bound =
            self.slots.iter().zip(&plan.storage.slots).all(|(m, s)| m.is_bound() || s.role == SlotRole::Unused);
    }

    pub fn slot(&self, sid: usize) -> &SlotMemory {
        &self.slots[sid]
    }

    /// Gives slot `sid` writable memory of this executor's own: fresh zeros for an unbound slot, a
    /// private copy of a shared weight (copy on write).
    pub fn make_private(&mut self, sid: usize) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        let fresh = match &self.slots[sid] {
            SlotMemory::Owned(_) | SlotMemory::Arena { .. } => return Ok(()),
            SlotMemory::Unbound => Buffer::zeroed(bytes)?,
            SlotMemory::Weight(w) => w.to_buffer(0, bytes)?,
        };
        self.slots[sid] = SlotMemory::owned(fresh);
        self.refresh();
        Ok(())
    }

    /// Binds slot `sid` to a weight shared with others; the weight must cover the slot.
    pub fn bind_weight(&mut self, sid: usize, weight: Arc<Weight>) -> Result<()> {
        let bytes = self.plan.storage.slots[sid].bytes;
        if weight.len() < bytes {
            return Err(Error::internal(format!(
                "a weight of {} bytes cannot back storage slot {sid} of {bytes} bytes",
                weight.len()
            )));
        }
        self.slots[sid] = SlotMemory::Weight(weight);
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
            arena @ SlotMemory::Arena { .. } => {
                self.slots[sid] = arena;
                return Err(Error::internal(format!("storage slot {sid} holds activations, not a weight")));
            }
        };
        self.bind_weight(sid, weight.clone())?;
        Ok(weight)
    }

    /// A read-only look at entry `eid`, for copying out of it.
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
    /// a copy when the entry lives in a shared weight (a write through the array must not reach
    /// the other holders), or a view of caller memory bound with zero-copy.
    pub fn entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        let plan = self.plan.clone();
        let e = &plan.graph.entries[eid];
        let sid = e.storage_id;
        if self.entry_override[eid].is_none() && self.slot_override[sid].is_none() {
            if !self.slots[sid].is_bound() {
                self.make_private(sid)?;
            }
            return match &self.slots[sid] {
                SlotMemory::Owned(buf) => NDArray::view_of(buf, 0, &e.shape, e.dtype),
                SlotMemory::Arena { buffer, offset } => NDArray::view_of(buffer, *offset, &e.shape, e.dtype),
                SlotMemory::Weight(w) => NDArray::from_bytes(&e.shape, e.dtype, &w.bytes()[..plan.entry_bytes[eid]]),
                SlotMemory::Unbound => unreachable!("bound above"),
            };
        }
        // SAFETY: caller memory bound with zero-copy, which the caller keeps alive for as long as
        // it is bound (the contract of set_input_zero_copy / set_output_zero_copy).
        Ok(unsafe { NDArray::external(self.tensors.data(eid), &e.shape, e.dtype) })
    }

    /// Makes entry `eid` writable without touching anyone else's memory: caller memory bound with
    /// zero-copy is written in place, shared or missing slot memory becomes private first.
    /// Returns where to write the entry's bytes.
    fn prepare_write(&mut self, eid: usize) -> Result<*mut u8> {
        let sid = self.plan.graph.entries[eid].storage_id;
        if self.slot_override[sid].is_none() {
            self.make_private(sid)?;
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
    pub fn copy_entry_to(&self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
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
    pub fn read_entry_matched(&self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
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
    pub fn copy_entry_from(&mut self, eid: usize, other: &Instance, oeid: usize) -> Result<()> {
        self.write_entry_matched(eid, other.entry_source(oeid))
    }

    /// Redirects the slot of input entry `eid` to caller memory.
    pub fn bind_input_external(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.check_external(eid, src)?;
        let sid = self.plan.graph.entries[eid].storage_id;
        self.slot_override[sid] = Some(src.data_ptr().cast());
        self.refresh();
        Ok(())
    }

    /// Redirects output entry `eid` (and the entries it aliases through `__nop`) to caller memory.
    pub fn bind_output_external(&mut self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        self.check_external(eid, dst)?;
        let ptr = dst.data_ptr().cast();
        let graph = &self.plan.graph;
        let mut stack = vec![eid];
        while let Some(e) = stack.pop() {
            self.entry_override[e] = Some(ptr);
            // The producer of `e`, if it is a __nop, reads an alias that must move too.
            let producer = graph.node_row_ptr.partition_point(|&start| start <= e) - 1;
            if let crate::graph::NodeKind::Op(a) = &graph.nodes[producer].kind {
                if a.func_name == "__nop" {
                    if let Some(&(src, idx)) = graph.nodes[producer].inputs.first() {
                        stack.push(graph.entry_id(src, idx));
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

    /// Binds every slot that still has no memory (inputs never set read as zeros).
    fn bind_all(&mut self) -> Result<()> {
        for sid in 0..self.slots.len() {
            if !self.slots[sid].is_bound() && self.plan.storage.slots[sid].role != SlotRole::Unused {
                self.slots[sid] = SlotMemory::owned(Buffer::zeroed(self.plan.storage.slots[sid].bytes)?);
            }
        }
        self.refresh();
        Ok(())
    }

    /// Moves this executor's activations into `arena` (its own are released).
    pub fn join_arena(&mut self, arena: Arc<Arena>) -> Result<()> {
        arena.reserve(self.plan.arena_bytes)?;
        self.bind_arena(arena);
        Ok(())
    }

    fn bind_arena(&mut self, arena: Arc<Arena>) {
        let (buffer, generation) = arena.current();
        for (sid, offset) in self.plan.arena_offsets.iter().enumerate() {
            if let Some(offset) = *offset {
                self.slots[sid] = SlotMemory::Arena { buffer: buffer.clone(), offset };
            }
        }
        self.arena = Some((arena, generation));
        self.refresh();
    }

    pub fn arena(&self) -> Option<&Arc<Arena>> {
        self.arena.as_ref().map(|(a, _)| a)
    }

    /// Runs operators `range` in order.
    pub fn run_ops(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        if !self.all_bound {
            self.bind_all()?;
        }
        let arena = self.arena.as_ref().map(|(a, _)| a.clone());
        let _guard = match &arena {
            Some(a) => {
                let guard = a.try_acquire()?;
                if a.current().1 != self.arena.as_ref().map_or(0, |(_, g)| *g) {
                    // Another holder grew the arena since this executor last ran.
                    self.bind_arena(a.clone());
                }
                Some(guard)
            }
            None => None,
        };
        for call in &mut self.calls[range] {
            let rc = match &call.call {
                Call::Nop => 0,
                Call::Copy => {
                    // SAFETY: both handles point into our tensor table, bound to memory of at least
                    // the entries' sizes (Plan::new checks every slot covers its entries); the
                    // output is an operator output, so an activation slot this executor owns.
                    unsafe {
                        let from = RawTensor::from_ptr(call.values[0].v_handle.cast())?;
                        let to = RawTensor::from_ptr(call.values[1].v_handle.cast())?;
                        raw::copy_tensor(from, to)
                    }
                    .map(|_| 0)
                    .map_err(|e| op_error(&self.plan, call.node, e))?
                }
                Call::Kernel(f) => {
                    let mut ret = TVMValue::NULL;
                    let mut code = kTVMNullptr;
                    // SAFETY: the arrays address our entry tensors, bound to live memory of the
                    // sizes the graph declares, which is what the operator checks and reads.
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
                    let args =
                        unsafe { Args::from_raw(call.values.as_ptr(), call.codes.as_ptr(), call.values.len() as i32)? };
                    func.call(&args).map(|_| 0).map_err(|e| op_error(&self.plan, call.node, e))?
                }
            };
            if rc != 0 {
                return Err(op_error(&self.plan, call.node, Error::foreign(last_error::get())));
            }
        }
        Ok(())
    }

    pub fn run(&mut self) -> Result<()> {
        self.run_ops(0..self.calls.len())
    }
}

fn op_error(plan: &Plan, node: usize, e: Error) -> Error {
    let n = &plan.graph.nodes[node];
    let func = match &n.kind {
        crate::graph::NodeKind::Op(a) => a.func_name.as_str(),
        _ => "",
    };
    e.context(format!("operator {func} (node {node} '{}') failed", n.name))
}
