//! The executor's unsafe room: the `DLTensor`s kernels receive, every operator's argument arrays,
//! the calls, and the copies into and out of entry memory. Each entry's tensor points at a
//! [`Mem`], which the table holds for as long as the tensor points there, so nothing a kernel
//! reads or writes can be freed under it; caller memory bound with zero-copy enters only through
//! [`ZeroCopy::new`], whose caller promises it lives while bound. Everything above this file (the
//! bindings in `instance`, folding in `fold`, the layout) is safe code deciding *which* memory
//! each entry uses.

use super::plan::{OpKind, Plan};
use crate::device::Place;
use crate::dlpack::{kTVMDLTensorHandle, kTVMNullptr, DLDataType, DLDevice, DLTensor, TVMBackendPackedCFunc, TVMValue};
use crate::error::{Error, Result};
use crate::last_error;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc};
use crate::tensor::{raw, Buffer, ImageForm, NDArray, RawTensor, Weight};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// Caller memory bound to an entry with zero-copy (`set_input_zero_copy`, `set_output_zero_copy`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct External(*mut c_void);

// SAFETY: an address the caller promised stays valid while bound (`ZeroCopy::new`); which thread
// uses it does not matter to that promise, and the executor's lock serialises the uses.
unsafe impl Send for External {}

/// A tensor of the caller's to bind with zero-copy, and the caller's promise about its memory.
pub struct ZeroCopy<'a> {
    tensor: RawTensor<'a>,
}

impl<'a> ZeroCopy<'a> {
    /// # Safety
    /// The tensor's data must stay valid for reading and writing its bytes for as long as it is
    /// bound to the executor (until the binding is replaced or the executor is freed), and the
    /// caller must not use it while the executor runs: TVM's zero-copy contract.
    pub unsafe fn new(tensor: RawTensor<'a>) -> ZeroCopy<'a> {
        ZeroCopy { tensor }
    }

    pub fn tensor(&self) -> RawTensor<'a> {
        self.tensor
    }

    pub(super) fn memory(&self) -> External {
        External(self.tensor.data_ptr().cast())
    }
}

/// What an entry's tensor points at, and what keeps that memory alive while it does.
#[derive(Clone, Default)]
pub enum Mem {
    /// Nothing (an unbound input, a folded result not kept).
    #[default]
    None,
    /// Writable memory of this runtime, from this offset.
    Buffer(Arc<Buffer>, usize),
    /// A weight: kernels only read it.
    Weight(Arc<Weight>),
    /// Caller memory bound with zero-copy.
    External(External),
    /// This offset of the arena leased for the run under way (see [`Ops::lend`]); nothing
    /// between runs. The table holds the arena while it is lent, so entries need no hold each.
    Lent(usize),
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
    /// The entries `values` address, in argument order.
    args: Box<[usize]>,
    values: Box<[TVMValue]>,
    codes: Box<[i32]>,
}

/// What every entry's tensor points at, and the memory that keeps it valid: taken to put the
/// tensors back exactly (a call that fails half-way, folding's scratch).
#[derive(Clone)]
pub struct Bindings {
    memory: Vec<Mem>,
    data: Vec<*mut c_void>,
}

// SAFETY: the addresses are memory `memory` keeps alive or caller memory under the zero-copy
// promise; they are only written back into the table, under the executor's lock.
unsafe impl Send for Bindings {}

impl Bindings {
    /// The memory entries were bound to.
    pub fn memory(&self) -> &[Mem] {
        &self.memory
    }
}

