//! Mutation fuzzing of the readers that take untrusted bytes — the params blob, the graph JSON,
//! the module blob, the RPC server's packets, and what an RPC server reads before and beside its
//! sessions (a client's handshake, a tracker's replies, an uploaded tar archive) — through to
//! what a host does next: an accepted
//! graph is planned, instantiated on its model's operator library and run; an accepted params blob
//! is loaded into an executor that then runs; an accepted module blob makes an executor through its
//! factory, which runs; a mutated packet is served in the middle of a real session, which goes on
//! or ends, never reaching memory or handles it did not hand out. No nightly toolchain is needed:
//! seeds come from the fixtures (and a recorded session), mutations are the classic byte-level
//! ones plus length and count fields set to extreme values.
//!
//! The oracle is more than "no panic": every accepted input must satisfy the invariants the rest
//! of the runtime relies on (each entry fits its slot, arena offsets stay inside the arena,
//! records hold exactly their tensor's bytes, a params blob round-trips), and a run either
//! succeeds with outputs of the declared sizes or fails with an error. A violated invariant
//! panics, so it is caught like any other bug. Run with the `fuzz` profile (overflow checks and
//! debug assertions on) to catch arithmetic that wraps.
//!
//! `tests/fuzz.rs` replays the seeds and a fixed number of mutations in the normal test command;
//! `cargo run --profile fuzz --example fuzz -- TARGET SECONDS` runs longer.

#![forbid(unsafe_code)]

mod server_inputs;

use crate::dlpack::{DLDataType, DLDevice};
use crate::executor::factory::{Factory, Param};
use crate::executor::layout::{Facts, Layout};
use crate::executor::plan::Plan;
use crate::executor::GraphExecutor;
use crate::graph::{Graph, NodeKind};
use crate::library::{self, blob};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::ArgsBuilder;
use crate::tensor::Weight;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Params,
    Graph,
    Blob,
    Rpc,
    Handshake,
    Tracker,
    Tar,
    Vm,
}

impl Target {
    pub const ALL: [Target; 8] = [
        Target::Params,
        Target::Graph,
        Target::Blob,
        Target::Rpc,
        Target::Handshake,
        Target::Tracker,
        Target::Tar,
        Target::Vm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::Params => "params",
            Target::Graph => "graph",
            Target::Blob => "blob",
            Target::Rpc => "rpc",
            Target::Handshake => "handshake",
            Target::Tracker => "tracker",
            Target::Tar => "tar",
            Target::Vm => "vm",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// One seed input and the operator library of the model it came from (RPC seeds: none).
pub struct Seed {
    pub bytes: Vec<u8>,
    /// RPC seeds: the handles the recorded session's reply to this packet gave out.
    handles: Vec<u64>,
    library: Option<ObjRef<Module>>,
    /// For params seeds: an executor of the model, with no weights loaded.
    executor: Option<ObjRef<Module>>,
    /// For graph seeds: each kernel's argument types in the seed graph.
    kernels: HashMap<String, Signature>,
}

/// The dtypes and shapes of an operator's arguments.
type Signature = Vec<(DLDataType, Box<[i64]>)>;

/// Each operator node's function and argument types.
fn calls(graph: &Graph) -> impl Iterator<Item = (&str, Signature)> + '_ {
    graph.nodes.iter().enumerate().filter_map(|(nid, node)| {
        // `__nop` and `__copy` are the runtime's own, checked against the entries' sizes.
        let NodeKind::Op(a) = &node.kind else { return None };
        if a.func_name.starts_with("__") {
            return None;
        }
        let args = node.inputs.iter().map(|&(n, k)| graph.entry_id(n, k));
        let args = args.chain((0..a.num_outputs).map(|k| graph.entry_id(nid, k)));
        Some((a.func_name.as_str(), args.map(|e| (graph.entries[e].dtype, graph.entries[e].shape.clone())).collect()))
    })
}

fn signatures(graph: &Graph) -> HashMap<String, Signature> {
    calls(graph).map(|(name, sig)| (name.to_string(), sig)).collect()
}

/// Whether every call in `graph` passes its function the argument types of the seed's graph.
fn keeps_kernel_types(graph: &Graph, seed: &Seed) -> bool {
    calls(graph).all(|(name, sig)| seed.kernels.get(name) == Some(&sig))
}

/// The bytecode of every VM fixture (tests/fixtures/vm/<version>/<model>/vm.so, as `save` writes it).
fn vm_seeds(dir: &std::path::Path) -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut versions: Vec<_> =
        std::fs::read_dir(dir.join("vm")).into_iter().flatten().flatten().map(|e| e.path()).collect();
    versions.sort();
    for v in versions {
        let mut models: Vec<_> = std::fs::read_dir(&v).into_iter().flatten().flatten().map(|e| e.path()).collect();
        models.sort();
        for m in models {
            let Ok(module) = library::load_file(&m.join("vm.so").to_string_lossy(), "so") else { continue };
            let Ok(exe) = crate::vm::executable_of(&module) else { continue };
            let bytes = exe.save();
            seeds.push(Seed { bytes, handles: vec![], library: None, executor: None, kernels: HashMap::new() });
        }
    }
    seeds
}

