//! The graph executor: an `Arc<Plan>` shared by all executors of a model, plus one `Instance` of
//! per-executor state behind a mutex (calls from several threads serialise; use one executor per
//! thread to run in parallel — they can share weights).

mod arena;
pub mod debug;
pub mod factory;
mod fold;
pub mod functions;
pub(crate) mod instance;
mod kernels;
pub mod layout;
pub mod plan;

use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::memory_plan;
use crate::module::{property, Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::PackedFunc;
use crate::params;
use crate::tensor::{NDArray, RawTensor, Weight};
use factory::Param;
use instance::Instance;
use instance::SlotMemory;
pub use kernels::ZeroCopy;
pub use layout::Folding;
use layout::Home;
use plan::Plan;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub struct GraphExecutor {
    plan: Arc<Plan>,
    state: Mutex<Instance>,
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
    /// The activation arena shared with other executors (`share_activations`).
    pub activations_shared: usize,
    /// Weights derived from weights by the operators folded at load (held once per process for
    /// each distinct content, counted in every executor that uses them).
    pub weights_derived: usize,
    /// The activation arena this executor's layout needs (in `activations`, or in the shared
    /// arena of `activations_shared`).
    pub activation_arena: usize,
    /// The liveness bound of what the activation memory holds: inputs that are not weights plus
    /// the largest sum of operator outputs live at one time. No layout can be smaller.
    pub activation_bound: usize,
    /// Operators folded (run once for the weights, skipped by `run`), of all operators.
    pub ops_folded: usize,
    pub ops_total: usize,
    /// Device copies of host weights this executor binds (a factory's or a mapped file's weights
    /// used on a device: one copy per device, shared by every executor there).
    pub weights_mirrored: usize,
    /// Where the memory above is (except host weights that are mirrored).
    pub device: DLDevice,
}

/// A name or an index, as executor functions accept them.
pub enum Key<'a> {
    Name(&'a str),
    Index(usize),
}

static LIVE_EXECUTORS: AtomicUsize = AtomicUsize::new(0);

/// The record of a prepared params file that says what it was made for (`prepared_params`).
pub const PREPARED: &str = "__tvmrt.prepared";
/// Records of a prepared params file holding derived weights, by alias root.
pub const DERIVED_PREFIX: &str = "__tvmrt.derived.";

/// Whether a params record is one a prepared params file adds (not a weight of the graph).
pub fn is_prepared_record(name: &str) -> bool {
    name == PREPARED || name.starts_with(DERIVED_PREFIX)
}

impl Drop for GraphExecutor {
    fn drop(&mut self) {
        if LIVE_EXECUTORS.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last executor is gone: give idle scratch memory and worker threads back, so a
            // process that unloads its models returns to its baseline.
            crate::backend::release_idle_memory();
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
        let state = Mutex::new(Instance::new(plan.clone(), debug)?);
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

    pub(crate) fn lock(&self) -> MutexGuard<'_, Instance> {
        // A panic inside a kernel call cannot leave the instance half-updated in a way later
        // calls rely on, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn input_index(&self, key: Key<'_>) -> Result<usize> {
        match key {
            Key::Name(n) => self.plan.input_index(n).ok_or_else(|| Error::key(format!("no input named '{n}'"))),
            Key::Index(i) => self.plan.check_input(i).map(|_| i),
        }
    }

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
        if self.strict_inputs() && (src.dtype() != e.dtype || src.shape() != &*e.shape) {
            return Err(Error::value(format!("{} (strict inputs)", what())));
        }
        let (given, held) = (src.nbytes()?, self.plan.entry_bytes[eid]);
        if given != held {
            return Err(Error::internal(format!(
                "{}: {given} bytes given for {held}, the size in bytes must exactly match",
                what()
            )));
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
    pub fn output(&self, index: usize) -> Result<ObjRef<NDArray>> {
        let eid = self.plan.check_output(index)?;
        self.lock().entry_view(eid)
    }

    /// Copies output `index` into `dst`, whose shape must match.
    pub fn copy_output_to(&self, index: usize, dst: RawTensor<'_>) -> Result<()> {
        let eid = self.plan.check_output(index)?;
        let e = &self.plan.graph.entries[eid];
        if dst.shape() != &*e.shape || dst.dtype().element_bytes() != e.dtype.element_bytes() {
            return Err(Error::value(format!(
                "output {index} is {} {:?}, the target {} {:?}",
                e.dtype,
                e.shape,
                dst.dtype(),
                dst.shape()
            )));
        }
        self.lock().read_entry_matched(eid, dst)
    }

    pub fn run(&self) -> Result<()> {
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

    /// Loads a params blob straight into the executor's memory: one copy per weight. Names that
    /// are not inputs are skipped (a blob may hold more than one graph needs).
    pub fn load_params(&self, blob: &[u8]) -> Result<()> {
        self.load_records(params::parse(blob)?, None).map(|_| ())
    }

    /// Maps a params file read-only and uses every weight whose data is 64-byte aligned in the
    /// file in place: no copy, and one copy in the page cache for every process mapping the file.
    /// The others are copied. Writing a mapped weight gives this executor a private copy; the file
    /// never changes. Returns how many weights were mapped and how many copied.
    ///
    /// # Safety
    /// The file must not be truncated or written while any executor uses weights mapped from it
    /// (see [`crate::tensor::FileMap::open`]).
    pub unsafe fn load_params_from_file(&self, path: &str) -> Result<(usize, usize)> {
        // SAFETY: per this function's contract.
        let map = unsafe { crate::tensor::FileMap::open(path) }?;
        let records = params::parse(map.bytes()).map_err(|e| e.context(path.to_string()))?;
        self.load_records(records, Some(&map))
    }

    /// Loads `records` in one transaction: every weight and the layout that folds from them, or
    /// (on any failure) nothing.
    fn load_records(
        &self,
        records: Vec<(&str, params::Record<'_>)>,
        map: Option<&Arc<crate::tensor::FileMap>>,
    ) -> Result<(usize, usize)> {
        // Every record is checked before anything is loaded.
        let mut load = Vec::new();
        for (name, rec) in &records {
            let Some(index) = self.plan.input_index(name) else { continue };
            let eid = self.plan.input_entries[index];
            let e = &self.plan.graph.entries[eid];
            if rec.dtype != e.dtype || rec.data.len() != self.plan.entry_bytes[eid] {
                return Err(Error::value(format!(
                    "parameter '{name}' is {} {:?} in the blob but {} {:?} in the graph",
                    rec.dtype, rec.shape, e.dtype, e.shape
                )));
            }
            load.push((*name, rec, eid));
        }
        let stamp = match (map, records.iter().find(|(n, _)| *n == PREPARED)) {
            (Some(map), Some((_, stamp))) => Some(self.prepared_derived(map, stamp, &records)?),
            _ => None,
        };
        self.lock().transaction(|st| {
            let counts = self.load_into(st, &load, map)?;
            if let Some(derived) = stamp {
                if !st.adopt(derived)? {
                    return Err(Error::value(
                        "the prepared weights in this params file do not fit this executor's folding (stale file?)",
                    ));
                }
            }
            st.prepare()?;
            Ok(counts)
        })
    }

    /// Binds or writes each checked record; returns how many were mapped and how many copied.
    fn load_into(
        &self,
        st: &mut Instance,
        load: &[(&str, &params::Record<'_>, usize)],
        map: Option<&Arc<crate::tensor::FileMap>>,
    ) -> Result<(usize, usize)> {
        let (mut mapped, mut copied) = (0, 0);
        for &(name, rec, eid) in load {
            let e = &self.plan.graph.entries[eid];
            let slot_bytes = self.plan.storage.slots[e.storage_id].bytes;
            // Used in place when the file's bytes cover the slot (on a device: mirrored there once,
            // the mapping staying shared between processes); else a weight of its own,
            // read-only, so what is derived from it can be kept (writing it later makes a private
            // copy, as for a shared one). `set_param` decides whether the slot takes it.
            let weight = match map {
                Some(map)
                    if rec.data.as_ptr() as usize % params::DATA_ALIGNMENT == 0 && rec.data.len() >= slot_bytes =>
                {
                    Weight::mapped(map, rec.data)?
                }
                // On a device, straight into device memory: the host bytes are the caller's blob.
                _ => Weight::padded_on(self.plan.slot_device[e.storage_id], rec.data, slot_bytes)?,
            };
            let in_place = weight.is_mapped();
            match st.set_param(name, eid, Arc::new(weight))? {
                true if in_place => mapped += 1,
                _ => copied += 1,
            }
        }
        Ok((mapped, copied))
    }

    /// The stamp a prepared params file carries: what it was made for, and its derived weights.
    fn prepared_stamp(&self, roots: &[usize]) -> Result<String> {
        let library = self.plan.library_digest().ok_or_else(|| {
            Error::value("prepared params need an operator library loaded from a file (to tie them to it)")
        })?;
        let roots: Vec<String> = roots.iter().map(usize::to_string).collect();
        Ok(format!(
            "tvmrt-prepared 1 graph {:016x} library {:016x} derived {}",
            self.plan.graph_digest,
            library,
            roots.join(",")
        ))
    }

    /// The derived weights of a prepared params file mapped at `map`, after checking its stamp
    /// against this executor's graph and library: a file made for another build is refused.
    fn prepared_derived(
        &self,
        map: &Arc<crate::tensor::FileMap>,
        stamp: &params::Record<'_>,
        records: &[(&str, params::Record<'_>)],
    ) -> Result<Vec<(usize, Arc<Weight>)>> {
        let text =
            std::str::from_utf8(stamp.data).map_err(|_| Error::value("a prepared params stamp that is not text"))?;
        let roots: Vec<usize> = text
            .rsplit_once(" derived ")
            .map(|(_, list)| {
                list.split(',').filter(|r| !r.is_empty()).map(str::parse).collect::<std::result::Result<_, _>>()
            })
            .transpose()
            .map_err(|_| Error::value(format!("a malformed prepared params stamp: '{text}'")))?
            .unwrap_or_default();
        let want = self.prepared_stamp(&roots)?;
        if text != want {
            return Err(Error::value(format!(
                "these prepared params were made for another build of the model: the file says '{text}', this \
                 executor's graph and library give '{want}' (prepare them again with `tvmrt prepare-params`)"
            )));
        }
        roots
            .into_iter()
            .map(|r| {
                let name = format!("{DERIVED_PREFIX}{r}");
                let (_, rec) = records
                    .iter()
                    .find(|(n, _)| *n == name)
                    .ok_or_else(|| Error::value(format!("prepared params: no record '{name}'")))?;
                if rec.data.as_ptr() as usize % params::DATA_ALIGNMENT != 0 {
                    return Err(Error::value(format!("prepared params: '{name}' is not aligned in the file")));
                }
                Ok((r, Arc::new(Weight::mapped(map, rec.data)?)))
            })
            .collect()
    }

    /// A params file holding `blob`'s weights and what this executor's weight-only operators derive
    /// from them (in the kernels' layouts), stamped with the graph and library they were made for,
    /// every tensor aligned: `load_params_from_file` maps it and uses the derived weights in place
    /// (nothing is computed at load, every process shares the pages); upstream still loads it
    /// (the extra records name no input). Folds this executor.
    pub fn prepared_params(&self, blob: &[u8]) -> Result<Vec<u8>> {
        self.set_fold_weights(true)?;
        self.load_params(blob)?;
        let derived = {
            let mut st = self.lock();
            st.prepare()?;
            st.derived_weights()
        };
        let roots: Vec<usize> = derived.iter().map(|(r, _)| *r).collect();
        let stamp = self.prepared_stamp(&roots)?;
        let u8s = crate::dlpack::DLDataType { code: crate::dlpack::kDLUInt, bits: 8, lanes: 1 };
        let mut arrays = Vec::new();
        for (name, rec) in params::parse(blob)? {
            arrays.push((name.to_string(), rec.to_ndarray()?));
        }
        for (r, w) in &derived {
            arrays.push((format!("{DERIVED_PREFIX}{r}"), NDArray::from_bytes(&[w.len() as i64], u8s, &w.bytes()?)?));
        }
        arrays.push((PREPARED.to_string(), NDArray::from_bytes(&[stamp.len() as i64], u8s, stamp.as_bytes())?));
        params::align(&params::save(arrays.iter().map(|(n, a)| (n.as_str(), &**a))))
    }

    /// Binds each input named in `params` to its weight without copying where its slot can share,
    /// else copies, then lays out (folding from them): all of them, or none on failure. Used by
    /// factories, which keep the weights for all their executors. Names that are not inputs are
    /// skipped.
    pub fn bind_params(&self, params: &[Param]) -> Result<()> {
        let mut bind = Vec::new();
        for param in params {
            let name = param.name.as_str();
            let Some(index) = self.plan.input_index(name) else { continue };
            let eid = self.plan.input_entries[index];
            let e = &self.plan.graph.entries[eid];
            if param.dtype != e.dtype || param.weight.len() != self.plan.entry_bytes[eid] {
                return Err(Error::value(format!(
                    "parameter '{name}': {} {:?} does not fit {} {:?}",
                    param.dtype, param.shape, e.dtype, e.shape
                )));
            }
            bind.push((name, eid, &param.weight));
        }
        self.lock().transaction(|st| {
            for (name, eid, weight) in bind {
                st.set_param(name, eid, weight.clone())?;
            }
            st.prepare()
        })
    }

    /// `share_params`: binds every input named in `blob` to `other`'s memory for it. Matched by
    /// name; shapes and dtypes must agree. Afterwards this executor owns no memory for them.
    pub fn share_params(&self, other: &GraphExecutor, blob: &[u8]) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let names = params::parse_names(blob)?;
        let (mut mine, mut theirs) = self.lock_pair(other);
        let (mine, theirs) = (&mut *mine, &mut *theirs);
        let mut bindings = Vec::new();
        for name in names {
            let Some(index) = self.plan.input_index(name) else {
                continue;
            };
            let at = || format!("parameter '{name}'");
            let other_index = other
                .plan
                .input_index(name)
                .ok_or_else(|| Error::key(format!("{}: not an input of the executor shared from", at())))?;
            let eid = self.plan.input_entries[index];
            let oeid = other.plan.input_entries[other_index];
            let (e, oe) = (&self.plan.graph.entries[eid], &other.plan.graph.entries[oeid]);
            if e.dtype != oe.dtype || e.shape != oe.shape {
                return Err(Error::value(format!(
                    "{}: {} {:?} here but {} {:?} in the other executor",
                    at(),
                    e.dtype,
                    e.shape,
                    oe.dtype,
                    oe.shape
                )));
            }
            bindings.push((name, eid, e.storage_id, oeid, oe.storage_id));
        }
        Instance::transaction_pair(mine, theirs, |mine, theirs| {
            for (name, eid, sid, oeid, osid) in bindings {
                // Their memory becomes a weight both hold when both slots can share it (set_param
                // then binds it); else the bytes are copied.
                let fits = other.plan.storage.slots[osid].bytes >= self.plan.storage.slots[sid].bytes;
                if self.plan.is_shareable_slot(sid) && other.plan.is_shareable_slot(osid) && fits {
                    let weight = theirs.share_out(osid).map_err(|e| e.context(format!("parameter '{name}'")))?;
                    mine.set_param(name, eid, weight)?;
                } else {
                    mine.copy_entry_from(eid, theirs, oeid).map_err(|e| e.context(format!("parameter '{name}'")))?;
                    mine.param_names.insert(name.to_string());
                }
            }
            mine.prepare_for_holders()?;
            theirs.prepare_for_holders()
        })
    }

    /// Makes this executor and `other` use one activation arena, sized for the larger. They must
    /// then never run at the same time: a run while another holder runs fails with an error.
    /// Outputs stay each executor's own (`Plan::output_offsets`), unless the plan is laid out by
    /// storage ids: then they are in the arena and any holder's next run overwrites them.
    pub fn share_activations(&self, other: &GraphExecutor) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let (mut mine, mut theirs) = self.lock_pair(other);
        Instance::transaction_pair(&mut mine, &mut theirs, |mine, theirs| {
            mine.prepare()?;
            theirs.prepare()?;
            // Size the arena for both first, so nobody binds a buffer that is replaced at once.
            let arena = match theirs.arena() {
                Some(a) => a.clone(),
                None => arena::Arena::new(self.plan.device)?,
            };
            arena.reserve(mine.layout().arena_bytes.max(theirs.layout().arena_bytes))?;
            if theirs.arena().is_none_or(|a| !Arc::ptr_eq(a, &arena)) {
                theirs.join_arena(arena.clone())?;
            }
            mine.join_arena(arena)
        })
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

    /// The activation arena this executor shares with others (`share_activations`), if any.
    pub fn shared_arena(&self) -> Option<Arc<arena::Arena>> {
        self.lock().arena().cloned()
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

    /// What each storage slot of the graph's plan holds in this executor, as of the last
    /// preparation, in the memory report's words.
    pub fn slot_uses(&self) -> Vec<SlotUse> {
        let st = self.lock();
        let plan = &self.plan;
        let params = st.param_slots();
        let homes = &st.layout().homes;
        (0..plan.storage.slots.len())
            .map(|sid| {
                let entries = (0..plan.graph.num_entries()).filter(|&e| plan.graph.entries[e].storage_id == sid);
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
        };
        for (sid, is_weight) in st.param_slots().into_iter().enumerate() {
            match st.slot(sid) {
                SlotMemory::Unbound => {}
                SlotMemory::Weight(w) if w.is_mapped() => {
                    m.weights_mapped += w.len();
                    m.weights_mirrored += w.mirror_bytes();
                }
                // Loaded by this executor and held by nobody else: its own.
                SlotMemory::Weight(w) if st.weight_is_own(sid) => m.weights_owned += w.len(),
                SlotMemory::Weight(w) => {
                    m.weights_shared += w.len();
                    m.weights_mirrored += w.mirror_bytes();
                }
                SlotMemory::Owned(b) if is_weight => m.weights_owned += b.len(),
                SlotMemory::Owned(b) => m.activations += b.len(),
            }
        }
        m.activations += st.own_activation_bytes();
        m.activations_shared = st.arena().map_or(0, |a| a.len());
        m.weights_derived = st.derived_bytes();
        let layout = st.layout();
        m.activation_arena = layout.arena_bytes;
        m.activation_bound = layout.bound;
        m.ops_folded = layout.folded.iter().filter(|&&f| f).count();
        m.ops_total = plan.ops.len();
        m
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
