//! RPC in one process: a client session over a socket pair to a server thread (`rpc.LocalSession`)
//! loads a model remotely, runs it on a remote device with arrays there, times it remotely, and
//! gets remote errors as RPCError; the server refuses what the client was never given. The
//! serving session is fuzzed with the packets of a real session, each mutated in turn: errors
//! are fine, a panic (or a crash) is not. TVM's own clients and servers are in
//! tests/python/test_rpc.py.

mod common;

use common::*;
use tvm_runtime::dlpack::{DLDataType, DLDevice};
use tvm_runtime::fuzzing::{Corpus, Target};
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::{registry, ArgsBuilder, PackedFunc, RetValue};
use tvm_runtime::rpc::packet::{code, Packet, PROTOCOL_VERSION};
use tvm_runtime::rpc::server::{Session, Step};
use tvm_runtime::rpc::wire::{Value, WireTensor};
use tvm_runtime::tensor::NDArray;

fn global(name: &str) -> ObjRef<PackedFunc> {
    tvm_runtime::init();
    registry::get(name).unwrap_or_else(|| panic!("no global {name}"))
}

fn remote_fn(m: &ObjRef<Module>, name: &str) -> ObjRef<PackedFunc> {
    Module::get_function(m, name, true).unwrap().unwrap_or_else(|| panic!("no remote function {name}"))
}

