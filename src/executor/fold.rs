//! Folding: the operators a layout folds (they read only weights) run once, when the weights are
//! bound, into memory of their own; the results the layout keeps become derived weights, one copy
//! per distinct content in the process (`weight::intern`).

#![forbid(unsafe_code)]

use super::bindings::{Mem, Ops};
use super::layout::{Home, Layout};
use super::plan::{OpKind, Plan};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::{weight, Buffer, Weight};
use std::sync::{Arc, Mutex, Weak};

/// Per slot, the weight folding reads (`None`: not a constant).
pub type Sources = [Option<Weak<Weight>>];

/// What one executor folded: executors of the same model binding the same weights with the same
/// layout (K executors sharing one model's weights) take its results instead of running the
/// operators again. Weak throughout: the cache keeps nothing alive.
struct Folded {
    plan: Weak<Plan>,
    folded: Vec<bool>,
    homes: Vec<Home>,
    sources: Vec<Option<Weak<Weight>>>,
    derived: Vec<Option<Weak<Weight>>>,
}

static FOLDED: Mutex<Vec<Folded>> = Mutex::new(Vec::new());

/// Whether two source lists name the same weights.
pub fn same_sources(a: &Sources, b: &Sources) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => a.ptr_eq(b),
            (None, None) => true,
            _ => false,
        })
}

/// Whether the operators `folded` marks compute the same in both plans: the same graph, each entry
/// on the same device, each operator calling the same function (executors made one by one from the same model have
/// plans of their own).
fn same_model(a: &Plan, b: &Plan, folded: &[bool]) -> bool {
    if std::ptr::eq(a, b) {
        return true;
    }
    let same_call = |x: &OpKind, y: &OpKind| match (x, y) {
        (OpKind::Nop, OpKind::Nop) | (OpKind::Copy, OpKind::Copy) => true,
        (OpKind::Kernel { raw: Some(f), .. }, OpKind::Kernel { raw: Some(g), .. }) => *f as usize == *g as usize,
        (OpKind::Kernel { func: f, raw: None }, OpKind::Kernel { func: g, raw: None }) => ObjRef::ptr_eq(f, g),
        _ => false,
    };
    a.entry_device == b.entry_device
        && a.graph == b.graph
        && a.ops.iter().zip(&b.ops).zip(folded).all(|((x, y), &f)| !f || same_call(&x.kind, &y.kind))
}

/// The results an executor of the same model already derived from exactly these weights with
/// this layout, when they are all still alive.
pub fn cached(plan: &Arc<Plan>, layout: &Layout, sources: &Sources) -> Option<Vec<Option<Arc<Weight>>>> {
    let cache = FOLDED.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .iter()
        .filter(|f| {
            f.folded == layout.folded
                && f.plan.upgrade().is_some_and(|p| same_model(&p, plan, &layout.folded))
                && f.homes == layout.homes
                && same_sources(&f.sources, sources)
        })
        .find_map(|f| {
            // Every result alive, or no hit (`None` inside: a root that keeps nothing).
            f.derived
                .iter()
                .map(|d| match d {
                    None => Some(None),
                    Some(w) => w.upgrade().map(Some),
                })
                .collect::<Option<Vec<_>>>()
        })
}

/// Records what folding `plan` with `layout` on `sources` derived, for [`cached`].
pub fn remember(plan: &Arc<Plan>, layout: &Layout, sources: &Sources, derived: &[Option<Arc<Weight>>]) {
    let mut cache = FOLDED.lock().unwrap_or_else(|e| e.into_inner());
    // Entries whose plan or results are gone can never be used again.
    cache.retain(|f| f.plan.strong_count() > 0 && f.derived.iter().flatten().all(|d| d.strong_count() > 0));
    cache.push(Folded {
        plan: Arc::downgrade(plan),
        folded: layout.folded.clone(),
        homes: layout.homes.clone(),
        sources: sources.to_vec(),
        derived: derived.iter().map(|d| d.as_ref().map(Arc::downgrade)).collect(),
    });
}

/// Runs the operators `layout` folds on the weights `ops` is bound to; returns, per alias root,
/// the derived weight of each result the layout keeps. Whether it succeeds or not, every entry
/// points where it did before: binding the layout's homes is the caller's next step, which may
/// still be refused.
pub fn fold(plan: &Plan, ops: &mut Ops, layout: &Layout) -> Result<Vec<Option<Arc<Weight>>>> {
    let before = ops.snapshot();
    let scratch = run_folded(plan, ops, layout);
    // Derived weights are read by executors on other threads' streams: the device finishes
    // computing them before they are handed out.
    for &d in plan.devices.iter().filter(|&&d| !crate::device::is_host(d)) {
        crate::device::api_of(d)?.sync(d.device_id)?;
    }
    // The results are weights from here on: no tensor points at the scratch any more.
    ops.restore(before);
    let mut derived = vec![None; plan.graph.num_entries()];
    for (r, b) in scratch?.into_iter().enumerate() {
        let Some(b) = b else { continue };
        if layout.homes[r] == Home::Derived {
            let b = Arc::try_unwrap(b).map_err(|_| Error::internal("a folded result is still in use"))?;
            derived[r] = Some(weight::intern(Weight::freeze(b)));
        }
    }
    Ok(derived)
}

/// Memory for the result of alias root `r`: an image of the entry's own extent in a texture slot
/// (kernels write it as one, and read it as one where it is a weight), else plain bytes.
fn result_memory(plan: &Plan, r: usize) -> Result<Buffer> {
    let e = &plan.graph.entries[r];
    match plan.image_form(e.storage_id) {
        Some(f) => Buffer::texture_on(plan.entry_device[r], f.texture, &e.shape, f.dtype),
        None => Buffer::zeroed_on(plan.entry_device[r], plan.root_bytes[r]),
    }
}

/// Runs the folded operators into scratch memory of their own; returns the scratch per alias
/// root (results kept only to derive others already dropped).
fn run_folded(plan: &Plan, ops: &mut Ops, layout: &Layout) -> Result<Vec<Option<Arc<Buffer>>>> {
    let n = plan.graph.num_entries();
    let root = &plan.alias_root;
    let mut scratch: Vec<Option<Arc<Buffer>>> = vec![None; n];
    // The last folded operator reading each result: results kept only to derive others are freed
    // after it.
    let mut last_read = vec![None; n];
    for (i, op) in plan.ops.iter().enumerate().filter(|&(i, _)| layout.folded[i]) {
        for &e in op.outputs() {
            let r = root[e];
            if layout.homes[e] != Home::Slot && scratch[r].is_none() {
                scratch[r] = Some(Arc::new(result_memory(plan, r)?));
            }
        }
        op.inputs().iter().for_each(|&e| last_read[root[e]] = Some(i));
    }
    let unbind = |ops: &mut Ops, r: usize| (0..n).filter(|&e| root[e] == r).for_each(|e| ops.unbind(e));
    for e in 0..n {
        if let Some(b) = &scratch[root[e]] {
            ops.bind(e, Mem::Buffer(b.clone(), 0))?;
        }
    }
    for i in (0..plan.ops.len()).filter(|&i| layout.folded[i]) {
        ops.run_one(plan, i)?;
        for &e in plan.ops[i].inputs() {
            let r = root[e];
            if last_read[r] == Some(i) && layout.homes[r] == Home::Transient && scratch[r].is_some() {
                unbind(ops, r);
                scratch[r] = None;
            }
        }
    }
    Ok(scratch)
}

/// Has forks take the cache of folded weights.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&FOLDED);
}
