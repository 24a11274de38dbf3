//! Where the values of a run live: the activation arena (this executor's own, or one leased
//! from a pool for each run) and the output region, each a buffer per device of the layout's
//! parts.

#![forbid(unsafe_code)]

use super::Instance;
use crate::error::{Error, Result};
use crate::executor::bindings::Mem;
use crate::executor::layout::Layout;
use crate::executor::plan::Part;
use crate::executor::pool::{ArenaPool, Lease, Member};
use crate::tensor::Buffer;
use std::sync::Arc;

/// Where operator outputs that change every run live.
#[derive(Clone, Default)]
pub(super) enum Activations {
    /// Not laid out yet.
    #[default]
    None,
    /// This executor's own arena: a buffer per part (per device).
    Own(Parts),
    /// Arenas of a pool (one device), one leased for each run (see `Ops::lend`).
    Pooled(Arc<Member>),
}

impl Activations {
    pub(super) fn at(&self, offset: usize) -> Mem {
        match self {
            Activations::None => Mem::None,
            Activations::Own(parts) => parts.at(offset),
            Activations::Pooled(_) => Mem::Lent(offset),
        }
    }

    /// The buffers this holds.
    pub(super) fn buffers(&self) -> Vec<&Arc<Buffer>> {
        match self {
            Activations::None => Vec::new(),
            Activations::Own(parts) => parts.buffers(),
            Activations::Pooled(_) => Vec::new(),
        }
    }
}

/// A region of the layout (the activation arena, the output region) in memory: one buffer per
/// part, each on its part's device, at the part's base offset in the region.
#[derive(Clone, Default)]
pub(super) struct Parts(Vec<(Part, Arc<Buffer>)>);

impl Parts {
    pub(super) fn new(parts: &[Part]) -> Result<Parts> {
        parts.iter().map(|&p| Ok((p, Arc::new(Buffer::zeroed_on(p.device, p.len)?)))).collect::<Result<_>>().map(Parts)
    }

    /// Whether this memory has exactly these parts.
    fn fits(&self, parts: &[Part]) -> bool {
        self.0.len() == parts.len() && self.0.iter().zip(parts).all(|((a, _), b)| a == b)
    }

    /// The memory at `offset` of the region.
    pub(super) fn at(&self, offset: usize) -> Mem {
        self.0
            .iter()
            .find(|(p, _)| (p.base..p.base + p.len).contains(&offset))
            .map_or(Mem::None, |(p, b)| Mem::Buffer(b.clone(), offset - p.base))
    }

    pub(super) fn bytes(&self) -> usize {
        self.0.iter().map(|(p, _)| p.len).sum()
    }

    pub(super) fn buffers(&self) -> Vec<&Arc<Buffer>> {
        self.0.iter().map(|(_, b)| b).collect()
    }
}

impl Instance {
    /// The output region (allocated once) and the activation memory `layout` needs, without
    /// changing anything: the caller commits them.
    pub(super) fn memory_for(&self, layout: &Layout) -> Result<(Option<Parts>, Activations)> {
        let outputs = match &self.outputs {
            None if self.plan.output_region_bytes > 0 => Some(Parts::new(&self.plan.output_parts)?),
            other => other.clone(),
        };
        Ok((outputs, self.activations_for(layout)?))
    }

    /// Activation memory for `layout`: this executor's own arena (new whenever its parts change,
    /// so a smaller layout returns memory), or its place in a pool (which learns the layout's size
    /// once it is committed: see [`Instance::pool_need`]).
    fn activations_for(&self, layout: &Layout) -> Result<Activations> {
        Ok(match &self.activations {
            Activations::Own(parts) if parts.fits(&layout.arena_parts) => Activations::Own(parts.clone()),
            Activations::None | Activations::Own(_) => Activations::Own(Parts::new(&layout.arena_parts)?),
            pooled @ Activations::Pooled(_) => pooled.clone(),
        })
    }

    /// Tells the pool this executor is in what its committed layout needs.
    pub(super) fn pool_need(&self) {
        if let Activations::Pooled(member) = &self.activations {
            member.need(self.layout.arena_bytes);
        }
    }

    /// Bytes of this executor's own activation memory: its arena (unless pooled) and its outputs.
    pub fn own_activation_bytes(&self) -> usize {
        let arena = match &self.activations {
            Activations::Own(parts) => parts.bytes(),
            _ => 0,
        };
        arena + self.outputs.as_ref().map_or(0, Parts::bytes)
    }

    /// Draws this executor's activations from `pool` from its next run on (its own arena is
    /// released).
    pub fn join_pool(&mut self, pool: &Arc<ArenaPool>) -> Result<()> {
        if self.plan.devices.len() > 1 {
            return Err(Error::value(format!(
                "an executor on several devices ({:?}) keeps its own activation arenas: a pool's arenas are on one device",
                self.plan.devices
            )));
        }
        if pool.device() != self.plan.device {
            return Err(Error::value(format!(
                "the pool's arenas are on {:?} and this executor runs on {:?}: only executors on the pool's device can draw from it",
                pool.device(),
                self.plan.device
            )));
        }
        if !self.plan.liveness_layout {
            return Err(Error::value(
                "this graph's storage plan puts inputs or outputs where operator results go (laid out by storage id): its arena holds state between runs, so it keeps its own",
            ));
        }
        if self.keep_derived {
            return Err(Error::value(
                "a debug executor keeps its own activation arena: it reads any node's output between calls",
            ));
        }
        if self.pool().is_some_and(|p| Arc::ptr_eq(p, pool)) {
            return Ok(());
        }
        // In the pool before laying out, so a layout made now allocates no arena of its own.
        let member = Arc::new(pool.join(self.layout.arena_bytes));
        let old = std::mem::replace(&mut self.activations, Activations::Pooled(member));
        let joined = self.prepare().and_then(|_| {
            self.pool_need();
            self.refresh()
        });
        joined.inspect_err(|_| {
            self.activations = old;
            // Laid out again at the next call, with the memory put back (a transaction around
            // this puts the layout back too).
            self.stale = true;
        })
    }

    /// The pool this executor draws its activations from, if any.
    pub fn pool(&self) -> Option<&Arc<ArenaPool>> {
        match &self.activations {
            Activations::Pooled(member) => Some(member.pool()),
            _ => None,
        }
    }

    /// Leases an arena for one run and binds the activations into it, all or nothing; `None` for
    /// an executor with its own arena.
    pub(super) fn lease_arena(&mut self) -> Result<Option<Lease>> {
        let Activations::Pooled(member) = &self.activations else {
            return Ok(None);
        };
        let lease = member.lease()?;
        self.ops.lend(Some(lease.buffer().clone()))?;
        Ok(Some(lease))
    }

    /// Takes the run's arena back from the activations, so that nothing of this executor's
    /// points into it once it is given back.
    pub(super) fn end_lease(&mut self) {
        self.ops.lend(None).expect("taking an arena back needs no device");
    }
}
