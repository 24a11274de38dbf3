//! Where each entry's bytes live in one executor, given which input slots hold weights.
//!
//! Operators that read nothing but weights (directly or through other such operators) are
//! *folded* (by default once the weights have a second holder, see [`Folding`]): run once, when
//! the weights are known, and their results kept as derived weights
//! (only those an operator that still runs, or a graph output, reads; a debug executor keeps all).
//! Every other operator output is placed in one activation arena by liveness: two values share
//! bytes only when no operator needs both, so the arena approaches the largest sum of values live
//! at any one time, rather than the graph's storage ids' sum. Graph outputs have a region of their
//! own that no layout moves. Values in texture scopes are images, which no arena can hold: each
//! texture storage id is an image of its own (as upstream's pool entries), and a folded texture
//! result is a derived weight that is an image.

#![forbid(unsafe_code)]

use super::plan::{Part, Plan};
use crate::error::{Error, Result};
use crate::memory_plan::SlotRole;
use crate::tensor::Weight;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// Its storage slot: graph inputs (weights, data) and `__nop` aliases of them.
    Slot,
    /// This offset of the activation arena, written by every run.
    Arena(usize),
    /// This offset of the output region (`Plan::output_offsets`), written by every run; never
    /// moves, whatever the layout of the rest.
    Output(usize),
    /// A derived weight: computed when the weights were bound, read-only since.
    Derived,
    /// Computed while folding only to derive others; not kept.
    Transient,
}

/// Which operators reading only weights run once, at load, rather than at every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folding {
    /// None: every operator runs at every run, as upstream.
    Off,
    /// Those whose weights have another holder (an executor sharing them, a factory, a linked
    /// library) and are not mapped from a file. Folding keeps the results next to the weights:
    /// paid once for all holders it saves memory against upstream (which holds a copy per
    /// executor), but a lone executor would hold more than upstream's; it runs them every run, as
    /// upstream, until a second holder comes. Mapped weights are there to be shared across
    /// processes through the page cache and to load in no time; their derived results would be
    /// memory of each process. On a device the other holder must be an executor of the same
    /// model (see `peers`).
    Shared,
    /// All of them (`set_fold_weights(1)`: a lone executor's speed, for the memory of both).
    All,
}

/// How long `Folding::Shared` keeps a weight folded after its other holders go: the process
/// default, `TVM_RT_FOLD_KEEP_MS` (milliseconds; 2000 unless set). Sharers that come and go
/// within it (one per request, say) find the derived weights still there.
pub fn keep_folded_default() -> std::time::Duration {
    static DEFAULT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let ms = std::env::var("TVM_RT_FOLD_KEEP_MS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(2000);
        std::time::Duration::from_millis(ms)
    })
}

impl Folding {
    /// The process default: `Shared`, or `TVM_RT_FOLD_WEIGHTS=0` (off) or `=1` (all).
    pub fn by_default() -> Folding {
        static DEFAULT: std::sync::OnceLock<Folding> = std::sync::OnceLock::new();
        *DEFAULT.get_or_init(|| match std::env::var("TVM_RT_FOLD_WEIGHTS").as_deref().map(str::trim) {
            Ok("0") => Folding::Off,
            Ok("1") => Folding::All,
            _ => Folding::Shared,
        })
    }

    /// Whether to fold from `weight`, which has other holders than this executor if `shared`.
    pub(crate) fn folds(self, weight: &Weight, shared: bool) -> bool {
        match self {
            Folding::Off => false,
            Folding::Shared => shared && !weight.is_mapped(),
            Folding::All => true,
        }
    }
}

