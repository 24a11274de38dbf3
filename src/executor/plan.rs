//! The immutable part of an executor: graph, storage plan, resolved operators, name maps. One
//! `Arc<Plan>` serves every executor of a model (a factory builds it once).

use super::names::NameMap;
use crate::dlpack::{DLDevice, TVMBackendPackedCFunc};
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeKind};
use crate::memory_plan::{SlotRole, StoragePlan};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::PackedFunc;
use crate::tensor::Weight;
use std::sync::Arc;

pub enum OpKind {
    /// A reshape whose output aliases its input: nothing to do.
    Nop,
    /// Copy input 0 into output 0.
    Copy,
    Kernel {
        func: ObjRef<PackedFunc>,
        raw: Option<TVMBackendPackedCFunc>,
    },
}

pub struct OpPlan {
    pub node: usize,
    pub kind: OpKind,
    /// Entry ids: the inputs, then the node's outputs.
    pub args: Vec<usize>,
    pub num_inputs: usize,
}

impl OpPlan {
    pub fn inputs(&self) -> &[usize] {
        &self.args[..self.num_inputs]
    }

    pub fn outputs(&self) -> &[usize] {
        &self.args[self.num_inputs..]
    }
}

pub struct Plan {
    pub graph: Graph,
    /// A digest of the graph JSON text (what a prepared params file was made for).
    pub graph_digest: u64,
    pub storage: StoragePlan,
    pub ops: Vec<OpPlan>,
    pub input_names: NameMap,
    /// Graph input index -> entry id.
    pub input_entries: Vec<usize>,
    /// Output index -> entry id.
    pub output_entries: Vec<usize>,
    /// `"<node name>:<k>"` -> output index, for `set_output_zero_copy`.
    pub output_keys: NameMap,
    /// Graph inputs in each storage slot (sharing needs exactly one).
    pub inputs_per_slot: Vec<usize>,
    /// The entries of each storage slot, slot after slot (`slot_entries` reads it): what a
    /// zero-copy binding moves, without walking the whole graph on every call.
    slot_entry_ids: Vec<usize>,
    /// Where each slot's entries start in `slot_entry_ids` (one more than there are slots).
    slot_entry_start: Vec<usize>,
    /// Bytes of every entry.
    pub entry_bytes: Vec<usize>,
    /// Storage slots whose data the library links in (`_lookup_linked_param`, TVM <= 0.8 builds).
    pub linked: Vec<Option<Arc<Weight>>>,
    /// Per entry: the entry whose memory it is (itself, or what a `__nop` reshape aliases).
    pub alias_root: Vec<usize>,
    /// Per alias root: the bytes its largest alias needs (0 for entries that are not roots).
    pub root_bytes: Vec<usize>,
    /// Whether activations may be laid out by liveness rather than by the graph's storage ids:
    /// every `__nop` shares its input's storage id and no storage id mixes inputs with outputs.
    pub liveness_layout: bool,
    /// Per alias root of a graph output that operators write (liveness layouts only): its offset
    /// in the executor's output region. Outputs live apart from the activation arena so that
    /// laying the arena out again (folding after a weight changes) never moves or clears what a
    /// host may hold a view of or cached the address of, as with upstream's static storage.
    pub output_offsets: Vec<Option<usize>>,
    /// Bytes of the output region.
    pub output_region_bytes: usize,
    /// The output region's parts, one per device its outputs are on.
    pub output_parts: Vec<Part>,
    pub library: ObjRef<Module>,
    /// The primary device: the first given, where entries without a device of their own live.
    pub device: DLDevice,
    /// The devices the graph uses, primary first (several for graphs placing entries on several
    /// device types with `device_index`).
    pub devices: Vec<DLDevice>,
    /// The devices the plan was made for, as given.
    pub given: Vec<DLDevice>,
    /// Per entry: the device its memory is on.
    pub entry_device: Vec<DLDevice>,
    /// Per storage slot: the device its memory is on.
    pub slot_device: Vec<DLDevice>,
    /// Offsets of entries in one buffer are multiples of this: TVM's allocation alignment, or
    /// more where a device needs it for a region of a buffer (OpenCL sub-buffers).
    pub align: usize,
}

