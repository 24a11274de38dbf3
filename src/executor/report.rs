//! What an executor holds, for reports (`get_memory_usage`, `tvmrt inspect`): bytes by kind, and
//! what each storage slot of the graph's plan holds.

#![forbid(unsafe_code)]

use super::instance::SlotMemory;
use super::layout::Home;
use super::pool::PoolUsage;
use super::GraphExecutor;
use crate::dlpack::DLDevice;
use crate::memory_plan;

/// What a storage slot of the graph's plan holds in one executor (`tvmrt inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotUse {
    /// An input the caller sets (counted as activations).
    Input,
    /// An input holding a parameter.
    Weight,
    /// Operator results derived from weights only, folded: kept as derived weights or not at all.
    Derived,
    /// Operator results of every run: in the activation arena or the output region.
    Activation,
    /// Some of each (the graph's plan reuses the slot for both).
    Both,
}

/// What an executor holds, in bytes (`get_memory_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Weights only this executor holds (loaded into it, or left to it by the others).
    pub weights_owned: usize,
    /// Weights other executors or a factory hold too.
    pub weights_shared: usize,
    /// Input slots used in place from a mapped params file (`load_params_from_file`).
    pub weights_mapped: usize,
    /// Slots written by operators, of this executor's own.
    pub activations: usize,
    /// The arenas of the pool this executor draws its activations from (`share_activations`,
    /// `join_arena_pool`, the default pool): the same pool for all its members, counted once.
    pub activations_shared: usize,
    /// Weights derived from weights by the operators folded at load (held once per process for
    /// each distinct content, counted in every executor that uses them).
    pub weights_derived: usize,
    /// The activation arena this executor's layout needs (in `activations`, or in each arena of
    /// the pool of `activations_shared`).
    pub activation_arena: usize,
    /// The liveness bound of what the activation memory holds: inputs that are not weights plus
    /// the largest sum of operator outputs live at one time. No layout can be smaller.
    pub activation_bound: usize,
    /// Operators folded (run once for the weights, skipped by `run`), of all operators.
    pub ops_folded: usize,
    pub ops_total: usize,
    /// Device copies of weights this executor binds (a factory's or a mapped file's weights used on
    /// a device, a weight taken as an image by a texture slot: one copy per device and form,
    /// shared by every executor there).
    pub weights_mirrored: usize,
    /// Where the memory above is (except host weights that are mirrored).
    pub device: DLDevice,
    /// The pool this executor draws its activations from.
    pub pool: Option<PoolUsage>,
}

impl GraphExecutor {
    /// What each storage slot of the graph's plan holds in this executor, as of the last
    /// preparation, in the memory report's words.
    pub fn slot_uses(&self) -> Vec<SlotUse> {
        let st = self.lock();
        let plan = &self.plan;
        let params = st.param_slots();
        let homes = &st.layout().homes;
        (0..plan.storage.slots.len())
            .map(|sid| {
                let entries = plan.slot_entries(sid).iter().copied();
                if plan.storage.slots[sid].role == memory_plan::SlotRole::Input {
                    if params[sid] {
                        SlotUse::Weight
                    } else {
                        SlotUse::Input
                    }
                } else {
                    let (derived, run): (Vec<usize>, Vec<usize>) =
                        entries.partition(|&e| matches!(homes.get(e), Some(Home::Derived | Home::Transient)));
                    match (derived.is_empty(), run.is_empty()) {
                        (false, true) => SlotUse::Derived,
                        (false, false) => SlotUse::Both,
                        _ => SlotUse::Activation,
                    }
                }
            })
            .collect()
    }

    /// Bytes this executor holds, by kind, as of its last preparation (loading, sharing, running).
    /// Input slots count as weights once they are known as parameters (loaded, shared, or bound by
    /// a factory); other inputs count as activations.
    pub fn memory_usage(&self) -> MemoryUsage {
        let st = self.lock();
        let plan = &self.plan;
        let mut m = MemoryUsage {
            weights_owned: 0,
            weights_shared: 0,
            weights_mapped: 0,
            activations: 0,
            activations_shared: 0,
            weights_derived: 0,
            activation_arena: 0,
            activation_bound: 0,
            ops_folded: 0,
            ops_total: 0,
            weights_mirrored: 0,
            device: plan.device,
            pool: st.pool().map(|p| p.usage()),
        };
        for (sid, is_weight) in st.param_slots().into_iter().enumerate() {
            match st.slot(sid) {
                SlotMemory::Unbound => {}
                SlotMemory::Weight(w) if w.is_mapped() => {
                    m.weights_mapped += w.len();
                    m.weights_mirrored += w.mirror_bytes();
                }
                // Loaded by this executor and held by nobody else: its own.
                SlotMemory::Weight(w) if st.weight_is_own(sid) => {
                    m.weights_owned += w.len();
                    m.weights_mirrored += w.mirror_bytes();
                }
                SlotMemory::Weight(w) => {
                    m.weights_shared += w.len();
                    m.weights_mirrored += w.mirror_bytes();
                }
                SlotMemory::Owned(b) if is_weight => m.weights_owned += b.len(),
                SlotMemory::Owned(b) => m.activations += b.len(),
            }
        }
        m.activations += st.own_activation_bytes();
        m.activations_shared = m.pool.map_or(0, |p| p.bytes());
        m.weights_derived = st.derived_bytes();
        let layout = st.layout();
        m.activation_arena = layout.arena_bytes;
        m.activation_bound = layout.bound;
        m.ops_folded = layout.folded.iter().filter(|&&f| f).count();
        m.ops_total = plan.ops.len();
        m
    }

    /// What became of the derived weights of the last prepared params file mapped (`tvmrt
    /// prepare-params`): "used", or "not used: " and why; `None` when none was mapped.
    pub fn prepared_params_use(&self) -> Option<String> {
        self.lock().prepared.clone()
    }
}