#[test]
fn a_model_runs_on_a_remote_device() {
    let f = Fixture::load("mlp_unbound_b1");
    let session = global("rpc.LocalSession").call(&ArgsBuilder::new().args()).unwrap().into_object::<Module>().unwrap();
    assert_eq!(session.type_key(), "rpc");
    let mut a = ArgsBuilder::new();
    a.object(session.clone().into_any());
    let RetValue::Int(index) = global("rpc.SessTableIndex").call(&a.args()).unwrap() else { panic!("an index") };
    let remote_cpu = DLDevice { device_type: 1 + 128 * (index as i32 + 1), device_id: 0 };
    let load = remote_fn(&session, "runtime.ModuleLoadFromFile");
    let mut a = ArgsBuilder::new();
    a.str(&f.lib_path()).str("so");
    let lib = load.call(&a.args()).unwrap().into_object::<Module>().unwrap();
    assert_eq!(lib.type_key(), "rpc");
    let mut a = ArgsBuilder::new();
    a.str(&f.graph_json()).object(lib.into_any()).int(1).int(0);
    let ex = remote_fn(&session, "tvm.graph_executor.create").call(&a.args()).unwrap().into_object::<Module>().unwrap();
    let call = |name: &str, build: &dyn Fn(&mut ArgsBuilder)| {
        let mut a = ArgsBuilder::new();
        build(&mut a);
        remote_fn(&ex, name).call(&a.args())
    };
    call("load_params", &|a| {
        a.bytes(&f.params());
    })
    .unwrap();
    for t in &f.inputs {
        let arr = NDArray::empty(&t.shape, t.dtype, remote_cpu).unwrap();
        // SAFETY: a new array nobody else uses.
        unsafe { arr.copy_from_bytes(&t.data) }.unwrap();
        assert_eq!(arr.to_vec(), t.data, "host -> remote -> host");
        call("set_input", &|a| {
            a.str(&t.name).object(arr.clone().into_any());
        })
        .unwrap();
    }
    call("run", &|_| {}).unwrap();
    for (k, want) in f.outputs.iter().enumerate() {
        let out = call("get_output", &|a| {
            a.int(k as i64);
        })
        .unwrap()
        .into_object::<NDArray>()
        .unwrap();
        assert_eq!(out.device(), remote_cpu);
        assert_eq!(out.to_vec(), want.data, "output {k} is upstream's");
        // A remote copy into a remote array, then back.
        let copy = NDArray::empty(&want.shape, want.dtype, remote_cpu).unwrap();
        // SAFETY: both arrays are ours and idle.
        unsafe { tvm_runtime::tensor::raw::copy_tensor(out.raw(), copy.raw()) }.unwrap();
        assert_eq!(copy.to_vec(), want.data);
    }
    // Timed by the server: `repeat` seconds-per-call values come back as bytes.
    let mut a = ArgsBuilder::new();
    a.object(ex.clone().into_any()).str("run").int(remote_cpu.device_type as i64).int(0);
    for v in [3, 2, 0, 100, 0, 1, 0] {
        a.int(v);
    }
    a.str("");
    let timer = global("runtime.RPCTimeEvaluator").call(&a.args()).unwrap().into_object::<PackedFunc>().unwrap();
    let RetValue::Bytes(times) = timer.call(&ArgsBuilder::new().args()).unwrap() else { panic!("bytes") };
    assert_eq!(times.len(), 16);
    assert!(times.chunks(8).all(|c| f64::from_ne_bytes(c.try_into().unwrap()) > 0.0));
    // A remote failure is an RPCError carrying the server's message.
    let e = call("get_output", &|a| {
        a.int(99);
    })
    .unwrap_err()
    .to_c_message();
    assert!(e.starts_with("RPCError: Error caught from RPC call:\n") && e.contains("99"), "{e}");
    // A local array cannot go to the remote.
    let local = NDArray::empty(&[1], DLDataType::F32, DLDevice::CPU).unwrap();
    let e = call("set_input", &|a| {
        a.str("data").object(local.clone().into_any());
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("local"), "{e}");
}

/// Streams of a remote device are the server's: made there (a queue of its own on OpenCL), made
/// current for the session, waited for, copies queued on them, freed; a freed one is refused (and,
/// named again, ends the session as any handle it never gave out).
#[test]
fn remote_streams_are_the_servers() {
    if !have_opencl() {
        return;
    }
    let session = global("rpc.LocalSession").call(&ArgsBuilder::new().args()).unwrap().into_object::<Module>().unwrap();
    let mut a = ArgsBuilder::new();
    a.object(session.clone().into_any());
    let RetValue::Int(index) = global("rpc.SessTableIndex").call(&a.args()).unwrap() else { panic!("an index") };
    let remote_cl = DLDevice { device_type: 4 + 128 * (index as i32 + 1), device_id: 0 };
    let api = tvm_runtime::device::api_of(remote_cl).unwrap();
    let s = api.create_stream(0).unwrap();
    assert!(!s.is_null(), "a stream of the server's own");
    api.set_stream(0, s).unwrap();
    let data: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let (x, y) = (
        NDArray::empty(&[64], DLDataType::F32, remote_cl).unwrap(),
        NDArray::empty(&[64], DLDataType::F32, remote_cl).unwrap(),
    );
    // SAFETY: new arrays nobody else uses.
    unsafe { x.copy_from_bytes(&data) }.unwrap();
    // SAFETY: both arrays are ours and idle.
    unsafe { tvm_runtime::tensor::raw::copy_tensor(x.raw(), y.raw()) }.unwrap();
    api.sync_stream(0, s).unwrap();
    assert_eq!(y.to_vec(), data, "a copy queued on the session's stream");
    api.sync_stream_from_to(0, s, std::ptr::null_mut()).unwrap();
    api.set_stream(0, std::ptr::null_mut()).unwrap();
    api.free_stream(0, s).unwrap();
    api.free_stream(0, std::ptr::null_mut()).unwrap();
    let e = api.sync_stream(0, s).unwrap_err().to_string();
    assert!(e.contains("never handed out"), "{e}");
}

/// Each packet of a real session mutated in turn (the others as they were): the session answers
/// with well-formed packets or ends, it never panics, and it never reaches memory it did not hand
/// out (a crash would end the test process). `cargo run --example fuzz -- rpc SECONDS` runs longer.
#[test]
fn no_packet_crashes_the_server() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let corpus = Corpus::load(Target::Rpc, &dir);
    assert_eq!(corpus.seeds.len(), 12, "the session's packets");
    for (k, seed) in corpus.seeds.iter().enumerate() {
        assert!(corpus.run(k, &seed.bytes), "the recorded session replays to the end (packet {k} as recorded)");
    }
    match corpus.campaign(600, 0x5eed) {
        Ok((n, accepted)) => assert!(accepted > 0 && accepted < n, "{accepted} of {n} sessions served to the end"),
        Err(input) => panic!("a packet of {} bytes panicked: {:02x?}", input.len(), &input[..input.len().min(48)]),
    }
}

