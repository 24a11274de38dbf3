//! The graph executor: an `Arc<Plan>` shared by all executors of a model, plus one `Instance` of
//! per-executor state behind a mutex (calls from several threads serialise; use one executor per
//! thread to run in parallel — they can share weights).

mod bindings;
pub mod debug;
pub mod factory;
mod fold;
pub mod functions;
pub(crate) mod instance;
mod kernels;
pub mod layout;
mod names;
mod peers;
pub mod plan;
pub mod pool;
mod report;
mod weights;

use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::{property, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::PackedFunc;
pub use crate::tensor::raw::ZeroCopy;
use crate::tensor::{NDArray, RawTensor};
use instance::Instance;
pub use layout::Folding;
use plan::Plan;
pub use report::{MemoryUsage, SlotUse};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub struct GraphExecutor {
    plan: Arc<Plan>,
    /// Shared with the fork handlers, which take it around a fork (a run ends first).
    state: Arc<Mutex<Instance>>,
    /// A debug executor also answers the per-node functions of `debug`.
    debug: bool,
    /// `set_input` refuses another shape or dtype and unknown names (`set_strict_inputs`,
    /// `TVM_RT_STRICT_INPUTS=1`); off, it copies by byte size and ignores them, as upstream's.
    strict_inputs: AtomicBool,
}

/// The process default of strict inputs: `TVM_RT_STRICT_INPUTS=1`.
fn strict_inputs_default() -> bool {
    static DEFAULT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| std::env::var("TVM_RT_STRICT_INPUTS").is_ok_and(|v| v.trim() == "1"))
}

/// Has forks take the executors' process-wide locks, and reads every process default an executor
/// reads once (from the environment), so that none is being read by another thread at a fork.
pub(crate) fn handle_forks() {
    fold::handle_forks();
    peers::handle_forks();
    pool::default::handle_forks();
    strict_inputs_default();
    layout::keep_folded_default();
    Folding::by_default();
    pool::default_timeout();
}

/// A name or an index, as executor functions accept them.
pub enum Key<'a> {
    Name(&'a str),
    Index(usize),
}

static LIVE_EXECUTORS: AtomicUsize = AtomicUsize::new(0);

impl Drop for GraphExecutor {
    fn drop(&mut self) {
        if LIVE_EXECUTORS.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last executor is gone: give idle scratch memory and worker threads back, so a
            // process that unloads its models returns to its baseline.
            crate::backend::release_idle_memory();
            crate::device::release_idle();
        }
    }
}

impl GraphExecutor {
    pub fn new(plan: Arc<Plan>) -> Result<GraphExecutor> {
        GraphExecutor::with_debug(plan, false)
    }

    /// A debug executor: the same, plus per-node timing and outputs. It folds nothing unless told
    /// to (`set_fold_weights`), so every node runs and is timed as upstream's; folding, it keeps
    /// every result derived from weights, so any node's output can still be read.
    pub fn new_debug(plan: Arc<Plan>) -> Result<GraphExecutor> {
        GraphExecutor::with_debug(plan, true)
    }

    fn with_debug(plan: Arc<Plan>, debug: bool) -> Result<GraphExecutor> {
        let mut instance = Instance::new(plan.clone(), debug)?;
        // With a default pool set, executors that can draw from one do (a debug executor, one on
        // several devices or laid out by storage ids keep their own arenas).
        if !debug && plan.devices.len() == 1 && plan.liveness_layout {
            if let Some(pool) = pool::default::pool(plan.device)? {
                instance.join_pool(&pool)?;
            }
        }
        let state = Arc::new(Mutex::new(instance));
        crate::backend::fork::guard(&state);
        LIVE_EXECUTORS.fetch_add(1, Ordering::AcqRel);
        Ok(GraphExecutor { plan, state, debug, strict_inputs: AtomicBool::new(strict_inputs_default()) })
    }

    pub fn is_debug(&self) -> bool {
        self.debug
    }

