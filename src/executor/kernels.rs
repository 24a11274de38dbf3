//! The executor's unsafe room: the `DLTensor`s kernels receive ([`TensorTable`]) and the memory
//! each points at ([`Mem`], held in [`Ops`] for as long as the tensor points there, so nothing a
//! kernel reads or writes can be freed under it), every operator's argument arrays and the calls
//! ([`OpCalls`]), and the copies into and out of entry memory and the views of it. Caller memory
//! bound with zero-copy enters only as an [`External`] made from a `ZeroCopy`, whose maker
//! promised it lives while bound. Binding and lending (`bindings`, which keeps each tensor's data
//! what its `Mem` resolves to) and everything else in the executor is safe code deciding *which*
//! memory each entry uses.

use super::plan::{OpKind, Plan};
use crate::device::Place;
use crate::dlpack::{kTVMDLTensorHandle, kTVMNullptr, DLDataType, DLDevice, DLTensor, TVMBackendPackedCFunc, TVMValue};
use crate::error::{Error, Result};
use crate::last_error;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc};
use crate::tensor::raw::ZeroCopy;
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

impl External {
    pub fn of(tensor: &ZeroCopy<'_>) -> External {
        External(tensor.tensor().data_ptr().cast())
    }

    pub fn addr(&self) -> *mut c_void {
        self.0
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

/// The entry tensors, the memory each points at, and the operators' prepared calls.
pub struct Ops {
    pub(super) tensors: TensorTable,
    pub(super) memory: Vec<Mem>,
    /// Bytes of each entry (the plan's), what every binding must cover.
    pub(super) bytes: Vec<usize>,
    pub(super) calls: OpCalls,
    /// Per entry: the device its tensor is on.
    pub(super) devices: Vec<DLDevice>,
    /// Per entry in a texture slot: the image kernels take it as (a weight bound there is taken
    /// as an image of this form).
    pub(super) images: Vec<Option<ImageForm>>,
    /// The arena `Mem::Lent` entries point into while a run holds it.
    pub(super) lent: Option<Arc<Buffer>>,
    /// The `Mem::Lent` entries, found again after the bindings change (`None` until then), and
    /// room for their addresses: lending is on every pooled run's path.
    pub(super) lent_entries: Option<Vec<usize>>,
    pub(super) lent_data: DataPtrs,
}

/// Tensor data addresses, kept to be written back into the table.
#[derive(Clone, Default)]
pub struct DataPtrs(pub Vec<*mut c_void>);

// SAFETY: addresses of memory the bindings keep alive, or caller memory under the zero-copy
// promise; only written back into the table, under the executor's lock.
unsafe impl Send for DataPtrs {}

/// The entry tensors kernels receive, in one allocation whose address never changes. Operator
/// argument arrays point into it, so it is only reached through raw pointers: no reference to the
/// whole table exists while those pointers do.
pub struct TensorTable {
    ptr: NonNull<DLTensor>,
    len: usize,
}

// SAFETY: the tensors' shapes are the plan's (which outlives the executor's state) and their data
// memory the bindings keep alive or the caller's under the zero-copy promise; the executor's lock
// serialises every use.
unsafe impl Send for TensorTable {}

impl TensorTable {
    /// One tensor per entry of the plan's graph, with no data yet ([`Plan::entry_tensors`]: their
    /// shapes are the plan's, which outlives the executor's tensors).
    pub fn new(plan: &Plan) -> TensorTable {
        let tensors = plan.entry_tensors().into_boxed_slice();
        let len = tensors.len();
        TensorTable { ptr: NonNull::new(Box::into_raw(tensors).cast()).expect("a box is never null"), len }
    }

    /// The address of entry `eid`'s tensor.
    #[inline]
    fn at(&self, eid: usize) -> *mut DLTensor {
        assert!(eid < self.len, "entry {eid} of {}", self.len);
        // SAFETY: in bounds of the allocation.
        unsafe { self.ptr.as_ptr().add(eid) }
    }

    pub fn set_data(&mut self, eid: usize, data: *mut c_void) {
        // SAFETY: a live tensor of the table; `&mut self` means no kernel runs on it now.
        unsafe { (*self.at(eid)).data = data };
    }

    #[inline]
    pub fn data(&self, eid: usize) -> *mut c_void {
        // SAFETY: a live tensor of the table.
        unsafe { (*self.at(eid)).data }
    }

    /// Entry `eid`'s shape (how a copy addresses it in an image).
    pub fn shape(&self, eid: usize) -> &[i64] {
        // SAFETY: a live tensor of the table, whose shape is the plan's (`new`).
        unsafe {
            let t = &*self.at(eid);
            std::slice::from_raw_parts(t.shape, t.ndim as usize)
        }
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

/// The operators' prepared calls: argument arrays addressing the table's tensors.
pub struct OpCalls(Vec<OpCall>);

// SAFETY: the argument arrays address the table's tensors (see `TensorTable`); the executor's
// lock serialises every call.
unsafe impl Send for OpCalls {}

impl OpCalls {
    pub fn new(plan: &Plan, tensors: &TensorTable) -> OpCalls {
        OpCalls(
            plan.ops
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
                .collect(),
        )
    }

    pub fn set_folded(&mut self, folded: &[bool]) {
        for (call, &f) in self.0.iter_mut().zip(folded) {
            call.folded = f;
        }
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run(
        &mut self,
        tensors: &TensorTable,
        bytes: &[usize],
        plan: &Plan,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        for call in self.0[range].iter_mut().filter(|c| !c.folded) {
            run_call(tensors, bytes, call).map_err(|e| plan.operator_error(call.node, e))?;
        }
        Ok(())
    }

    /// Runs operator `i`, folded or not (folding runs the folded ones, once).
    pub fn run_one(&mut self, tensors: &TensorTable, bytes: &[usize], plan: &Plan, i: usize) -> Result<()> {
        let call = &mut self.0[i];
        run_call(tensors, bytes, call).map_err(|e| plan.operator_error(call.node, e))
    }
}

/// Copies into and out of entry memory, and views of it.
impl Ops {
    /// Copies `src`, already checked to have entry `eid`'s shape and element size, into it.
    pub fn write_from(&mut self, eid: usize, src: RawTensor<'_>) -> Result<()> {
        if let Some(to) = self.host_writable(eid) {
            // SAFETY: as below; `to` is the same memory, on the host.
            if unsafe { raw::copy_between_hosts(src, to, self.bytes[eid]) }? {
                return Ok(());
            }
        }
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
        if let Some(from) = self.host_readable(eid) {
            // SAFETY: as below; `from` is the same memory, on the host.
            if unsafe { raw::copy_from_host(from, dst, self.bytes[eid]) }? {
                return Ok(());
            }
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
            Mem::External(x) => Some(unsafe { NDArray::external(x.addr(), shape, dtype, self.devices[eid]) }),
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

/// Calls one operator on the tensors its argument arrays address. It first refuses to launch
/// an operator while one of its arguments has no memory: whatever left it so (a binding a device
/// refused, a bug), a kernel must never read or write through a null handle (a few loads per
/// argument: nothing next to a kernel call).
fn run_call(tensors: &TensorTable, bytes: &[usize], call: &mut OpCall) -> Result<()> {
    if matches!(call.call, Call::Nop) {
        return Ok(());
    }
    if let Some(k) = call.args.iter().position(|&eid| tensors.data(eid).is_null() && bytes[eid] > 0) {
        let eid = call.args[k];
        return Err(Error::internal(format!(
            "argument {k} (entry {eid}) has no memory bound: the operator was not launched"
        )));
    }
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
            }?;
            0
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
            func.call(&args)?;
            0
        }
    };
    if rc != 0 {
        return Err(Error::foreign(last_error::get()));
    }
    Ok(())
}
