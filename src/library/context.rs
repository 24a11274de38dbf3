//! What compiled code's `__tvm_module_ctx` points at. A library file loaded twice is one image in
//! memory with one context slot, so the slot cannot name a module: it names the one `LibContext`
//! of that image, which every library module made from it holds, and which lives (with the image)
//! as long as any of them. `TVMBackendGetFuncFromEnv` reaches the live modules through it.
//!
//! Compiled code keeps each function handle it looked up in a global of the image's own, never
//! cleared while the image is mapped. The image can outlive its context: a host holding the file
//! open with its own dlopen, or another thread's load of the file between its dlopen and taking
//! the context. The functions a context handed out therefore live until nothing is mapped at its
//! slot (`RETIRED`); a later load's kernels may still call them.

use super::{pages, LibraryModule};
use crate::backend::fork::{self, ForkLock, Held};
use crate::module::Module;
use crate::object::{AnyObject, ObjRef, ObjectHeader};
use crate::packed::PackedFunc;
use once_cell::sync::Lazy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

pub struct LibContext {
    /// Address of the image's context slot: the key of `CONTEXTS`.
    slot: usize,
    /// Object headers of the live library modules of this image.
    modules: Mutex<Vec<usize>>,
    /// Functions handed to kernels, kept alive here because kernels cache the borrowed handle.
    pub env_funcs: Mutex<HashMap<String, ObjRef<PackedFunc>>>,
}

static CONTEXTS: Lazy<Mutex<HashMap<usize, Weak<LibContext>>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// The functions of contexts gone, by the address of their image's context slot: kept until
/// nothing is mapped there.
type Retired = Vec<(usize, Vec<ObjRef<PackedFunc>>)>;
static RETIRED: Mutex<Retired> = Mutex::new(Vec::new());

/// Keeps `funcs` until nothing is mapped at `slot` ([`release_unmapped`], which the library
/// module calls once it let go of the image: the context goes first).
fn retire(slot: usize, funcs: Vec<ObjRef<PackedFunc>>) {
    if !funcs.is_empty() {
        RETIRED.lock().unwrap_or_else(|e| e.into_inner()).push((slot, funcs));
    }
}

/// Lets go of the functions of images no longer mapped: a fresh mapping starts with empty handles,
/// so nothing can call them any more. (Something else mapped at the slot keeps them: harmless.)
pub fn release_unmapped() {
    let gone: Retired = {
        let mut retired = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
        if retired.is_empty() {
            return;
        }
        let (kept, gone) = std::mem::take(&mut *retired).into_iter().partition(|(s, _)| pages::is_loaded(*s));
        *retired = kept;
        gone
    };
    // Released outside the lock: a function may hold the last count of a module.
    drop(gone);
}

impl LibContext {
    /// The context of the image whose context slot is at `slot`, shared with earlier loads.
    pub fn for_slot(slot: usize) -> Arc<LibContext> {
        let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ctx) = all.get(&slot).and_then(Weak::upgrade) {
            return ctx;
        }
        let ctx = Arc::new(LibContext { slot, modules: Mutex::default(), env_funcs: Mutex::default() });
        fork::guard(&ctx);
        all.insert(slot, Arc::downgrade(&ctx));
        ctx
    }

    pub fn register(&self, module: &ObjRef<Module>) {
        self.modules.lock().unwrap_or_else(|e| e.into_inner()).push(module.as_ptr() as usize);
    }

    /// Called as a library module is destroyed.
    pub fn unregister(&self, header: usize) {
        self.modules.lock().unwrap_or_else(|e| e.into_inner()).retain(|&m| m != header);
    }

    /// The live library modules of this image (with new counts), newest first. Each load of the
    /// image made one; a load still in progress may not have its imports yet, so callers look
    /// through all of them.
    pub fn modules(&self) -> Vec<ObjRef<Module>> {
        let modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        modules
            .iter()
            .rev()
            .filter_map(|&m| {
                // SAFETY: registered headers stay allocated until their module's drop unregisters
                // them, which takes this lock; a module already on its way out (count 0) is skipped.
                unsafe { AnyObject::try_retain_raw(m as *mut ObjectHeader) }
                    .and_then(|o| o.downcast::<Module>().ok())
                    .filter(|m| m.node::<LibraryModule>().is_some())
            })
            .collect()
    }
}

/// Kernels look up functions in their context while running: a child must find both lists free.
impl ForkLock for LibContext {
    fn try_hold(&self) -> Option<Held<'_>> {
        let modules = self.modules.try_hold()?;
        Some(Held::new((modules, self.env_funcs.try_hold()?)))
    }
}

/// Has forks take the process-wide list of contexts.
pub fn handle_forks() {
    fork::guard_static(&*CONTEXTS);
    fork::guard_static(&RETIRED);
}

impl Drop for LibContext {
    fn drop(&mut self) {
        let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        // A new load of the same image may already have put a fresh context in our place.
        if all.get(&self.slot).is_some_and(|w| w.strong_count() == 0) {
            all.remove(&self.slot);
        }
        drop(all);
        let funcs = std::mem::take(self.env_funcs.get_mut().unwrap_or_else(|e| e.into_inner()));
        retire(self.slot, funcs.into_values().collect());
    }
}

/// Whether a live context is found at `slot`.
#[cfg(test)]
pub(super) fn live_at(slot: usize) -> bool {
    CONTEXTS.lock().unwrap_or_else(|e| e.into_inner()).get(&slot).is_some_and(|w| w.strong_count() > 0)
}