/// A stretch of one of an executor's regions (the activation arena, the output region) that lives
/// on one device: offsets `base..base + len` of the region are in that device's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub device: DLDevice,
    pub base: usize,
    pub len: usize,
}

/// Each entry's alias root, and whether the graph's aliasing is simple enough to lay out by
/// liveness (Relay's always is).
fn aliases(graph: &Graph, storage: &StoragePlan, ops: &[OpPlan], input_entries: &[usize]) -> (Vec<usize>, bool) {
    let mut root: Vec<usize> = (0..graph.num_entries()).collect();
    let mut simple = input_entries.iter().all(|&e| storage.slots[graph.entries[e].storage_id].role == SlotRole::Input);
    for op in ops {
        if let (OpKind::Nop, [input], [out]) = (&op.kind, op.inputs(), op.outputs()) {
            // Ops come in graph order, so the input's root is final.
            if graph.entries[*input].storage_id == graph.entries[*out].storage_id {
                root[*out] = root[*input];
            } else {
                simple = false;
            }
        } else if matches!(op.kind, OpKind::Nop) {
            simple = false;
        }
    }
    (root, simple)
}

/// Each entry's device: the first device given of the type its `device_index` names, else the
/// primary device. An entry on a device type none of the given devices has is an error (upstream
/// would silently put it on the primary device, where its kernel would misread the memory).
fn entry_devices(graph: &Graph, devices: &[DLDevice]) -> Result<Vec<DLDevice>> {
    let host = |t: i32| crate::device::is_host(DLDevice { device_type: t, device_id: 0 });
    // CPU entries (fallback operators) go to the CPU even when only the accelerator is given.
    let find = |t: i32| {
        devices
            .iter()
            .copied()
            .find(|d| d.device_type == t || (host(t) && crate::device::is_host(*d)))
            .or_else(|| host(t).then_some(DLDevice::CPU))
    };
    let mut types: Vec<i32> = graph.entries.iter().filter_map(|e| e.device_type).collect();
    types.sort_unstable();
    types.dedup();
    let names = |ts: &[i32]| ts.iter().map(|&t| crate::device::type_name(t)).collect::<Vec<_>>().join(" and ");
    if let Some(&missing) = types.iter().find(|&&t| find(t).is_none()) {
        let given: Vec<i32> = devices.iter().map(|d| d.device_type).collect();
        return Err(Error::value(if types.len() == 1 {
            format!(
                "this graph was built for {} (its entries' device_index), not {}: create the executor on that device",
                names(&types),
                names(&given)
            )
        } else {
            format!(
                "this graph places entries on {} (heterogeneous): give a device of each type, {} is missing",
                names(&types),
                crate::device::type_name(missing)
            )
        }));
    }
    Ok(graph.entries.iter().map(|e| e.device_type.and_then(find).unwrap_or(devices[0])).collect())
}

/// Whether `module` or anything it imports is of type `key`.
fn has_module_of(module: &ObjRef<Module>, key: &str) -> bool {
    module.type_key() == key || module.imports().iter().any(|m| has_module_of(m, key))
}

impl Plan {
    /// The `DLTensor` of each graph entry, on its device, with no data yet; shapes point at the
    /// plan's own (kernels never write them), so the plan must outlive the tensors.
    pub fn entry_tensors(&self) -> Vec<crate::dlpack::DLTensor> {
        self.graph
            .entries
            .iter()
            .zip(&self.entry_device)
            .map(|(e, &device)| crate::dlpack::DLTensor {
                data: std::ptr::null_mut(),
                device,
                ndim: e.shape.len() as i32,
                dtype: e.dtype,
                shape: crate::dlpack::shape_ptr(&e.shape),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            })
            .collect()
    }

    /// `e` as the failure of operator node `node`, named.
    pub fn operator_error(&self, node: usize, e: Error) -> Error {
        let n = &self.graph.nodes[node];
        let func = match &n.kind {
            NodeKind::Op(a) => a.func_name.as_str(),
            _ => "",
        };
        e.context(format!("operator {func} (node {node} '{}') failed", n.name))
    }

    pub fn new(graph_json: &str, library: ObjRef<Module>, device: DLDevice) -> Result<Arc<Plan>> {
        Plan::with_devices(graph_json, library, &[device])
    }