/// The entry tensors, the memory each points at, and the operators' prepared calls.
pub struct Ops {
    tensors: TensorTable,
    memory: Vec<Mem>,
    /// Bytes of each entry (the plan's), what every binding must cover.
    bytes: Vec<usize>,
    calls: Vec<OpCall>,
    /// Per entry: the device its tensor is on.
    devices: Vec<DLDevice>,
    /// Per entry in a texture slot: the image kernels take it as (a weight bound there is taken
    /// as an image of this form).
    images: Vec<Option<ImageForm>>,
    /// The arena `Mem::Lent` entries point into while a run holds it.
    lent: Option<Arc<Buffer>>,
    /// The `Mem::Lent` entries, found again after the bindings change (`None` until then), and
    /// room for their addresses: lending is on every pooled run's path.
    lent_entries: Option<Vec<usize>>,
    lent_data: Vec<*mut c_void>,
}

// SAFETY: the table's pointers address memory `memory` keeps alive, the plan's shapes (the plan
// outlives the executor's state), or caller memory under the zero-copy promise; the executor's
// lock serialises every use.
unsafe impl Send for Ops {}

impl Ops {
    pub fn new(plan: &Plan) -> Ops {
        let tensors = TensorTable::new(
            plan.graph
                .entries
                .iter()
                .zip(&plan.entry_device)
                .map(|(e, &device)| DLTensor {
                    data: std::ptr::null_mut(),
                    device,
                    ndim: e.shape.len() as i32,
                    dtype: e.dtype,
                    // Kernels never write shapes; the plan outlives the executor's tensors.
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
                args: op.args.clone().into_boxed_slice(),
                values: op.args.iter().map(|&eid| TVMValue { v_handle: tensors.at(eid).cast() }).collect(),
                codes: vec![kTVMDLTensorHandle; op.args.len()].into_boxed_slice(),
            })
            .collect();
        let n = plan.graph.num_entries();
        Ops {
            tensors,
            memory: vec![Mem::None; n],
            bytes: plan.entry_bytes.clone(),
            calls,
            devices: plan.entry_device.clone(),
            images: plan.graph.entries.iter().map(|e| plan.image_form(e.storage_id)).collect(),
            lent: None,
            lent_entries: None,
            lent_data: Vec::new(),
        }
    }

    /// What entry `eid`'s tensor takes as data for `mem`, which must cover the entry's bytes.
    /// Fails only when a device cannot make the handle kernels take for the memory.
    fn resolve(&self, eid: usize, mem: &Mem) -> Result<*mut c_void> {
        let bytes = self.bytes[eid];
        match mem {
            Mem::None => Ok(std::ptr::null_mut()),
            Mem::Buffer(b, at) => {
                assert!(at + bytes <= b.len(), "entry {eid} ({bytes} bytes) at {at} of a buffer of {}", b.len());
                b.data_at(*at, bytes)
            }
            Mem::Weight(w) => {
                assert!(bytes <= w.len(), "entry {eid} ({bytes} bytes) in a weight of {}", w.len());
                // Kernels take every argument as `void*`; weights are only ever operator inputs.
                w.data_in(self.devices[eid], self.images[eid])
            }
            Mem::External(External(p)) => Ok(*p),
            // The pool sizes every arena for its largest member; `data_at` checks it anyway.
            Mem::Lent(at) => self.lent.as_ref().map_or(Ok(std::ptr::null_mut()), |b| b.data_at(*at, bytes)),
        }
    }

    /// Lends `arena` to the `Mem::Lent` entries for one run, all or nothing, or (`None`) takes it
    /// back: they point at nothing again, so no kernel can reach an arena given back.
    pub fn lend(&mut self, arena: Option<Arc<Buffer>>) -> Result<()> {
        let memory = &self.memory;
        let lent = self
            .lent_entries
            .get_or_insert_with(|| (0..memory.len()).filter(|&e| matches!(memory[e], Mem::Lent(_))).collect());
        self.lent_data.clear();
        if let Some(b) = &arena {
            for &eid in lent.iter() {
                let Mem::Lent(at) = memory[eid] else { unreachable!("a lent entry") };
                let p = b.data_at(at, self.bytes[eid]).map_err(|e| e.context(format!("binding entry {eid}")))?;
                self.lent_data.push(p);
            }
        } else {
            self.lent_data.resize(lent.len(), std::ptr::null_mut());
        }
        for (&eid, &p) in lent.iter().zip(&self.lent_data) {
            self.tensors.set_data(eid, p);
        }
        self.lent = arena;
        Ok(())
    }

    /// Points entry `eid` at `mem`; on failure the entry keeps what it had.
    pub fn bind(&mut self, eid: usize, mem: Mem) -> Result<()> {
        let data = self.resolve(eid, &mem)?;
        self.tensors.set_data(eid, data);
        self.memory[eid] = mem;
        self.lent_entries = None;
        Ok(())
    }

    /// Points every entry at its memory in `mems` (one per entry), all or nothing: when a device
    /// cannot bind one, no tensor changes.
    pub fn bind_all(&mut self, mems: Vec<Mem>) -> Result<()> {
        assert_eq!(mems.len(), self.memory.len(), "one memory per entry");
        let data = mems
            .iter()
            .enumerate()
            .map(|(eid, m)| self.resolve(eid, m).map_err(|e| e.context(format!("binding entry {eid}"))))
            .collect::<Result<Vec<_>>>()?;
        for (eid, p) in data.into_iter().enumerate() {
            self.tensors.set_data(eid, p);
        }
        self.memory = mems;
        self.lent_entries = None;
        Ok(())
    }

    /// What every entry points at now.
    pub fn snapshot(&self) -> Bindings {
        Bindings { memory: self.memory.clone(), data: (0..self.memory.len()).map(|e| self.tensors.data(e)).collect() }
    }

    /// Points every entry back at what `snapshot` took (no device call: nothing can fail).
    pub fn restore(&mut self, bindings: Bindings) {
        for (eid, &p) in bindings.data.iter().enumerate() {
            self.tensors.set_data(eid, p);
        }
        self.memory = bindings.memory;
        self.lent_entries = None;
    }

    /// What entry `eid` points at.
    pub fn memory_of(&self, eid: usize) -> &Mem {
        &self.memory[eid]
    }

    /// Points entry `eid` at nothing.
    pub fn unbind(&mut self, eid: usize) {
        self.tensors.set_data(eid, std::ptr::null_mut());
        self.memory[eid] = Mem::None;
        self.lent_entries = None;
    }

    /// The distinct files the weights entries are bound to are mapped from.
    pub fn mapped_files(&self) -> Vec<Arc<crate::tensor::FileMap>> {
        let mut out: Vec<Arc<crate::tensor::FileMap>> = Vec::new();
        for m in &self.memory {
            if let Some(f) = match m {
                Mem::Weight(w) => w.file_map(),
                _ => None,
            } {
                if !out.iter().any(|o| Arc::ptr_eq(o, f)) {
                    out.push(f.clone());
                }
            }
        }
        out
    }

    /// How many entry tensors are bound to `buffer` (each holds a count of it).
    pub fn bound_to_buffer(&self, buffer: &Arc<Buffer>) -> usize {
        self.memory.iter().filter(|m| matches!(m, Mem::Buffer(b, _) if Arc::ptr_eq(b, buffer))).count()
    }

    /// How many entry tensors are bound to `weight` (each holds a count of it).
    pub fn bound_to(&self, weight: &Arc<Weight>) -> usize {
        self.memory.iter().filter(|m| matches!(m, Mem::Weight(w) if Arc::ptr_eq(w, weight))).count()
    }

    /// The address of entry `eid`'s data (null while unbound).
    pub fn data(&self, eid: usize) -> *const u8 {
        self.tensors.data(eid).cast()
    }

    pub fn set_folded(&mut self, folded: &[bool]) {
        for (call, &f) in self.calls.iter_mut().zip(folded) {
            call.folded = f;
        }
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run(&mut self, plan: &Plan, range: std::ops::Range<usize>) -> Result<()> {
        let (tensors, bytes) = (&self.tensors, &self.bytes);
        for call in &mut self.calls[range] {
            if !call.folded {
                check_bound(tensors, bytes, plan, call)?;
                run_call(plan, call)?;
            }
        }
        Ok(())
    }

    /// Runs operator `i`, folded or not (folding runs the folded ones, once).
    pub fn run_one(&mut self, plan: &Plan, i: usize) -> Result<()> {
        check_bound(&self.tensors, &self.bytes, plan, &self.calls[i])?;
        run_call(plan, &mut self.calls[i])
    }

    /// Entry `eid`'s shape (how a copy addresses it in an image).
    fn shape(&self, eid: usize) -> &[i64] {
        // SAFETY: a live tensor of the table, whose shape is the plan's (`Ops::new`).
        unsafe {
            let t = &*self.tensors.at(eid);
            std::slice::from_raw_parts(t.shape, t.ndim as usize)
        }
    }

    /// Where entry `eid` may be written: memory of this runtime or the caller's, never a weight.
    fn writable(&self, eid: usize) -> Result<Place> {
        self.writable_bytes(eid).map(|p| p.with_shape(self.shape(eid)))
    }

    fn writable_bytes(&self, eid: usize) -> Result<Place> {
        match &self.memory[eid] {
            Mem::Buffer(b, at) => Ok(b.place(*at)),
            Mem::External(External(p)) => Ok(Place { data: *p, offset: 0, device: self.devices[eid], shape: None }),
            Mem::Lent(at) => match &self.lent {
                Some(b) => Ok(b.place(*at)),
                None => Err(Error::internal(format!("entry {eid} has memory only while its executor runs"))),
            },
            Mem::Weight(_) => Err(Error::internal(format!("entry {eid} is a weight: it is never written in place"))),
            Mem::None => Err(Error::internal(format!("entry {eid} has no memory to write"))),
        }
    }

    /// Where entry `eid`'s bytes are, for reading.
    fn readable(&self, eid: usize) -> Place {
        let place = match (&self.memory[eid], &self.lent) {
            (Mem::Buffer(b, at), _) | (Mem::Lent(at), Some(b)) => b.place(*at),
            _ => Place { data: self.tensors.data(eid), offset: 0, device: self.devices[eid], shape: None },
        };
        place.with_shape(self.shape(eid))
    }

    /// Copies `src`, already checked to have entry `eid`'s shape and element size, into it.
    pub fn write_from(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        let to = self.writable(eid)?;
        // SAFETY: `to` holds the entry's bytes (`bind` checked), memory of this runtime's or the
        // caller's under the zero-copy promise, and not a weight; `&mut self` keeps kernels off it.
        unsafe { raw::copy_to_place(src, to, self.bytes[eid]) }
    }

    /// Copies `bytes`, exactly the entry's size, into entry `eid`.
    pub fn write_bytes(&mut self, eid: usize, bytes: &[u8]) -> Result<()> {
        let n = self.bytes[eid];
        if n != bytes.len() {
            return Err(Error::value(format!("size mismatch: the array holds {n} bytes, {} given", bytes.len())));
        }
        if n == 0 {
            return Ok(());
        }
        let to = self.writable(eid)?;
        let from = Place { data: bytes.as_ptr().cast_mut().cast(), offset: 0, device: DLDevice::CPU, shape: None };
        // SAFETY: as in `write_from`; `bytes` is a distinct slice of `n` bytes, only read.
        unsafe { crate::device::copy(from, to, n) }
    }

    /// Copies entry `eid` into `dst`, already checked to have its shape and element size.
    pub fn read_into(&self, eid: usize, dst: RawTensor<'_>) -> Result<()> {
        if self.data(eid).is_null() && self.bytes[eid] > 0 {
            return Err(Error::value(format!("entry {eid} is derived from weights only and was not kept")));
        }
        // SAFETY: the entry's memory holds `bytes[eid]` bytes (`bind` checked); `dst` is the
        // caller's tensor, writable per the packed-call contract.
        unsafe { raw::copy_from_place(self.readable(eid), dst, self.bytes[eid]) }
    }

    /// A read-only look at entry `eid`, for copying out of it.
    pub fn source(&self, eid: usize) -> Result<RawTensor<'_>> {
        if self.data(eid).is_null() && self.bytes[eid] > 0 {
            return Err(Error::internal(format!("entry {eid} has no memory to read")));
        }
        // SAFETY: our own tensor (shape from the plan, no strides); its data holds the entry's
        // bytes for as long as `self` is borrowed (`memory` keeps it).
        Ok(unsafe { RawTensor::from_ptr(self.tensors.at(eid)) }.expect("own tensors are well formed"))
    }

    /// An array viewing entry `eid`'s memory with its shape and dtype: `None` for a weight (a
    /// view would let a host write it) or an entry without memory.
    pub fn view(&self, eid: usize, shape: &[i64], dtype: DLDataType) -> Result<Option<ObjRef<NDArray>>> {
        Ok(match &self.memory[eid] {
            Mem::Buffer(b, at) => Some(NDArray::view_of(b, *at, shape, dtype)?),
            // SAFETY: caller memory bound with zero-copy, which the caller keeps alive for as long
            // as it is bound (`ZeroCopy::new`).
            Mem::External(External(p)) => Some(unsafe { NDArray::external(*p, shape, dtype, self.devices[eid]) }),
            // A view would outlive the run's lease of the arena.
            Mem::Weight(_) | Mem::None | Mem::Lent(_) => None,
        })
    }

    /// Points `view`, an array handed out for entry `eid`, at the entry's memory now, when the
    /// array can be trusted there: caller memory bound with zero-copy, or a place in the buffer
    /// the array holds. Returns false when it cannot follow (it keeps what it showed).
    pub fn follow(&self, eid: usize, view: &ObjRef<NDArray>) -> bool {
        let data = self.tensors.data(eid).cast::<u8>();
        if view.data_ptr() == data {
            return true;
        }
        let trusted = match &self.memory[eid] {
            Mem::External(_) => true,
            Mem::Buffer(..) => view.buffer().is_some_and(|b| b.holds(data.cast(), self.bytes[eid])),
            Mem::Weight(_) | Mem::None | Mem::Lent(_) => false,
        };
        if trusted {
            // SAFETY: `data` is caller memory bound with zero-copy, alive while bound, or inside
            // the buffer the array keeps alive; nobody uses the array during the call (the
            // executor is locked; hosts must not use an executor's array while binding its memory,
            // as with upstream).
            unsafe { view.retarget(data.cast()) }
        }
        trusted
    }
}

/// Refuses to launch an operator while one of its arguments has no memory: whatever left it
/// so (a binding a device refused, a bug), a kernel must never read or write through a null
/// handle. A few loads per argument: nothing next to a kernel call.
fn check_bound(tensors: &TensorTable, bytes: &[usize], plan: &Plan, call: &OpCall) -> Result<()> {
    if matches!(call.call, Call::Nop) {
        return Ok(());
    }
    match call.args.iter().position(|&eid| tensors.data(eid).is_null() && bytes[eid] > 0) {
        None => Ok(()),
        Some(k) => Err(op_error(
            plan,
            call.node,
            Error::internal(format!(
                "argument {k} (entry {}) has no memory bound: the operator was not launched",
                call.args[k]
            )),
        )),
    }
}

/// Calls one operator on the tensors its argument arrays address.
fn run_call(plan: &Plan, call: &mut OpCall) -> Result<()> {
    let rc = match &call.call {
        Call::Nop => 0,
        Call::Copy => {
            // SAFETY: both handles point into our tensor table, bound to memory of at least the
            // entries' sizes (`Ops::bind` checks); the output is an operator output: arena or
            // scratch memory this executor owns, or the caller's under the zero-copy promise.
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