/// What decides a layout besides the plan.
pub struct Facts<'a> {
    /// Per storage slot: holds a weight that cannot change (bound read-only, not redirected) and
    /// may be folded.
    pub constant_slot: &'a [bool],
    /// Per storage slot: holds a weight (folded from or not): not part of the liveness bound.
    pub weight_slot: &'a [bool],
    /// Per entry: redirected to caller memory (`set_output_zero_copy`), so written by every run.
    pub redirected: &'a [bool],
    /// Fold weight-only operators.
    pub fold: bool,
    /// Keep every folded result, not only those read later (debug executors show each node's).
    pub keep_all: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Per entry.
    pub homes: Vec<Home>,
    /// Per operator: folded (never run by `run`).
    pub folded: Vec<bool>,
    /// Bytes of the activation arena, all parts.
    pub arena_bytes: usize,
    /// The arena's parts, one per device its values are on (one part on a single device).
    pub arena_parts: Vec<Part>,
    /// The liveness bound: graph inputs that are not weights and the output region, plus the
    /// largest sum of arena
    /// values live at one operator. No layout of these values can be smaller.
    pub bound: usize,
}

impl Layout {
    pub fn new(plan: &Plan, f: &Facts<'_>) -> Result<Layout> {
        let g = &plan.graph;
        let slot = |e: usize| &plan.storage.slots[g.entries[e].storage_id];
        let in_slot: Vec<bool> = (0..g.num_entries()).map(|e| slot(e).role == SlotRole::Input).collect();
        // Values in slots of their own (textures: an image each), outside the arena.
        let own_memory: Vec<bool> = (0..g.num_entries()).map(|e| slot(e).has_own_memory()).collect();
        let mut folded = vec![false; plan.ops.len()];
        if f.fold && plan.liveness_layout {
            let mut constant: Vec<bool> =
                (0..g.num_entries()).map(|e| in_slot[e] && f.constant_slot[g.entries[e].storage_id]).collect();
            for (i, op) in plan.ops.iter().enumerate() {
                // An operator without inputs may have state of its own (a random generator): it runs.
                // One writing a graph output runs too: the output keeps its home and every run
                // writes it, as upstream's.
                let foldable = !op.inputs().is_empty()
                    && op.inputs().iter().all(|&e| constant[e])
                    && op
                        .outputs()
                        .iter()
                        .all(|&e| !f.redirected[e] && plan.output_offsets[plan.alias_root[e]].is_none());
                if foldable {
                    folded[i] = true;
                    op.outputs().iter().for_each(|&e| constant[e] = true);
                }
            }
        }
        let inputs: usize = plan
            .storage
            .slots
            .iter()
            .zip(f.weight_slot)
            .filter(|(s, &weight)| s.role == SlotRole::Input && !weight)
            .map(|(s, _)| s.bytes)
            .sum();
        // Results of folded operators (in texture slots too: a derived weight is an image then).
        let root = &plan.alias_root;
        let mut derived = vec![false; g.num_entries()];
        for (op, _) in plan.ops.iter().zip(&folded).filter(|(_, &f)| f) {
            op.outputs().iter().for_each(|&e| derived[root[e]] = true);
        }
        // Texture slots holding a value computed at every run: an image each, outside the arena.
        let mut texture_used = vec![false; plan.storage.slots.len()];
        for e in (0..g.num_entries()).filter(|&e| own_memory[e] && !in_slot[e] && !derived[root[e]]) {
            texture_used[g.entries[e].storage_id] = true;
        }
        let textures: usize =
            plan.storage.slots.iter().zip(&texture_used).filter(|(_, &used)| used).map(|(s, _)| s.bytes).sum();

        let values = Values::new(plan, &own_memory, &folded);
        let outputs: usize =
            plan.output_offsets.iter().zip(&plan.root_bytes).filter(|(at, _)| at.is_some()).map(|(_, &b)| b).sum();
        let bound = inputs + textures + outputs + values.peak();
        if !plan.liveness_layout {
            let (offsets, arena_bytes) = plan.storage.arena_layout(plan.align)?;
            let homes = (0..g.num_entries())
                .map(|e| match offsets[g.entries[e].storage_id] {
                    Some(at) => Home::Arena(at),
                    None => Home::Slot,
                })
                .collect();
            let arena_parts = vec![Part { device: plan.device, base: 0, len: arena_bytes }];
            return Ok(Layout { homes, folded, arena_bytes, arena_parts, bound });
        }

        // Folded results read by something that runs (or shown to the caller) are kept.
        let mut keep = vec![f.keep_all; g.num_entries()];
        for (i, op) in plan.ops.iter().enumerate() {
            if !folded[i] {
                op.inputs().iter().for_each(|&e| keep[root[e]] = true);
            }
        }
        plan.output_entries.iter().for_each(|&e| keep[root[e]] = true);

        let (offsets, arena_parts) = values.place(plan)?;
        let arena_bytes = arena_parts.iter().map(|p| p.len).sum();
        let homes = (0..g.num_entries())
            .map(|e| {
                let r = root[e];
                if in_slot[e] || (own_memory[e] && !derived[r]) {
                    Home::Slot
                } else if let Some(at) = plan.output_offsets[r] {
                    Home::Output(at)
                } else if let Some(at) = offsets[r] {
                    Home::Arena(at)
                } else if keep[r] {
                    Home::Derived
                } else {
                    Home::Transient
                }
            })
            .collect();
        Ok(Layout { homes, folded, arena_bytes, arena_parts, bound })
    }

