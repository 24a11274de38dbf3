//! Which executors on a device share one set of weights, by model.
//!
//! Folding a model's weight-only operators holds their results (the derived weights) once for all
//! holders and shrinks each holder's arena by the space those results took while it ran them. On
//! the host that is worth it for the speed; on a device, memory is what is short, and the trade
//! depends on who shares: executors of one model each save that space, so a few of them pay for
//! the derived weights; a build of the same network for another batch size (a variant) saves
//! nothing (its activations dominate its arena) and would pay for them alone. ResNet-18 on OpenCL:
//! derived weights of 18.9 MB against 5.7 MB saved by the batch-1 executor and none by a batch-4
//! one. So on a device an executor folds shared weights only while another executor of its own
//! model holds them; a variant shares the weights and runs the weight-only operators itself.
//!
//! Executors register here, on a device only, what they hold (the model, one of its weights);
//! every change bumps a generation that executors compare before each run, so a sharer of the same
//! model arriving or going makes the others lay out again.

#![forbid(unsafe_code)]

use super::plan::Plan;
use crate::tensor::Weight;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

struct Holding {
    who: u64,
    /// The model: its graph (by digest) and where each entry lives.
    plan: Weak<Plan>,
    /// One of the weights it holds: executors sharing weights hold the same ones.
    weight: Weak<Weight>,
}

static HOLDINGS: Mutex<Vec<Holding>> = Mutex::new(Vec::new());
static GENERATION: AtomicU64 = AtomicU64::new(0);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn holdings() -> std::sync::MutexGuard<'static, Vec<Holding>> {
    HOLDINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Changes of who holds what, to compare with the value seen when an executor laid out.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn same_model(a: &Plan, b: &Plan) -> bool {
    std::ptr::eq(a, b) || (a.graph_digest == b.graph_digest && a.entry_device == b.entry_device && a.graph == b.graph)
}

/// An executor's entry in the registry, gone when it drops.
pub struct Peer {
    who: u64,
}

impl Default for Peer {
    fn default() -> Peer {
        Peer { who: NEXT.fetch_add(1, Ordering::Relaxed) }
    }
}

impl Peer {
    /// Records that this executor, of `plan`, holds `weight` (`None`: nothing to fold from), and
    /// returns whether another executor of the same model holds it too, and the generation that
    /// answer is of.
    pub fn hold(&self, plan: &Arc<Plan>, weight: Option<&Arc<Weight>>) -> (bool, u64) {
        let mut all = holdings();
        all.retain(|h| h.plan.strong_count() > 0 && h.weight.strong_count() > 0);
        let mine = all.iter().position(|h| h.who == self.who);
        let same = |h: &Holding| {
            h.plan.as_ptr() == Arc::as_ptr(plan) && weight.is_some_and(|w| h.weight.as_ptr() == Arc::as_ptr(w))
        };
        let changed = match (mine, weight) {
            (Some(i), _) if same(&all[i]) => false,
            (Some(i), None) => {
                all.swap_remove(i);
                true
            }
            (Some(i), Some(w)) => {
                all[i] = Holding { who: self.who, plan: Arc::downgrade(plan), weight: Arc::downgrade(w) };
                true
            }
            (None, Some(w)) => {
                all.push(Holding { who: self.who, plan: Arc::downgrade(plan), weight: Arc::downgrade(w) });
                true
            }
            (None, None) => false,
        };
        if changed {
            GENERATION.fetch_add(1, Ordering::AcqRel);
        }
        let generation = generation();
        let peer = weight.is_some_and(|w| {
            all.iter().any(|h| {
                h.who != self.who
                    && h.weight.as_ptr() == Arc::as_ptr(w)
                    && h.plan.upgrade().is_some_and(|p| same_model(&p, plan))
            })
        });
        (peer, generation)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let mut all = holdings();
        let before = all.len();
        all.retain(|h| h.who != self.who);
        if all.len() != before {
            GENERATION.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Has forks take the registry's lock.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&HOLDINGS);
}
