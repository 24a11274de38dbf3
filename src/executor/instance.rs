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
use crate::tensor::{raw, Buffer, NDArray, RawTensor};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Arc;

/// The memory behind one storage slot: `buffer` from `offset` (non-zero inside an arena).
#[derive(Clone, Default)]
pub struct SlotMemory {
    pub buffer: Option<Arc<Buffer>>,
    pub offset: usize,
    /// Other executors or a factory may hold the same buffer: copy before writing.
    pub shared: bool,
}

impl SlotMemory {
    fn owned(buffer: Buffer) -> SlotMemory {
        SlotMemory { buffer: Some(Arc::new(buffer)), offset: 0, shared: false }
    }

    fn data(&self) -> Option<*mut c_void> {
        self.buffer.as_ref().map(|b| b.as_ptr().wrapping_add(self.offset).cast())
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
    pub slots: Vec<SlotMemory>,
    /// Zero-copy input bindings, per slot.
    slot_override: Vec<Option<*mut c_void>>,
    /// Zero-copy output bindings, per entry.
    entry_override: Vec<Option<*mut c_void>>,
    tensors: Box<[DLTensor]>,
    calls: Vec<OpCall>,
    /// Names loaded as parameters (hidden from `get_input_info`).
    pub param_names: HashSet<String>,
    all_bound: bool,
    /// The activation arena shared with other executors, and the generation bound.
    arena: Option<(Arc<Arena>, u64)>,
    /// The node `execute_node` ran last (debug executors).
    pub last_executed: Option<usize>,
}

// SAFETY: the raw pointers address memory this instance keeps alive (its slot buffers and the
// plan's shapes), or memory a caller bound with zero-copy and promised to keep; the instance is
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
                // Linked constants are shared read-only memory: a write copies them first.
                (Some(buf), _) => Ok(SlotMemory { buffer: Some(buf.clone()), offset: 0, shared: true }),
                (None, SlotRole::Activation) => Buffer::zeroed(s.bytes).map(SlotMemory::owned),
                _ => Ok(SlotMemory::default()),
            })
            .collect::<Result<Vec<_>>>()?;
        let tensors: Box<[DLTensor]> = plan
            .graph
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
            .collect();
        let n_slots = slots.len();
        let n_entries = tensors.len();
        let mut inst = Instance {
            plan,
            slots,
            slot_override: vec![None; n_slots],
            entry_override: vec![None; n_entries],
            tensors,
            calls: Vec::new(),
            param_names: HashSet::new(),
            all_bound: false,
            arena: None,
            last_executed: None,
        };
        inst.calls = inst.build_calls();
        inst.refresh();
        // Inputs whose data the library links in are weights.
        let plan = inst.plan.clone();
        for i in 0..plan.num_inputs() {
            if plan.linked[plan.graph.entries[plan.input_entries[i]].storage_id].is_some() {
                inst.param_names.insert(plan.input_name(i).to_string());
            }
        }
        Ok(inst)
    }

    fn build_calls(&mut self) -> Vec<OpCall> {
        let base = self.tensors.as_mut_ptr();
        self.plan
            .ops
            .iter()
            .map(|op| {
                let call = match &op.kind {
                    OpKind::Nop => Call::Nop,
                    OpKind::Copy => Call::Copy,
                    OpKind::Kernel { raw: Some(f), .. } => Call::Kernel(*f),
                    OpKind::Kernel { func, raw: None } => Call::Packed(func.clone()),
                };
                // The boxed tensor array never moves, so these addresses stay valid.
                let values = op.args.iter().map(|&eid| TVMValue { v_handle: base.wrapping_add(eid).cast() }).collect();
                let codes = vec![kTVMDLTensorHandle; op.args.len()].into_boxed_slice();
                OpCall { node: op.node, call, values, codes }
            })
            .collect()
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
            self.tensors[eid].data = data;
        }
        self.all_bound =
            self.slots.iter().zip(&plan.storage.slots).all(|(m, s)| m.buffer.is_some() || s.role == SlotRole::Unused);
    }

    /// Gives slot `sid` memory of its own if it has none, or a private copy if it is shared.
    pub fn make_private(&mut self, sid: usize) -> Result<()> {
        let slot = &self.slots[sid];
        if slot.buffer.is_some() && !slot.shared {
            return Ok(());
        }
        let bytes = self.plan.storage.slots[sid].bytes;
        let fresh = match &slot.buffer {
            Some(b) => b.duplicate_range(slot.offset, bytes)?,
            None => Buffer::zeroed(bytes)?,
        };
        self.slots[sid] = SlotMemory::owned(fresh);
        self.refresh();
        Ok(())
    }

    /// Binds slot `sid` to a buffer shared with others.
    pub fn bind_shared(&mut self, sid: usize, buffer: Arc<Buffer>) {
        self.slots[sid] = SlotMemory { buffer: Some(buffer), offset: 0, shared: true };
        self.refresh();
    }

    /// The buffer of slot `sid`, allocated if needed, marked as shared from now on.
    pub fn share_out(&mut self, sid: usize) -> Result<Arc<Buffer>> {
        if self.slots[sid].buffer.is_none() {
            self.make_private(sid)?;
        }
        self.slots[sid].shared = true;
        Ok(self.slots[sid].buffer.clone().expect("allocated above"))
    }

    pub fn entry_tensor(&self, eid: usize) -> RawTensor<'_> {
        // SAFETY: our own tensor: shape from the plan, no strides.
        unsafe { RawTensor::from_ptr(&self.tensors[eid]) }.expect("own tensors are well formed")
    }

    /// An NDArray aliasing entry `eid` (no copy), keeping its memory alive.
    pub fn entry_view(&mut self, eid: usize) -> Result<ObjRef<NDArray>> {
        let plan = self.plan.clone();
        let e = &plan.graph.entries[eid];
        let sid = e.storage_id;
        if self.entry_override[eid].is_none() && self.slot_override[sid].is_none() {
            if self.slots[sid].buffer.is_none() {
                self.make_private(sid)?;
            }
            let slot = &self.slots[sid];
            return NDArray::view_of(slot.buffer.as_ref().expect("bound above"), slot.offset, &e.shape, e.dtype);
        }
        Ok(NDArray::external(self.tensors[eid].data, &e.shape, e.dtype))
    }

    /// Makes entry `eid` writable without touching anyone else's memory: caller memory bound with
    /// zero-copy is written in place, shared or missing slot memory becomes private first.
    fn prepare_write(&mut self, eid: usize) -> Result<()> {
        let sid = self.plan.graph.entries[eid].storage_id;
        if self.slot_override[sid].is_none() {
            self.make_private(sid)?;
        }
        Ok(())
    }

    /// Copies `src` into input entry `eid`.
    pub fn write_entry(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.prepare_write(eid)?;
        raw::copy_tensor(src, self.entry_tensor(eid))
    }

    /// Copies `src`, already checked to have entry `eid`'s shape and dtype, into it.
    pub fn write_entry_matched(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        self.prepare_write(eid)?;
        // SAFETY: the entry's memory holds `entry_bytes[eid]` bytes (its slot is at least as big).
        unsafe { raw::copy_to_own(src, self.tensors[eid].data.cast(), self.plan.entry_bytes[eid]) }
    }

    /// Copies entry `eid` into `dst`, already checked to have its shape and element size.
    pub fn read_entry_matched(&self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        // SAFETY: as above, for reading.
        unsafe { raw::copy_from_own(self.tensors[eid].data.cast(), dst, self.plan.entry_bytes[eid]) }
    }

    /// Copies raw bytes into input entry `eid`.
    pub fn write_entry_bytes(&mut self, eid: usize, bytes: &[u8]) -> Result<()> {
        self.prepare_write(eid)?;
        raw::copy_from_bytes(self.entry_tensor(eid), bytes)
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
            if self.slots[sid].buffer.is_none() && self.plan.storage.slots[sid].role != SlotRole::Unused {
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
                self.slots[sid] = SlotMemory { buffer: Some(buffer.clone()), offset, shared: false };
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
                    // SAFETY: both handles point into our tensor array.
                    let (from, to) = unsafe {
                        (
                            RawTensor::from_ptr(call.values[0].v_handle.cast())?,
                            RawTensor::from_ptr(call.values[1].v_handle.cast())?,
                        )
                    };
                    raw::copy_tensor(from, to).map(|_| 0).map_err(|e| op_error(&self.plan, call.node, e))?
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