    pub fn folds_anything(&self) -> bool {
        self.folded.iter().any(|&f| f)
    }

    /// Checks the layout's promises (for tests and the fuzzers): every arena value aligned and
    /// inside the arena, no two values an operator needs at once sharing a byte, the arena no
    /// smaller than the bound, and nothing an operator that runs reads left unkept.
    pub fn verify(&self, plan: &Plan) -> std::result::Result<(), String> {
        let g = &plan.graph;
        let own_memory: Vec<bool> =
            (0..g.num_entries()).map(|e| plan.storage.slots[g.entries[e].storage_id].has_own_memory()).collect();
        for (e, home) in self.homes.iter().enumerate() {
            let (at, region, what) = match *home {
                Home::Arena(at) => (at, self.arena_bytes, "arena"),
                Home::Output(at) => (at, plan.output_region_bytes, "output region"),
                _ => continue,
            };
            if at % plan.align != 0 || at + plan.entry_bytes[e] > region {
                return Err(format!("entry {e} at {at} (+{}) in an {what} of {region}", plan.entry_bytes[e]));
            }
        }
        for (i, op) in plan.ops.iter().enumerate() {
            if !self.folded[i] && op.args.iter().any(|&e| self.homes[e] == Home::Transient) {
                return Err(format!("operator {i} runs on a folded result that was not kept"));
            }
        }
        if !plan.liveness_layout {
            return Ok(());
        }
        let values = Values::new(plan, &own_memory, &self.folded);
        if self.arena_bytes < values.peak() {
            return Err(format!("arena of {} below the peak of {}", self.arena_bytes, values.peak()));
        }
        let at = |r: usize| match self.homes[r] {
            Home::Arena(at) => Ok(at),
            other => Err(format!("value {r} is {other:?}, not in the arena")),
        };
        for (k, a) in values.list.iter().enumerate() {
            for b in &values.list[k + 1..] {
                let (sa, sb) = (at(a.root)?, at(b.root)?);
                if a.live_with(b) && sa < sb + b.bytes && sb < sa + a.bytes {
                    return Err(format!("values {} and {} overlap while both are live", a.root, b.root));
                }
            }
        }
        Ok(())
    }
}

/// A value an operator writes during a run (an alias root) and the operators that need it.
#[derive(Debug, Clone, Copy)]
struct Value {
    root: usize,
    bytes: usize,
    /// First and last operator needing it, inclusive (the last can be past every operator: the
    /// caller reads graph outputs after the run).
    first: usize,
    last: usize,
}