    /// `tvm.graph_executor.create`: parse, plan, resolve operators in `library`.
    pub fn create(graph_json: &str, library: ObjRef<Module>, device: DLDevice) -> Result<ObjRef<Module>> {
        let plan = Plan::new(graph_json, library, device)?;
        Ok(Module::new(GraphExecutor::new(plan)?))
    }

    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, Instance> {
        // A panic inside a kernel call cannot leave the instance half-updated in a way later
        // calls rely on, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    pub fn input_index(&self, key: Key<'_>) -> Result<usize> {
        match key {
            Key::Name(n) => self.plan.input_index(n).ok_or_else(|| Error::key(format!("no input named '{n}'"))),
            Key::Index(i) => self.plan.check_input(i).map(|_| i),
        }
    }

    #[inline]
    pub fn output_index(&self, key: Key<'_>) -> Result<usize> {
        match key {
            Key::Name(n) => self.plan.output_index(n).ok_or_else(|| Error::key(format!("Invalid output node:{n}"))),
            Key::Index(i) => self.plan.check_output(i).map(|_| i),
        }
    }

    pub fn strict_inputs(&self) -> bool {
        self.strict_inputs.load(Ordering::Relaxed)
    }

    pub fn set_strict_inputs(&self, strict: bool) {
        self.strict_inputs.store(strict, Ordering::Relaxed);
    }

    /// Copies `src` into input `index`. As upstream's, any shape and dtype of the input's byte size
    /// is accepted (hosts keep inputs as flat buffers); in strict mode they must match.
    pub fn set_input(&self, index: usize, src: RawTensor<'_>) -> Result<()> {
        let eid = self.plan.check_input(index)?;
        let e = &self.plan.graph.entries[eid];
        let what = || {
            format!(
                "input '{}' is {} {:?}, got {} {:?}",
                self.plan.input_name(index),
                e.dtype,
                e.shape,
                src.dtype(),
                src.shape()
            )
        };
        // The entry's own shape and dtype, the usual case, have its byte size: nothing to compute.
        if src.dtype() != e.dtype || !src.has_shape(&e.shape) {
            if self.strict_inputs() && src.dtype() != e.dtype {
                return Err(Error::type_err(format!("{} (strict inputs)", what())));
            }
            if self.strict_inputs() {
                return Err(Error::value(format!("{} (strict inputs)", what())));
            }
            let (given, held) = (src.nbytes()?, self.plan.entry_bytes[eid]);
            if given != held {
                return Err(Error::internal(format!(
                    "{}: {given} bytes given for {held}, the size in bytes must exactly match",
                    what()
                )));
            }
        }
        self.lock().write_entry_matched(eid, src)
    }

    pub fn set_input_bytes(&self, index: usize, bytes: &[u8]) -> Result<()> {
        let eid = self.plan.check_input(index)?;
        self.lock()
            .write_entry_bytes(eid, bytes)
            .map_err(|e| e.context(format!("input '{}'", self.plan.input_name(index))))
    }

    /// Binds input `index` to the caller's memory (`ZeroCopy::new` says for how long it must live).
    pub fn set_input_zero_copy(&self, index: usize, src: ZeroCopy<'_>) -> Result<()> {
        let eid = self.plan.check_input(index)?;
        self.lock()
            .bind_input_external(eid, src)
            .map_err(|e| e.context(format!("input '{}'", self.plan.input_name(index))))
    }

    /// Binds output `index` to the caller's memory, where the run writes it.
    pub fn set_output_zero_copy(&self, index: usize, dst: ZeroCopy<'_>) -> Result<()> {
        let eid = self.plan.check_output(index)?;
        self.lock().bind_output_external(eid, dst).map_err(|e| e.context(format!("output {index}")))
    }

    /// Input `index` as an array aliasing the executor's memory. Writing through it is how
    /// Python's `set_input` works, so a shared weight is made private first (copy on write).
    pub fn input(&self, index: usize) -> Result<ObjRef<NDArray>> {
        let eid = self.plan.check_input(index)?;
        let sid = self.plan.graph.entries[eid].storage_id;
        let mut st = self.lock();
        st.make_private(sid)?;
        st.entry_view(eid)
    }

    /// Output `index` as an array aliasing the executor's memory (overwritten by the next run).
    #[inline]
    pub fn output(&self, index: usize) -> Result<ObjRef<NDArray>> {
        let eid = self.plan.check_output(index)?;
        self.lock().entry_view(eid)
    }

    /// Copies output `index` into `dst`, whose shape must match.
    pub fn copy_output_to(&self, index: usize, dst: RawTensor<'_>) -> Result<()> {
        let eid = self.plan.check_output(index)?;
        self.copy_entry_to(eid, dst, || format!("output {index}"))
    }