/// A bytecode file read; once accepted, written back and read again (the same program).
fn run_vm(data: &[u8]) -> bool {
    let Ok(image) = crate::vm::image::read(data) else { return false };
    let again = crate::vm::image::read(&crate::vm::image::write(&image)).expect("what was read writes back readable");
    assert_eq!(image.functions.len(), again.functions.len());
    for (a, b) in image.functions.iter().zip(&again.functions) {
        assert_eq!(a.code, b.code, "function '{}' written back differently", a.name);
    }
    true
}

/// The seeds of one target, with what running their mutations needs.
pub struct Corpus {
    pub target: Target,
    pub seeds: Vec<Seed>,
}

impl Seed {
    fn library(&self) -> ObjRef<Module> {
        self.library.clone().expect("model seeds have a library")
    }
}

impl Corpus {
    /// The seed corpus of `target`, from the committed fixtures in `dir` (models with a `lib.so`).
    pub fn load(target: Target, dir: &std::path::Path) -> Corpus {
        crate::init();
        if target == Target::Rpc {
            let seeds = rpc_script()
                .into_iter()
                .map(|(bytes, handles)| Seed { bytes, handles, library: None, executor: None, kernels: HashMap::new() })
                .collect();
            return Corpus { target, seeds };
        }
        if let Some(seeds) = server_inputs::seeds(target) {
            let seeds = seeds
                .into_iter()
                .map(|bytes| Seed { bytes, handles: vec![], library: None, executor: None, kernels: HashMap::new() })
                .collect();
            return Corpus { target, seeds };
        }
        if target == Target::Vm {
            return Corpus { target, seeds: vm_seeds(dir) };
        }
        let mut models: Vec<_> =
            std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
        models.sort();
        let mut seeds = Vec::new();
        for m in models {
            let lib_path = m.join("lib.so").to_string_lossy().into_owned();
            let Ok(library) = library::load_file(&lib_path, "so") else { continue };
            let read = |f: &str| std::fs::read(m.join(f)).ok();
            let seed = match target {
                Target::Params => read("params.bin").and_then(|bytes| {
                    let graph = std::fs::read_to_string(m.join("graph.json")).ok()?;
                    let executor = GraphExecutor::create(&graph, library.clone(), DLDevice::CPU).ok()?;
                    Some(Seed {
                        bytes,
                        handles: vec![],
                        library: Some(library.clone()),
                        executor: Some(executor),
                        kernels: HashMap::new(),
                    })
                }),
                Target::Graph => read("graph.json").and_then(|bytes| {
                    let kernels = signatures(&Graph::parse(std::str::from_utf8(&bytes).ok()?).ok()?);
                    Some(Seed { bytes, handles: vec![], library: Some(library), executor: None, kernels })
                }),
                // Big blobs (bound weights) slow every iteration down; the small ones cover the
                // same code.
                Target::Blob => library::read_module_blob(&lib_path)
                    .ok()
                    .filter(|b| !b.is_empty() && b.len() < 64 * 1024)
                    .and_then(|bytes| {
                        let root = blob::load_tree(&bytes, library.clone()).ok()?;
                        let kernels = signatures(&Graph::parse(factory_graph(&root)?).ok()?);
                        Some(Seed { bytes, handles: vec![], library: Some(library), executor: None, kernels })
                    }),
                Target::Rpc | Target::Handshake | Target::Tracker | Target::Tar | Target::Vm => {
                    unreachable!("these seeds are made, not read from the fixtures")
                }
            };
            seeds.extend(seed);
        }
        Corpus { target, seeds }
    }

