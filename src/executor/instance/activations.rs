//! Where the values of a run live: the activation arena (this executor's own, or one shared
//! with executors that run in turn) and the output region, each a buffer per device of the
//! layout's parts.

#![forbid(unsafe_code)]

use super::Instance;
use crate::error::{Error, Result};
use crate::executor::arena::Arena;
use crate::executor::kernels::Mem;
use crate::executor::layout::Layout;
use crate::executor::plan::Part;
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
    /// An arena shared with executors that run in turn (one device), and the generation of it bound.
    Shared { arena: Arc<Arena>, buffer: Arc<Buffer>, generation: u64 },
}

impl Activations {
    pub(super) fn at(&self, offset: usize) -> Mem {
        match self {
            Activations::None => Mem::None,
            Activations::Own(parts) => parts.at(offset),
            Activations::Shared { buffer, .. } => Mem::Buffer(buffer.clone(), offset),
        }
    }

    /// The buffers this holds.
    pub(super) fn buffers(&self) -> Vec<&Arc<Buffer>> {
        match self {
            Activations::None => Vec::new(),
            Activations::Own(parts) => parts.buffers(),
            Activations::Shared { buffer, .. } => vec![buffer],
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

    /// Bytes of this executor's own activation memory: its arena (unless shared) and its outputs.
    pub fn own_activation_bytes(&self) -> usize {
        let arena = match &self.activations {
            Activations::Own(parts) => parts.bytes(),
            _ => 0,
        };
        arena + self.outputs.as_ref().map_or(0, Parts::bytes)
    }

    /// Moves this executor's activations into `arena` (its own are released).
    pub fn join_arena(&mut self, arena: Arc<Arena>) -> Result<()> {
        if arena.device() != self.plan.device || self.plan.devices.len() > 1 {
            return Err(Error::value("only executors on one and the same device can share an activation arena"));
        }
        self.prepare()?;
        arena.reserve(self.layout.arena_bytes)?;
        let (buffer, generation) = arena.current();
        let old = std::mem::replace(&mut self.activations, Activations::Shared { arena, buffer, generation });
        self.refresh().inspect_err(|_| self.activations = old)
    }

    pub fn arena(&self) -> Option<&Arc<Arena>> {
        match &self.activations {
            Activations::Shared { arena, .. } => Some(arena),
            _ => None,
        }
    }

    /// Binds the shared arena's current buffer if another holder grew it since this executor
    /// last ran.
    pub(super) fn follow_shared_arena(&mut self) -> Result<()> {
        let Activations::Shared { arena, generation, .. } = &self.activations else {
            return Ok(());
        };
        let (buffer, g) = arena.current();
        if g == *generation {
            return Ok(());
        }
        let shared = Activations::Shared { arena: arena.clone(), buffer, generation: g };
        let old = std::mem::replace(&mut self.activations, shared);
        self.refresh().inspect_err(|_| self.activations = old)
    }
}
