//! Folding: the operators a layout folds (they read only weights) run once, when the weights are
//! bound, into memory of their own; the results the layout keeps become derived weights, one copy
//! per distinct content in the process (`weight::intern`).

#![forbid(unsafe_code)]

use super::kernels::{Mem, Ops};
use super::layout::{Home, Layout};
use super::plan::Plan;
use crate::error::{Error, Result};
use crate::tensor::{weight, Buffer, Weight};
use std::sync::Arc;

/// Runs the operators `layout` folds on the weights `ops` is bound to; returns, per alias root,
/// the derived weight of each result the layout keeps. Leaves those results' entries unbound:
/// binding the layout's homes is the caller's next step.
pub fn fold(plan: &Plan, ops: &mut Ops, layout: &Layout) -> Result<Vec<Option<Arc<Weight>>>> {
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
                scratch[r] = Some(Arc::new(Buffer::zeroed_on(plan.device, plan.root_bytes[r])?));
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
    // The results are weights from here on: no tensor points at the scratch any more.
    for e in 0..n {
        if scratch[root[e]].is_some() {
            ops.unbind(e);
        }
    }
    let mut derived = vec![None; n];
    for (r, b) in scratch.into_iter().enumerate() {
        let Some(b) = b else { continue };
        if layout.homes[r] == Home::Derived {
            let b = Arc::try_unwrap(b).map_err(|_| Error::internal("a folded result is still in use"))?;
            derived[r] = Some(weight::intern(Weight::freeze(b)));
        }
    }
    Ok(derived)
}