    /// Feeds one input derived from seed `k`; returns whether it was accepted. Panics (a reader
    /// panicking or an invariant failing) are the caller's to catch.
    pub fn run(&self, k: usize, data: &[u8]) -> bool {
        let seed = &self.seeds[k];
        match self.target {
            Target::Params => run_params(data, seed.executor.as_ref().expect("params seeds have an executor")),
            Target::Graph => std::str::from_utf8(data).is_ok_and(|json| run_graph(json, seed)),
            Target::Blob => run_blob(data, seed),
            Target::Rpc => run_rpc(k, data, &self.seeds),
            Target::Handshake => server_inputs::run_handshake(data),
            Target::Tracker => crate::rpc::tracker::converse(data).is_ok(),
            Target::Tar => server_inputs::run_tar(data),
            Target::Vm => run_vm(data),
        }
    }

    /// Runs `iterations` mutations of the seeds (round robin); returns the counts of inputs and
    /// accepted inputs, or the first input that panicked.
    pub fn campaign(&self, iterations: u64, seed: u64) -> Result<(u64, u64), Vec<u8>> {
        let mut rng = Rng::new(seed);
        let mut accepted = 0;
        for k in 0..self.seeds.len() {
            self.check(k, &self.seeds[k].bytes)?;
        }
        for i in 0..iterations {
            let k = (i as usize) % self.seeds.len();
            let input = mutate(&self.seeds[k].bytes, &mut rng);
            if self.check(k, &input)? {
                accepted += 1;
            }
        }
        Ok((iterations, accepted))
    }

    fn check(&self, k: usize, input: &[u8]) -> Result<bool, Vec<u8>> {
        // A crash (not a panic) ends the process: with this set, the input that caused it is on disk.
        if let Some(path) = std::env::var_os("TVMRT_FUZZ_LAST") {
            let _ = std::fs::write(path, input);
        }
        catch_unwind(AssertUnwindSafe(|| self.run(k, input))).map_err(|_| input.to_vec())
    }
}

/// A params blob: parsed records hold exactly their tensors' bytes and survive a save and parse
/// unchanged; loaded into an executor, it either fits (and the executor runs) or is refused.
fn run_params(data: &[u8], executor: &ObjRef<Module>) -> bool {
    let Ok(records) = crate::params::parse(data) else { return false };
    let mut arrays = Vec::new();
    for (name, rec) in &records {
        let bytes = crate::dtype::tensor_bytes(&rec.shape, rec.dtype).expect("an accepted record has a size");
        assert_eq!(bytes, rec.data.len(), "record '{name}' holds {} bytes for {bytes}", rec.data.len());
        arrays.push((*name, rec.to_ndarray().expect("an accepted record makes an array")));
    }
    let saved = crate::params::save(arrays.iter().map(|(n, a)| (*n, &**a)));
    let again = crate::params::parse(&saved).expect("a saved blob parses");
    assert_eq!(again.len(), records.len(), "round trip changed the record count");
    for ((n1, r1), (n2, r2)) in records.iter().zip(&again) {
        assert!(n1 == n2 && r1.dtype == r2.dtype && r1.shape == r2.shape && r1.data == r2.data, "'{n1}' changed");
    }
    let ex = executor.node::<GraphExecutor>().expect("an executor");
    if ex.load_params(data).is_ok() {
        ex.run().expect("an executor whose weights loaded runs");
    }
    true
}