/// What a client was never given is refused, and ends the session.
#[test]
fn unknown_handles_and_memory_end_the_session() {
    tvm_runtime::init();
    let hostile = [
        Packet::CallFunc { func: 0x1234, args: vec![] },
        Packet::Syscall { code: code::FREE_HANDLE, args: vec![Value::Handle(0x1234), Value::Int(10)] },
        Packet::Syscall { code: code::DEV_FREE_DATA, args: vec![Value::Device(DLDevice::CPU), Value::Handle(0x1000)] },
        Packet::CopyFromRemote {
            tensor: WireTensor {
                data: 0x1000,
                device: DLDevice::CPU,
                dtype: DLDataType::F32,
                shape: vec![4],
                byte_offset: 0,
            },
            nbytes: 16,
        },
        Packet::Syscall { code: code::DEV_ALLOC_DATA, args: vec![Value::Int(1)] },
        Packet::Syscall { code: 99, args: vec![] },
        Packet::Return(vec![]),
    ];
    for p in hostile {
        let mut s = Session::new("hostile");
        let init = Packet::InitServer { version: PROTOCOL_VERSION.into(), args: vec![] }.encode();
        assert!(matches!(s.handle(&init[8..]), Step::Send(_)));
        let bytes = p.encode();
        match s.handle(&bytes[8..]) {
            Step::SendAndClose(reply) => {
                let Packet::Exception(msg) = Packet::decode(&reply[8..]).unwrap() else { panic!("an exception") };
                assert!(!msg.is_empty());
            }
            other => panic!("{p:?} answered {other:?}"),
        }
    }
    // Before init, and with another protocol version.
    let mut s = Session::new("x");
    let call = Packet::Syscall { code: code::GET_GLOBAL_FUNC, args: vec![Value::Str("a".into())] }.encode();
    assert!(matches!(s.handle(&call[8..]), Step::SendAndClose(_)));
    let old = Packet::InitServer { version: "0.7.0".into(), args: vec![] }.encode();
    let Step::SendAndClose(reply) = Session::new("x").handle(&old[8..]) else { panic!("refused") };
    assert!(format!("{:?}", Packet::decode(&reply[8..]).unwrap()).contains("protocol version mismatch"));
}

/// A packet's reply in a session already initialised.
fn reply_to(s: &mut Session, p: Packet<'_>) -> Vec<u8> {
    let bytes = p.encode();
    match s.handle(&bytes[8..]) {
        Step::Send(reply) => reply,
        other => panic!("{p:?} answered {other:?}"),
    }
}

fn initialised() -> Session {
    tvm_runtime::init();
    let mut s = Session::new("t");
    reply_to(&mut s, Packet::InitServer { version: PROTOCOL_VERSION.into(), args: vec![] });
    s
}

/// Empty allocations are allocations like any other: each its own handle, each freed once.
#[test]
fn empty_allocations_have_handles_of_their_own() {
    let mut s = initialised();
    let alloc = |s: &mut Session| {
        let args = vec![Value::Device(DLDevice::CPU), Value::Int(0), Value::Int(64), Value::DataType(DLDataType::F32)];
        let reply = reply_to(s, Packet::Syscall { code: code::DEV_ALLOC_DATA, args });
        let Packet::Return(v) = Packet::decode(&reply[8..]).unwrap() else { panic!("a return") };
        let [Value::Handle(h)] = v[..] else { panic!("a handle: {v:?}") };
        h
    };
    let (a, b) = (alloc(&mut s), alloc(&mut s));
    assert_ne!(a, b, "two empty allocations, one handle");
    for h in [a, b] {
        let free =
            Packet::Syscall { code: code::DEV_FREE_DATA, args: vec![Value::Device(DLDevice::CPU), Value::Handle(h)] };
        let reply = reply_to(&mut s, free);
        assert!(matches!(Packet::decode(&reply[8..]).unwrap(), Packet::Return(_)), "freeing {h:#x}");
    }
    // Nothing of an empty allocation can be read.
    let c = alloc(&mut s);
    let t = WireTensor { data: c, device: DLDevice::CPU, dtype: DLDataType::F32, shape: vec![1], byte_offset: 0 };
    let bytes = Packet::CopyFromRemote { tensor: t, nbytes: 4 }.encode();
    assert!(matches!(s.handle(&bytes[8..]), Step::SendAndClose(_)));
}

