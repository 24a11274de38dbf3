//! What every entry's tensor points at: the memory each is bound to ([`Mem`]), which the table
//! holds for as long as the tensor points there, so nothing a kernel reads or writes can be freed
//! under it; binding all or nothing, snapshots to put it back, the arena lent for a run. Safe code
//! deciding *which* memory each entry uses; the tensors themselves, the calls and the copies are
//! the unsafe room's (`kernels`).

#![forbid(unsafe_code)]

use super::kernels::{DataPtrs, External, OpCalls, TensorTable};
pub use super::kernels::{Mem, Ops};
use super::plan::Plan;
use crate::device::Place;
use crate::error::{Error, Result};
use crate::tensor::{Buffer, Weight};
use std::ffi::c_void;
use std::sync::Arc;

/// What every entry's tensor points at, and the memory that keeps it valid: taken to put the
/// tensors back exactly (a call that fails half-way, folding's scratch).
#[derive(Clone)]
pub struct Bindings {
    memory: Vec<Mem>,
    data: DataPtrs,
}

impl Bindings {
    /// The memory entries were bound to.
    pub fn memory(&self) -> &[Mem] {
        &self.memory
    }
}

impl Ops {
    pub fn new(plan: &Plan) -> Ops {
        let tensors = TensorTable::new(plan);
        let calls = OpCalls::new(plan, &tensors);
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
            lent_data: DataPtrs::default(),
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
            Mem::External(x) => Ok(x.addr()),
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
        self.lent_data.0.clear();
        if let Some(b) = &arena {
            for &eid in lent.iter() {
                let Mem::Lent(at) = memory[eid] else { unreachable!("a lent entry") };
                let p = b.data_at(at, self.bytes[eid]).map_err(|e| e.context(format!("binding entry {eid}")))?;
                self.lent_data.0.push(p);
            }
        } else {
            self.lent_data.0.resize(lent.len(), std::ptr::null_mut());
        }
        for (&eid, &p) in lent.iter().zip(&self.lent_data.0) {
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

    /// Points entry `eid`, bound to caller memory, at other caller memory: nothing else about
    /// it changes (the entries an arena is lent to stay those they were).
    pub fn rebind_external(&mut self, eid: usize, x: External) {
        debug_assert!(matches!(self.memory[eid], Mem::External(_)), "entry {eid} was bound to caller memory");
        self.tensors.set_data(eid, x.addr());
        self.memory[eid] = Mem::External(x);
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
        Bindings {
            memory: self.memory.clone(),
            data: DataPtrs((0..self.memory.len()).map(|e| self.tensors.data(e)).collect()),
        }
    }

    /// Points every entry back at what `snapshot` took (no device call: nothing can fail).
    pub fn restore(&mut self, bindings: Bindings) {
        for (eid, &p) in bindings.data.0.iter().enumerate() {
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
    #[inline]
    pub fn data(&self, eid: usize) -> *const u8 {
        self.tensors.data(eid).cast()
    }

    pub fn set_folded(&mut self, folded: &[bool]) {
        self.calls.set_folded(folded);
    }

    /// Runs operators `range` in order, but those folded (their results are weights already).
    pub fn run(&mut self, plan: &Plan, range: std::ops::Range<usize>) -> Result<()> {
        self.calls.run(&self.tensors, &self.bytes, plan, range)
    }

    /// Runs operator `i`, folded or not (folding runs the folded ones, once).
    pub fn run_one(&mut self, plan: &Plan, i: usize) -> Result<()> {
        self.calls.run_one(&self.tensors, &self.bytes, plan, i)
    }

    /// Entry `eid`'s first byte, when it is host memory that may be written (as [`Self::writable`]
    /// says): every request's input copy needs only that, not a `Place`, which with its shape is
    /// a hundred bytes to build and move.
    #[inline]
    pub(super) fn host_writable(&self, eid: usize) -> Option<*mut u8> {
        let (base, at, device) = match &self.memory[eid] {
            Mem::Buffer(b, at) => (b.as_ptr(), *at, b.device()),
            Mem::External(x) => (x.addr().cast::<u8>(), 0, self.devices[eid]),
            Mem::Lent(at) => {
                let b = self.lent.as_ref()?;
                (b.as_ptr(), *at, b.device())
            }
            Mem::Weight(_) | Mem::None => return None,
        };
        crate::device::is_host(device).then(|| base.wrapping_add(at))
    }

    /// Entry `eid`'s first byte, when it is host memory (as [`Self::readable`] says).
    #[inline]
    pub(super) fn host_readable(&self, eid: usize) -> Option<*const u8> {
        let (base, at, device) = match (&self.memory[eid], &self.lent) {
            (Mem::Buffer(b, at), _) | (Mem::Lent(at), Some(b)) => (b.as_ptr(), *at, b.device()),
            _ => (self.tensors.data(eid).cast::<u8>(), 0, self.devices[eid]),
        };
        crate::device::is_host(device).then(|| base.wrapping_add(at).cast_const())
    }

    /// Where entry `eid` may be written: memory of this runtime or the caller's, never a weight.
    #[inline]
    pub(super) fn writable(&self, eid: usize) -> Result<Place> {
        self.writable_bytes(eid).map(|p| p.with_shape(self.tensors.shape(eid)))
    }

    #[inline]
    fn writable_bytes(&self, eid: usize) -> Result<Place> {
        match &self.memory[eid] {
            Mem::Buffer(b, at) => Ok(b.place(*at)),
            Mem::External(x) => Ok(Place { data: x.addr(), offset: 0, device: self.devices[eid], shape: None }),
            Mem::Lent(at) => match &self.lent {
                Some(b) => Ok(b.place(*at)),
                None => Err(Error::internal(format!("entry {eid} has memory only while its executor runs"))),
            },
            Mem::Weight(_) => Err(Error::internal(format!("entry {eid} is a weight: it is never written in place"))),
            Mem::None => Err(Error::internal(format!("entry {eid} has no memory to write"))),
        }
    }

    /// Where entry `eid`'s bytes are, for reading.
    pub(super) fn readable(&self, eid: usize) -> Place {
        let place = match (&self.memory[eid], &self.lent) {
            (Mem::Buffer(b, at), _) | (Mem::Lent(at), Some(b)) => b.place(*at),
            _ => Place { data: self.tensors.data(eid), offset: 0, device: self.devices[eid], shape: None },
        };
        place.with_shape(self.tensors.shape(eid))
    }
}