/// A graph: planned on its model's library, every entry fits its slot and the arena holds every
/// activation slot; the executor runs or fails with an error.
///
/// It runs only when every kernel keeps the argument types it was compiled for. A kernel trusts
/// those (the graph and library come from one build): not every generated kernel checks each
/// output's shape before writing it, so a graph that lies about shapes to its own library is
/// outside what a runtime can defend against.
fn run_graph(json: &str, seed: &Seed) -> bool {
    let Ok(graph) = Graph::parse(json) else { return false };
    let Ok(plan) = Plan::new(json, seed.library(), DLDevice::CPU) else { return false };
    for (eid, e) in graph.entries.iter().enumerate() {
        let slot = &plan.storage.slots[e.storage_id];
        assert!(slot.bytes >= plan.entry_bytes[eid], "entry {eid} does not fit its slot");
        assert!(slot.bytes % 4 == 0, "slot sizes are rounded to 4 bytes");
    }
    // Laid out with no weight known, and with every input a weight (the most folding).
    let redirected = vec![false; graph.num_entries()];
    for constant in [false, true] {
        let constant_slot = vec![constant; plan.storage.slots.len()];
        let facts = Facts {
            constant_slot: &constant_slot,
            weight_slot: &constant_slot,
            redirected: &redirected,
            fold: true,
            keep_all: false,
        };
        if let Ok(layout) = Layout::new(&plan, &facts) {
            if let Err(e) = layout.verify(&plan) {
                panic!("layout broken: {e}");
            }
        }
    }
    for op in &plan.ops {
        let node = &plan.graph.nodes[op.node];
        assert_eq!(op.args.len(), node.inputs.len() + plan.graph.num_node_outputs(op.node));
    }
    if !keeps_kernel_types(&graph, seed) {
        return true;
    }
    let Ok(ex) = GraphExecutor::new(plan.clone()) else { return true };
    if ex.run().is_ok() {
        for k in 0..plan.num_outputs() {
            let out = ex.output(k).expect("outputs of a run are readable");
            assert_eq!(out.nbytes(), plan.entry_bytes[plan.output_entries[k]]);
        }
    }
    // Every input a weight (zeros): all that can fold folds, and the outputs must be the bytes the
    // same graph gives with folding off.
    let outputs = |fold: bool| -> Option<Vec<Vec<u8>>> {
        let ex = GraphExecutor::new(plan.clone()).ok()?;
        ex.set_fold_weights(fold).ok()?;
        let mut params = Vec::new();
        for i in 0..plan.num_inputs() {
            let e = &plan.graph.entries[plan.input_entries[i]];
            let weight = Arc::new(Weight::padded(&[], plan.entry_bytes[plan.input_entries[i]]).ok()?);
            params.push(Param { name: plan.input_name(i).to_string(), dtype: e.dtype, shape: e.shape.clone(), weight });
        }
        ex.bind_params(&params).ok()?;
        ex.run().ok()?;
        (0..plan.num_outputs()).map(|k| ex.output(k).ok().map(|o| o.to_vec())).collect()
    };
    let (folded, plain) = (outputs(true), outputs(false));
    assert_eq!(folded.is_some(), plain.is_some(), "folding changed whether the graph runs");
    assert!(folded == plain, "folding changed an output");
    true
}

fn factory_graph(root: &ObjRef<Module>) -> Option<&str> {
    root.node::<Factory>().map(Factory::graph_json)
}