    /// A plan on several devices: the first is the primary one; entries go to the device of the
    /// type their `device_index` names.
    pub fn with_devices(graph_json: &str, library: ObjRef<Module>, devices: &[DLDevice]) -> Result<Arc<Plan>> {
        let device = *devices.first().ok_or_else(|| Error::value("no device given"))?;
        let graph = Graph::parse(graph_json)?;
        let graph_digest = crate::digest::xxh64(graph_json.as_bytes());
        let entry_device = entry_devices(&graph, devices)?;
        // Only the devices the graph uses, primary first.
        let mut used: Vec<DLDevice> = vec![device];
        for d in &entry_device {
            if !used.contains(d) {
                used.push(*d);
            }
        }
        let mut align = crate::tensor::ALIGNMENT;
        for &d in &used {
            let api = crate::device::api_of(d)?;
            align = align.max(api.region_alignment(d.device_id)?);
            if !crate::device::is_host(d) && !has_module_of(&library, api.name()) {
                // Host kernels would read device handles as host memory.
                return Err(Error::value(format!(
                    "this library has no {} kernels (it was built for the CPU): create the executor on the CPU",
                    api.name()
                )));
            }
        }
        let storage = StoragePlan::new(&graph)?;
        let mut slot_device = vec![device; storage.slots.len()];
        for (e, d) in graph.entries.iter().zip(&entry_device) {
            slot_device[e.storage_id] = *d;
        }
        let mut ops = Vec::new();
        for (nid, node) in graph.nodes.iter().enumerate() {
            let NodeKind::Op(attrs) = &node.kind else {
                continue;
            };
            let at = || format!("node {nid} ('{}')", node.name);
            if attrs.flatten_data {
                return Err(Error::value(format!("{}: flatten_data=1 is not supported", at())));
            }
            let mut args: Vec<usize> = node.inputs.iter().map(|&(src, idx)| graph.entry_id(src, idx)).collect();
            args.extend((0..attrs.num_outputs).map(|k| graph.entry_id(nid, k)));
            let kind = match attrs.func_name.as_str() {
                "__nop" => OpKind::Nop,
                "__copy" => OpKind::Copy,
                name => {
                    let func = Module::get_function(&library, name, true)
                        .map_err(|e| e.context(at()))?
                        .ok_or_else(|| Error::attribute(format!("{}: no such function in module: {name}", at())))?;
                    let raw = func.kernel();
                    OpKind::Kernel { func, raw }
                }
            };
            ops.push(OpPlan { node: nid, kind, args, num_inputs: node.inputs.len() });
        }
        let input_entries: Vec<usize> = graph.arg_nodes.iter().map(|&n| graph.entry_id(n, 0)).collect();
        let input_names = graph.arg_nodes.iter().enumerate().map(|(i, &n)| (graph.nodes[n].name.clone(), i)).collect();
        let output_entries: Vec<usize> = graph.heads.iter().map(|&(n, k)| graph.entry_id(n, k)).collect();
        let output_keys =
            graph.heads.iter().enumerate().map(|(i, &(n, _))| (format!("{}:{i}", graph.nodes[n].name), i)).collect();
        let mut inputs_per_slot = vec![0; storage.slots.len()];
        for &eid in &input_entries {
            inputs_per_slot[graph.entries[eid].storage_id] += 1;
        }
        let (slot_entry_ids, slot_entry_start) = entries_by_slot(&graph, storage.slots.len());
        let entry_bytes =
            graph.entries.iter().map(|e| crate::dtype::tensor_bytes(&e.shape, e.dtype)).collect::<Result<Vec<_>>>()?;
        // Every entry fits its slot: what lets the executor hand kernels and copies an entry's
        // size of memory at the slot's address without checking again.
        for (eid, e) in graph.entries.iter().enumerate() {
            assert!(storage.slots[e.storage_id].bytes >= entry_bytes[eid], "entry {eid} is larger than its slot");
        }
        let linked = crate::library::linked::linked_params(&library, &storage)?;
        let (alias_root, liveness_layout) = aliases(&graph, &storage, &ops, &input_entries);
        let mut root_bytes = vec![0usize; graph.num_entries()];
        for (e, &r) in alias_root.iter().enumerate() {
            root_bytes[r] = root_bytes[r].max(entry_bytes[e]);
        }
        if used.len() > 1 && !liveness_layout {
            return Err(Error::value(
                "a graph on several devices must alias storage as Relay does (every __nop shares its input's storage id)",
            ));
        }
        // The output region: each device's outputs in a part of their own.
        let mut output_offsets = vec![None; graph.num_entries()];
        let mut output_region_bytes = 0usize;
        let mut output_parts = Vec::new();
        for (k, &d) in used.iter().enumerate() {
            let base = output_region_bytes;
            if liveness_layout {
                for &e in &output_entries {
                    let r = alias_root[e];
                    if storage.slots[graph.entries[r].storage_id].has_own_memory()
                        || output_offsets[r].is_some()
                        || entry_device[r] != d
                    {
                        continue;
                    }
                    output_offsets[r] = Some(output_region_bytes);
                    output_region_bytes = root_bytes[r]
                        .checked_next_multiple_of(align)
                        .and_then(|b| output_region_bytes.checked_add(b.max(align)))
                        .ok_or_else(|| {
                            Error::value("the outputs of this graph add up to more memory than can be addressed")
                        })?;
                }
            }
            if k == 0 || output_region_bytes > base {
                output_parts.push(Part { device: d, base, len: output_region_bytes - base });
            }
        }
        Ok(Arc::new(Plan {
            output_offsets,
            output_region_bytes,
            linked,
            entry_bytes,
            alias_root,
            root_bytes,
            liveness_layout,
            graph,
            graph_digest,
            storage,
            ops,
            input_names,
            input_entries,
            output_entries,
            output_keys,
            inputs_per_slot,
            slot_entry_ids,
            slot_entry_start,
            output_parts,
            library,
            device,
            devices: used,
            given: devices.to_vec(),
            entry_device,
            slot_device,
            align,
        }))
    }