/// An array in texture memory made over RPC (`runtime.TVMArrayAllocWithScope`) is filled and read
/// back whole; a part of it (images are not byte-addressed) is refused with a message.
#[test]
fn texture_arrays_made_remotely_are_copied_whole() {
    if !have_opencl() {
        return;
    }
    let session = global("rpc.LocalSession").call(&ArgsBuilder::new().args()).unwrap().into_object::<Module>().unwrap();
    let mut a = ArgsBuilder::new();
    a.object(session.clone().into_any());
    let RetValue::Int(index) = global("rpc.SessTableIndex").call(&a.args()).unwrap() else { panic!("an index") };
    let remote_cl = DLDevice { device_type: 4 + 128 * (index as i32 + 1), device_id: 0 };
    let mut a = ArgsBuilder::new();
    a.int(1).int(2).int(3).int(4);
    let shape = remote_fn(&session, "runtime.ShapeTuple").call(&a.args()).unwrap();
    let RetValue::Object(shape) = shape else { panic!("a shape") };
    let mut a = ArgsBuilder::new();
    a.object(shape).str("float32").device(remote_cl).str("global.texture");
    let arr = remote_fn(&session, "runtime.TVMArrayAllocWithScope")
        .call(&a.args())
        .unwrap()
        .into_object::<NDArray>()
        .unwrap();
    let data: Vec<u8> = (0..24u32).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    // SAFETY: a new array nobody else uses.
    unsafe { arr.copy_from_bytes(&data) }.unwrap();
    assert_eq!(arr.to_vec(), data, "host -> remote texture -> host");
    // A copy of part of it, as a chunked copy would address it: refused, the session goes on.
    let mut s = initialised();
    let f = Packet::Syscall {
        code: code::GET_GLOBAL_FUNC,
        args: vec![Value::Str("runtime.TVMArrayAllocWithScope".into())],
    };
    let reply = reply_to(&mut s, f);
    let Packet::Return(v) = Packet::decode(&reply[8..]).unwrap() else { panic!() };
    let [Value::Handle(f)] = v[..] else { panic!("{v:?}") };
    let shape_fn = Packet::Syscall { code: code::GET_GLOBAL_FUNC, args: vec![Value::Str("runtime.ShapeTuple".into())] };
    let reply = reply_to(&mut s, shape_fn);
    let Packet::Return(v) = Packet::decode(&reply[8..]).unwrap() else { panic!() };
    let [Value::Handle(shape_fn)] = v[..] else { panic!("{v:?}") };
    let reply =
        reply_to(&mut s, Packet::CallFunc { func: shape_fn, args: vec![Value::Int(2), Value::Int(1), Value::Int(4)] });
    let Packet::Return(v) = Packet::decode(&reply[8..]).unwrap() else { panic!() };
    let shape_handle = v[1].clone();
    let Value::Handle(shape_handle) = shape_handle else { panic!("{v:?}") };
    let cl = DLDevice { device_type: 4, device_id: 0 };
    let args = vec![
        Value::Object { type_index: tvm_runtime::rpc::wire::RPC_OBJECT_TYPE_INDEX, handle: shape_handle },
        Value::Str("float32".into()),
        Value::Device(cl),
        Value::Str("global.texture".into()),
    ];
    let reply = reply_to(&mut s, Packet::CallFunc { func: f, args });
    let Packet::Return(v) = Packet::decode(&reply[8..]).unwrap() else { panic!("{:?}", Packet::decode(&reply[8..])) };
    let Value::Tensor(t) = v[1].clone() else { panic!("{v:?}") };
    let whole = Packet::CopyToRemote { tensor: t.clone(), data: &[1u8; 32] };
    assert!(matches!(Packet::decode(&reply_to(&mut s, whole)[8..]).unwrap(), Packet::Return(_)));
    let part = Packet::CopyToRemote { tensor: WireTensor { byte_offset: 16, ..t.clone() }, data: &[1u8; 16] };
    let Packet::Exception(msg) = Packet::decode(&reply_to(&mut s, part)[8..]).unwrap() else { panic!("refused") };
    assert!(msg.contains("texture memory is copied whole"), "{msg}");
    let back = Packet::CopyFromRemote { tensor: t, nbytes: 32 };
    let reply = reply_to(&mut s, back);
    let Packet::CopyAck(bytes) = Packet::decode(&reply[8..]).unwrap() else { panic!() };
    assert_eq!(bytes, &[1u8; 32]);
}