/// A module blob: its tree loads over the model's library; a factory in it makes an executor that
/// runs or fails with an error (when its kernels keep their argument types, as in `run_graph`).
fn run_blob(data: &[u8], seed: &Seed) -> bool {
    let Ok(root) = blob::load_tree(data, seed.library()) else { return false };
    let same_kernels =
        factory_graph(&root).and_then(|json| Graph::parse(json).ok()).is_some_and(|g| keeps_kernel_types(&g, seed));
    if !same_kernels {
        return true;
    }
    if let Ok(Some(default)) = Module::get_function(&root, "default", false) {
        let mut args = ArgsBuilder::new();
        args.device(DLDevice::CPU);
        if let Ok(m) = default.call(&args.args()).and_then(|r| r.into_object::<Module>()) {
            let ex = m.node::<GraphExecutor>().expect("the factory makes executors");
            let _ = ex.run();
        }
    }
    true
}

/// The handles a reply gives out, in order.
fn handles_in(reply: &[u8]) -> Vec<u64> {
    use crate::rpc::packet::Packet;
    use crate::rpc::wire::Value;
    match Packet::decode(&reply[8..]) {
        Ok(Packet::Return(values)) => {
            values.iter().filter_map(|v| if let Value::Handle(h) = v { Some(*h) } else { None }).collect()
        }
        _ => vec![],
    }
}

/// The packet bodies of a short real session (init, a global looked up, memory allocated,
/// written, read, a call on it, a copy among remote tensors, a sync, handles and memory freed),
/// each with the handles its reply gave out.
pub fn rpc_script() -> Vec<(Vec<u8>, Vec<u64>)> {
    use crate::rpc::packet::{code, Packet, PROTOCOL_VERSION};
    use crate::rpc::server::{Session, Step};
    use crate::rpc::wire::{Value, WireTensor};
    let cpu = DLDevice::CPU;
    let mut s = Session::new("fuzz");
    let mut script = Vec::new();
    let mut send = |s: &mut Session, p: Packet<'_>| -> Vec<Value> {
        let bytes = p.encode();
        let Step::Send(reply) = s.handle(&bytes[8..]) else { panic!("the script's session ended") };
        script.push((bytes[8..].to_vec(), handles_in(&reply)));
        match Packet::decode(&reply[8..]).expect("the server's reply") {
            Packet::Return(v) => v,
            Packet::CopyAck(b) => vec![Value::Bytes(b.to_vec())],
            other => panic!("the script's packet was refused: {other:?}"),
        }
    };
    let handle = |v: &[Value]| match v {
        [Value::Handle(h)] => *h,
        other => panic!("a handle, not {other:?}"),
    };
    send(&mut s, Packet::InitServer { version: PROTOCOL_VERSION.into(), args: vec![] });
    let sort = Value::Str("tvm.contrib.sort.sort".into());
    let f = handle(&send(&mut s, Packet::Syscall { code: code::GET_GLOBAL_FUNC, args: vec![sort] }));
    let mut alloc = |s: &mut Session| {
        let args = vec![Value::Device(cpu), Value::Int(64), Value::Int(64), Value::DataType(DLDataType::F32)];
        handle(&send(s, Packet::Syscall { code: code::DEV_ALLOC_DATA, args }))
    };
    let (a, b) = (alloc(&mut s), alloc(&mut s));
    let t = |data| WireTensor { data, device: cpu, dtype: DLDataType::F32, shape: vec![16], byte_offset: 0 };
    send(&mut s, Packet::CopyToRemote { tensor: t(a), data: &[7u8; 64] });
    send(&mut s, Packet::CopyFromRemote { tensor: t(a), nbytes: 64 });
    let args = vec![Value::Tensor(t(a)), Value::Tensor(t(b)), Value::Int(0), Value::Int(1)];
    send(&mut s, Packet::CallFunc { func: f, args });
    let args = vec![Value::Tensor(t(b)), Value::Tensor(t(a)), Value::Handle(0)];
    send(&mut s, Packet::Syscall { code: code::COPY_AMONG_REMOTE, args });
    send(&mut s, Packet::Syscall { code: code::DEV_STREAM_SYNC, args: vec![Value::Device(cpu), Value::Handle(0)] });
    send(&mut s, Packet::Syscall { code: code::FREE_HANDLE, args: vec![Value::Handle(f), Value::Int(10)] });
    for h in [a, b] {
        send(&mut s, Packet::Syscall { code: code::DEV_FREE_DATA, args: vec![Value::Device(cpu), Value::Handle(h)] });
    }
    script
}