    /// A digest of the operator library's file (the first library module in the tree).
    pub fn library_digest(&self) -> Option<u64> {
        fn find(m: &ObjRef<Module>) -> Option<u64> {
            match m.node::<crate::library::LibraryModule>() {
                Some(lib) => lib.file_digest(),
                None => m.imports().iter().find_map(find),
            }
        }
        find(&self.library)
    }

    /// Waits until every device of the plan has finished what was queued on it.
    pub fn sync(&self) -> Result<()> {
        self.devices.iter().try_for_each(|d| crate::device::api_of(*d)?.sync(d.device_id))
    }

    pub fn num_inputs(&self) -> usize {
        self.input_entries.len()
    }

    pub fn num_outputs(&self) -> usize {
        self.output_entries.len()
    }

    pub fn input_name(&self, index: usize) -> &str {
        &self.graph.nodes[self.graph.arg_nodes[index]].name
    }

    pub fn output_name(&self, index: usize) -> &str {
        &self.graph.nodes[self.graph.heads[index].0].name
    }

    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.input_names.get(name).copied()
    }

    /// The output whose node is called `name` (the last one, as upstream).
    pub fn output_index(&self, name: &str) -> Option<usize> {
        (0..self.num_outputs()).rev().find(|&i| self.output_name(i) == name)
    }

    /// Input `index`'s entry (every executor call on an input starts here: inlined, its error out
    /// of line).
    #[inline]
    pub fn check_input(&self, index: usize) -> Result<usize> {
        match self.input_entries.get(index) {
            Some(&eid) => Ok(eid),
            None => Err(out_of_range("input", index, self.num_inputs())),
        }
    }

    #[inline]
    pub fn check_output(&self, index: usize) -> Result<usize> {
        match self.output_entries.get(index) {
            Some(&eid) => Ok(eid),
            None => Err(out_of_range("output", index, self.num_outputs())),
        }
    }

    /// Fresh zeroed memory for slot `sid` on its device: an image for a texture slot.
    pub fn new_slot_buffer(&self, sid: usize) -> Result<crate::tensor::Buffer> {
        let (device, slot) = (self.slot_device[sid], &self.storage.slots[sid]);
        match self.image_form(sid) {
            Some(f) => crate::tensor::Buffer::texture_on(device, f.texture, &f.shape, f.dtype),
            None => crate::tensor::Buffer::zeroed_on(device, slot.bytes),
        }
    }

    /// A fresh image for texture slot `sid` when its pixels are exactly `nbytes` (a weight's record
    /// written whole); `None` for plain slots and records of another size.
    pub fn new_slot_image(&self, sid: usize, nbytes: usize) -> Result<Option<crate::tensor::Buffer>> {
        let Some(t) = self.storage.slots[sid].texture else { return Ok(None) };
        // RGBA pixels of the dtype's size: what a whole-image write takes.
        let pixels = t.extent.width.checked_mul(t.extent.height);
        if pixels.and_then(|n| n.checked_mul(4 * t.dtype.element_bytes())) != Some(nbytes) {
            return Ok(None);
        }
        self.new_slot_buffer(sid).map(Some)
    }

    /// The image slot `sid` is, for a texture slot.
    pub fn image_form(&self, sid: usize) -> Option<crate::tensor::ImageForm> {
        self.storage.slots[sid].texture.map(|t| crate::tensor::ImageForm {
            texture: t.texture,
            shape: t.shape(),
            dtype: t.dtype,
        })
    }

    /// The entries living in storage slot `sid`, in entry order.
    #[inline]
    pub fn slot_entries(&self, sid: usize) -> &[usize] {
        &self.slot_entry_ids[self.slot_entry_start[sid]..self.slot_entry_start[sid + 1]]
    }

    /// A slot that only this one graph input (and its aliases) uses: safe to bind to shared memory.
    pub fn is_shareable_slot(&self, sid: usize) -> bool {
        self.storage.slots[sid].role == crate::memory_plan::SlotRole::Input && self.inputs_per_slot[sid] == 1
    }
}