    /// Copies input `index` (a weight too, left shared) into `dst`, whose shape must match.
    pub fn copy_input_to(&self, index: usize, dst: RawTensor<'_>) -> Result<()> {
        let eid = self.plan.check_input(index)?;
        self.copy_entry_to(eid, dst, || format!("input '{}'", self.plan.input_name(index)))
    }

    fn copy_entry_to(&self, eid: usize, dst: RawTensor<'_>, what: impl Fn() -> String) -> Result<()> {
        let e = &self.plan.graph.entries[eid];
        if !dst.has_shape(&e.shape) || dst.dtype().element_bytes() != e.dtype.element_bytes() {
            return Err(Error::value(format!(
                "{} is {} {:?}, the target {} {:?}",
                what(),
                e.dtype,
                e.shape,
                dst.dtype(),
                dst.shape()
            )));
        }
        self.lock().read_entry_matched(eid, dst)
    }

    pub fn run(&self) -> Result<()> {
        // Through the fork gate: a fork waits for this run, not for luck (see `backend::fork`).
        let _inside = crate::backend::fork::inside();
        self.lock().run()
    }

    /// Turns folding of weight-only operators on (all of them, those on weights mapped from a
    /// file too) or off (every operator runs at every run, as upstream's executor does). By
    /// default, operators on mapped weights are not folded (see [`Folding`]), and a debug executor
    /// folds nothing.
    pub fn set_fold_weights(&self, fold: bool) -> Result<()> {
        self.lock().transaction(|st| {
            st.set_fold(if fold { Folding::All } else { Folding::Off });
            st.prepare()
        })
    }

    /// Makes this executor and `other` draw their activations from one pool: `other`'s, or a new
    /// one of one arena (sized for the larger), which they then take in turn: a run waits while
    /// another holder runs. Outputs and inputs stay each executor's own.
    pub fn share_activations(&self, other: &GraphExecutor) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let (mut mine, mut theirs) = self.lock_pair(other);
        Instance::transaction_pair(&mut mine, &mut theirs, |mine, theirs| {
            let pool = match theirs.pool() {
                Some(p) => p.clone(),
                None => pool::ArenaPool::new(self.plan.device, 1)?,
            };
            theirs.join_pool(&pool)?;
            mine.join_pool(&pool)
        })
    }

    /// Draws this executor's activations from `pool` from its next run on.
    pub fn join_pool(&self, pool: &Arc<pool::ArenaPool>) -> Result<()> {
        self.lock().transaction(|st| st.join_pool(pool))
    }

    /// Locks two executors in address order, so two threads pairing them oppositely cannot deadlock.
    fn lock_pair<'a>(&'a self, other: &'a GraphExecutor) -> (MutexGuard<'a, Instance>, MutexGuard<'a, Instance>) {
        if (self as *const Self) < (other as *const Self) {
            let a = self.lock();
            (a, other.lock())
        } else {
            let b = other.lock();
            (self.lock(), b)
        }
    }

    /// The layout as of the last preparation (which entry lives where, what is folded).
    pub fn layout(&self) -> layout::Layout {
        self.lock().layout().clone()
    }

    /// The address of entry `eid`'s data now (null while it has none).
    pub fn entry_data(&self, eid: usize) -> *const u8 {
        self.lock().entry_data(eid)
    }

    /// The pool of activation arenas this executor draws from, if any.
    pub fn pool(&self) -> Option<Arc<pool::ArenaPool>> {
        self.lock().pool().cloned()
    }

    /// Whether input `name` holds a parameter (loaded, shared, bound by a factory or linked).
    pub fn is_param(&self, name: &str) -> bool {
        self.lock().param_names.contains(name)
    }

    /// Per operator of the plan: folded (runs once, when the weights are bound) as of the last
    /// preparation.
    pub fn folded_ops(&self) -> Vec<bool> {
        self.lock().layout().folded.clone()
    }
}

impl ModuleNode for GraphExecutor {
    fn type_key(&self) -> &str {
        "GraphExecutor"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        Ok(functions::get(this, name).or_else(|| if self.debug { debug::get(this, name) } else { None }))
    }

    fn property_mask(&self) -> i32 {
        property::RUNNABLE
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