impl Value {
    fn live_with(&self, other: &Value) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// The values of a run.
struct Values {
    list: Vec<Value>,
    num_entries: usize,
}

impl Values {
    fn new(plan: &Plan, own_memory: &[bool], folded: &[bool]) -> Values {
        let g = &plan.graph;
        let root = &plan.alias_root;
        let n = g.num_entries();
        // Alias roots written by an operator that runs: (first, last) operator needing them.
        let mut span: Vec<Option<(usize, usize)>> = vec![None; n];
        for (i, op) in plan.ops.iter().enumerate() {
            if folded[i] {
                continue;
            }
            for &e in op.outputs() {
                let r = root[e];
                if !own_memory[r] && plan.output_offsets[r].is_none() && span[r].is_none() {
                    span[r] = Some((i, i));
                }
            }
            for &e in op.inputs() {
                if let Some((_, last)) = &mut span[root[e]] {
                    *last = (*last).max(i);
                }
            }
        }
        // Outputs in the arena (layouts by storage id; others have their own region) are read by
        // the caller between runs, through views too: they keep their bytes to themselves for the
        // whole run, so a view shows the last result until the operator that writes it runs again.
        for &e in &plan.output_entries {
            if let Some(s) = &mut span[root[e]] {
                *s = (0, plan.ops.len());
            }
        }
        let list = span
            .iter()
            .enumerate()
            .filter_map(|(r, s)| s.map(|(first, last)| Value { root: r, bytes: plan.root_bytes[r], first, last }))
            .collect();
        Values { list, num_entries: n }
    }

    /// The largest sum of values live at one operator.
    fn peak(&self) -> usize {
        let steps = self.list.iter().map(|v| v.last + 2).max().unwrap_or(0);
        let mut delta = vec![0isize; steps];
        for v in &self.list {
            delta[v.first] += v.bytes as isize;
            delta[v.last + 1] -= v.bytes as isize;
        }
        let mut live = 0isize;
        delta
            .iter()
            .map(|d| {
                live += d;
                live
            })
            .max()
            .unwrap_or(0) as usize
    }

    /// Offsets (per root entry) in the arena, and its parts: the values of each device in a part
    /// of their own (one per device the plan uses, in the plan's order), laid out by `place_group`.
    fn place(&self, plan: &Plan) -> Result<(Vec<Option<usize>>, Vec<Part>)> {
        let mut offsets = vec![None; self.num_entries];
        let mut parts = Vec::new();
        let mut base = 0usize;
        for (k, &device) in plan.devices.iter().enumerate() {
            let group: Vec<&Value> = self.list.iter().filter(|v| plan.entry_device[v.root] == device).collect();
            if k > 0 && group.is_empty() {
                continue;
            }
            let len = place_group(group, plan.align, base, &mut offsets)?;
            parts.push(Part { device, base, len });
            base = base.checked_add(len).ok_or_else(too_big)?;
        }
        Ok((offsets, parts))
    }
}

fn too_big() -> Error {
    Error::value("the activations of this graph add up to more memory than can be addressed")
}

/// Places `values` from `base`, largest first, each at the lowest offset free of every value live
/// with it; returns the bytes they span.
fn place_group(mut order: Vec<&Value>, align: usize, base: usize, offsets: &mut [Option<usize>]) -> Result<usize> {
    order.sort_by_key(|v| (std::cmp::Reverse(v.bytes), v.first));
    // Placed so far: (start, end, value).
    let mut placed: Vec<(usize, usize, &Value)> = Vec::with_capacity(order.len());
    let mut busy = Vec::new();
    let mut arena = 0usize;
    for v in order {
        let size = v.bytes.checked_next_multiple_of(align).ok_or_else(too_big)?.max(align);
        busy.clear();
        busy.extend(placed.iter().filter(|p| p.2.live_with(v)).map(|p| (p.0, p.1)));
        busy.sort_unstable();
        let mut at = 0usize;
        for &(start, end) in &busy {
            if at.checked_add(size).ok_or_else(too_big)? <= start {
                break;
            }
            at = at.max(end);
        }
        let end = at.checked_add(size).ok_or_else(too_big)?;
        placed.push((at, end, v));
        offsets[v.root] = Some(base.checked_add(at).ok_or_else(too_big)?);
        arena = arena.max(end);
    }
    Ok(arena)
}