/// Every entry id grouped by storage slot, in entry order within a slot, and where each slot's
/// group starts (a last element closes the last group).
fn entries_by_slot(graph: &Graph, slots: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; slots + 1];
    for e in &graph.entries {
        start[e.storage_id + 1] += 1;
    }
    for s in 0..slots {
        start[s + 1] += start[s];
    }
    let mut next = start.clone();
    let mut ids = vec![0usize; graph.entries.len()];
    for (eid, e) in graph.entries.iter().enumerate() {
        ids[next[e.storage_id]] = eid;
        next[e.storage_id] += 1;
    }
    (ids, start)
}

#[cold]
fn out_of_range(what: &str, index: usize, count: usize) -> Error {
    Error::index(format!("{what} index {index} out of range ({count} {what}s)"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::module::ModuleNode;
    use std::any::Any;

    /// A library without kernels: enough for graphs of `__nop` and `__copy`.
    struct NoKernels;

    impl ModuleNode for NoKernels {
        fn type_key(&self) -> &str {
            "test"
        }

        fn get_function(&self, _: &ObjRef<Module>, _: &str) -> Result<Option<ObjRef<PackedFunc>>> {
            Ok(None)
        }

        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// A graph of float32 [4] entries: `nodes` are (name, op, input node), op "" for an input,
    /// with the given storage ids; `heads` are node indices.
    pub(crate) fn graph(nodes: &[(&str, &str, usize)], sids: &[usize], heads: &[usize]) -> String {
        let json_nodes: Vec<String> = nodes
            .iter()
            .map(|&(name, op, input)| match op {
                "" => format!(r#"{{"op":"null","name":"{name}","inputs":[]}}"#),
                op => format!(
                    r#"{{"op":"tvm_op","name":"{name}","attrs":{{"func_name":"{op}","num_inputs":"1","num_outputs":"1","flatten_data":"0"}},"inputs":[[{input},0,0]]}}"#
                ),
            })
            .collect();
        let list = |v: Vec<String>| v.join(",");
        let n = nodes.len();
        format!(
            r#"{{"nodes":[{}],"arg_nodes":[{}],"heads":[{}],"node_row_ptr":[{}],"attrs":{{"dltype":["list_str",[{}]],"shape":["list_shape",[{}]],"storage_id":["list_int",[{}]]}}}}"#,
            list(json_nodes),
            list((0..n).filter(|&i| nodes[i].1.is_empty()).map(|i| i.to_string()).collect()),
            list(heads.iter().map(|h| format!("[{h},0,0]")).collect()),
            list((0..=n).map(|i| i.to_string()).collect()),
            list(vec!["\"float32\"".to_string(); n]),
            list(vec!["[4]".to_string(); n]),
            list(sids.iter().map(|s| s.to_string()).collect()),
        )
    }

    pub(crate) fn plan(json: &str) -> Arc<Plan> {
        crate::init();
        Plan::new(json, Module::new(NoKernels), DLDevice::CPU).unwrap()
    }

    /// x -> a (copy) -> v (__nop of a) -> out (copy); outputs v and out.
    fn chain() -> Arc<Plan> {
        plan(&graph(
            &[("x", "", 0), ("a", "__copy", 0), ("v", "__nop", 1), ("out", "__copy", 2)],
            &[0, 1, 1, 2],
            &[2, 3],
        ))
    }

    #[test]
    fn aliases_outputs_and_their_keys() {
        let p = chain();
        assert_eq!(p.alias_root, vec![0, 1, 1, 3]);
        assert!(p.liveness_layout);
        // v's memory is a's (its root); out has its own; both in the output region, 64-byte apart.
        assert_eq!(p.output_offsets, vec![None, Some(0), None, Some(64)]);
        assert_eq!(p.output_region_bytes, 128);
        assert_eq!((p.output_keys["v:0"], p.output_keys["out:1"]), (0, 1));
        assert_eq!(p.output_keys.len(), 2);
        assert_eq!((p.entry_bytes.clone(), p.root_bytes.clone()), (vec![16; 4], vec![16, 16, 0, 16]));
        assert_eq!(p.ops.iter().map(|o| o.args.clone()).collect::<Vec<_>>(), vec![vec![0, 1], vec![1, 2], vec![2, 3]]);
        assert!(p.is_shareable_slot(0) && !p.is_shareable_slot(1));
        assert_eq!((p.input_index("x"), p.input_index("a"), p.input_index("")), (Some(0), None, None));
    }

    #[test]
    fn each_slot_lists_its_entries() {
        // Slots out of entry order, one unused: x in 2, a and v (its alias) in 0, out in 3.
        let p = plan(&graph(
            &[("x", "", 0), ("a", "__copy", 0), ("v", "__nop", 1), ("out", "__copy", 2)],
            &[2, 0, 0, 3],
            &[3],
        ));
        let slots: Vec<&[usize]> = (0..p.storage.slots.len()).map(|sid| p.slot_entries(sid)).collect();
        let by_filter: Vec<Vec<usize>> = (0..p.storage.slots.len())
            .map(|sid| (0..4).filter(|&e| p.graph.entries[e].storage_id == sid).collect())
            .collect();
        assert_eq!(slots, by_filter);
        assert_eq!(slots.iter().map(|s| s.len()).sum::<usize>(), 4);
    }

    #[test]
    fn an_input_in_an_operators_storage_rules_out_the_liveness_layout() {
        // a copy writes x's storage id: laid out by storage ids, outputs with everything else.
        let p = plan(&graph(&[("x", "", 0), ("a", "__copy", 0)], &[0, 0], &[1]));
        assert!(!p.liveness_layout);
        assert_eq!((p.output_offsets.clone(), p.output_region_bytes), (vec![None, None], 0));
        assert!(!p.is_shareable_slot(0));
    }

    #[test]
    fn an_output_that_is_an_input_needs_no_region() {
        // v is a __nop of the input x: its memory is x's slot.
        let p = plan(&graph(&[("x", "", 0), ("v", "__nop", 0), ("c", "__copy", 0)], &[0, 0, 1], &[1, 2]));
        assert!(p.liveness_layout);
        assert_eq!(p.alias_root, vec![0, 0, 2]);
        assert_eq!((p.output_offsets.clone(), p.output_region_bytes), (vec![None, None, Some(0)], 64));
        // Two graph inputs in one slot: neither may be bound to shared memory.
        let two = plan(&graph(&[("x", "", 0), ("y", "", 0), ("c", "__copy", 0)], &[0, 0, 1], &[2]));
        assert_eq!(two.inputs_per_slot, vec![2, 0]);
        assert!(!two.is_shareable_slot(0));
    }
}