/// The session's packets with packet `k` replaced by `data`, served by a fresh session: each is
/// answered with a well-formed packet (a reply or an exception) or ends the session; never a
/// panic. Accepted: the session served every packet.
fn run_rpc(k: usize, data: &[u8], script: &[Seed]) -> bool {
    use crate::rpc::packet::Packet;
    use crate::rpc::server::{Session, Step};
    let well_formed = |reply: &[u8]| {
        let n = u64::from_le_bytes(reply[..8].try_into().expect("a length"));
        assert_eq!(n as usize, reply.len() - 8, "a reply's length field");
        assert!(Packet::decode(&reply[8..]).is_ok(), "a reply the server cannot decode");
    };
    // Handles are the server's pointers: each packet names this session's, not the recording's.
    // Renamed in one pass: one by one, a new handle equal to a recorded one would be renamed again.
    let mut renamed: HashMap<[u8; 8], [u8; 8]> = HashMap::new();
    let mut s = Session::new("fuzz");
    script.iter().enumerate().all(|(i, seed)| {
        let mut body = if i == k { data.to_vec() } else { seed.bytes.clone() };
        replace_all(&mut body, &renamed);
        match s.handle(&body) {
            Step::Send(reply) => {
                well_formed(&reply);
                let given = handles_in(&reply);
                if given.len() == seed.handles.len() {
                    let pairs = seed.handles.iter().zip(&given).map(|(o, n)| (o.to_le_bytes(), n.to_le_bytes()));
                    renamed.extend(pairs);
                }
                true
            }
            Step::SendAndClose(reply) => {
                well_formed(&reply);
                false
            }
            Step::Close => false,
        }
    })
}

fn replace_all(bytes: &mut [u8], renamed: &HashMap<[u8; 8], [u8; 8]>) {
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let word: [u8; 8] = bytes[i..i + 8].try_into().expect("eight bytes");
        if let Some(new) = renamed.get(&word) {
            bytes[i..i + 8].copy_from_slice(new);
            i += 8;
        } else {
            i += 1;
        }
    }
}

/// xorshift64*: reproducible, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

const INTERESTING_U64: [u64; 8] = [0, 1, 2, 0x7f, 0x8000_0000, u32::MAX as u64, 1 << 40, u64::MAX];

/// One to four mutations of `seed`.
pub fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = d.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = [0u8, 0xff, 0x7f, 0x80, b'"', b'[', b'-', b'9'][rng.below(8)];
            }
            2 => d.truncate(rng.below(len + 1)),
            3 if len >= 8 => {
                // A length or count field: dmlc streams put them on 8-byte boundaries.
                let i = rng.below(len / 8) * 8;
                let v = INTERESTING_U64[rng.below(INTERESTING_U64.len())];
                d[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            4 if len > 0 => {
                let (a, b) = (rng.below(len), rng.below(len));
                let (lo, hi) = (a.min(b), a.max(b).min(lo_plus(a.min(b), 64)));
                let chunk = d[lo..hi].to_vec();
                let at = rng.below(len);
                d.splice(at..at, chunk);
            }
            5 if len > 0 => {
                let i = rng.below(len);
                d.remove(i);
            }
            6 => {
                let n = 1 + rng.below(16);
                d.extend((0..n).map(|_| rng.next_u64() as u8));
            }
            _ if len > 0 => {
                // A decimal number in JSON text becomes an extreme one.
                let i = rng.below(len);
                if d[i].is_ascii_digit() {
                    let v = ["-1", "99999999999999999999", "4294967296", "0"][rng.below(4)];
                    d.splice(i..i + 1, v.bytes());
                }
            }
            _ => {}
        }
    }
    d
}

fn lo_plus(lo: usize, n: usize) -> usize {
    lo.saturating_add(n)
}
