//! The RPC globals a server program and TVM's Python server call: `rpc.ServerLoop`,
//! `rpc.ReturnException`, the work directory's `tvm.rpc.server.upload` / `download` / `remove`
//! (through the program's `tvm.rpc.server.workpath`), `tvm.rpc.server.ImportModule` and
//! `ModuleGetFunction`, and `cache_flush_cpu_non_first_arg` for remote timing.

use super::{def, Register};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::module::ModuleArg;
use crate::packed::{registry, Args, ArgsBuilder, RetValue};
use crate::rpc::client;
use crate::rpc::session::ClientSession;
use crate::rpc::{self, packet::Packet};

pub fn register(reg: &mut Register<'_>) {
    def(reg, "rpc.ServerLoop", server_loop);
    def(reg, "rpc.ReturnException", |a| {
        a.expect_count("ReturnException", 2, 2)?;
        let fd = a.int32(0)?;
        rpc::fd::write_borrowed(fd, &Packet::Exception(a.str(1)?.to_string()).encode()).map(|()| RetValue::None)
    });
    def(reg, "tvm.rpc.server.upload", |a| {
        a.expect_count("upload", 2, 2)?;
        let path = workpath(a.str(0)?)?;
        // Whole or not at all, and never into a file a session has loaded: its mapped pages stay.
        crate::files::write_whole(std::path::Path::new(&path), a.bytes(1)?)?;
        Ok(RetValue::None)
    });
    def(reg, "tvm.rpc.server.download", |a| {
        a.expect_count("download", 1, 1)?;
        let path = workpath(a.str(0)?)?;
        crate::files::read(std::path::Path::new(&path)).map(RetValue::Bytes)
    });
    def(reg, "tvm.rpc.server.remove", |a| {
        a.expect_count("remove", 1, 1)?;
        let path = workpath(a.str(0)?)?;
        crate::files::remove(std::path::Path::new(&path)).map(|()| RetValue::None)
    });
    def(reg, "tvm.rpc.server.ImportModule", |a| {
        a.expect_count("ImportModule", 2, 2)?;
        Module::import(&a.module(0)?, a.module(1)?).map(|()| RetValue::None)
    });
    def(reg, "tvm.rpc.server.ModuleGetFunction", |a| {
        a.expect_count("ModuleGetFunction", 2, 3)?;
        let query_imports = a.len() < 3 || a.int(2)? != 0;
        let name = a.str(1)?;
        Ok(Module::get_function(&a.module(0)?, name, query_imports)?.map_or(RetValue::None, Into::into))
    });
    def(reg, "cache_flush_cpu_non_first_arg", crate::cache_flush::flush_non_first_args);
    def(reg, "rpc.Connect", connect);
    def(reg, "rpc.LocalSession", |_| {
        // An in-process server over a socket pair: the same protocol as a remote one.
        let (client, server) =
            std::os::unix::net::UnixStream::pair().map_err(|e| Error::tvm(format!("rpc.LocalSession: {e}")))?;
        std::thread::spawn(move || {
            if let Err(e) = rpc::serve(server, "LocalSession") {
                eprintln!("rpc.LocalSession: {e}");
            }
        });
        let session = ClientSession::start(Box::new(client), "local", Vec::new())?;
        Ok(client::remote_module(&session, None).into())
    });
    def(reg, "rpc.SessTableIndex", |a| Ok(RetValue::Int(rpc_session(a, 0)?.index() as i64)));
    def(reg, "rpc.LoadRemoteModule", |a| {
        // TVM 0.16 passes (session, path); the hhb wheel adds options and a compiler: only the path
        // goes to the server's load_module, which takes one.
        a.expect_count("LoadRemoteModule", 2, 4)?;
        let session = rpc_session(a, 0)?;
        let mut args = ArgsBuilder::new();
        args.str(a.str(1)?);
        session.call_global("tvm.rpc.server.load_module", &args.args())
    });
    def(reg, "rpc.ImportRemoteModule", |a| {
        a.expect_count("ImportRemoteModule", 2, 2)?;
        let session = rpc_session(a, 0)?;
        let mut args = ArgsBuilder::new();
        args.object(a.module(0)?.into_any()).object(a.module(1)?.into_any());
        session.call_global("tvm.rpc.server.ImportModule", &args.args())
    });
    def(reg, "runtime.RPCTimeEvaluator", time_evaluator);
}

/// The session of RPC module argument `i`.
fn rpc_session(a: &Args<'_>, i: usize) -> Result<std::sync::Arc<ClientSession>> {
    let m = a.module(i)?;
    m.node::<client::RpcModule>()
        .map(|r| r.session().clone())
        .ok_or_else(|| Error::type_err(format!("argument {i}: expected an RPC module, got a {}", m.type_key())))
}

/// `rpc.Connect(url, port, key, enable_logging, *session_constructor_args)`: the handshake, then a
/// session the server makes with the constructor arguments (its own runtime when there are none).
fn connect(a: &Args<'_>) -> Result<RetValue> {
    if a.len() < 3 {
        return Err(Error::type_err("rpc.Connect takes (url, port, key[, enable_logging, constructor args...])"));
    }
    let (url, port, key) = (a.str(0)?, a.int(1)?, a.str(2)?);
    let port = u16::try_from(port).map_err(|_| Error::value(format!("rpc.Connect: port {port}")))?;
    let ctor = (4..a.len())
        .map(|i| match a.code(i) {
            crate::dlpack::kTVMStr => Ok(rpc::wire::Value::Str(a.str(i)?.to_string())),
            crate::dlpack::kTVMArgInt => Ok(rpc::wire::Value::Int(a.int(i)?)),
            crate::dlpack::kTVMArgFloat => Ok(rpc::wire::Value::Float(a.float(i)?)),
            crate::dlpack::kTVMBytes => Ok(rpc::wire::Value::Bytes(a.bytes(i)?.to_vec())),
            c => Err(Error::type_err(format!("rpc.Connect: a session constructor argument of type code {c}"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let addr = format!("{url}:{port}");
    let mut stream = std::net::TcpStream::connect((url, port))
        .map_err(|e| Error::tvm(format!("RPC: cannot connect to {addr}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let remote_key = rpc::handshake::connect(&mut stream, key, &addr)?;
    let session = ClientSession::start(Box::new(stream), &remote_key, ctor)?;
    Ok(client::remote_module(&session, None).into())
}

/// `runtime.RPCTimeEvaluator`: timed here for a local module; for an RPC module (or None with a
/// remote device), by the server, which times on its device with no network in the loop.
fn time_evaluator(a: &Args<'_>) -> Result<RetValue> {
    let remote = if a.len() > 2 && a.code(0) == crate::dlpack::kTVMModuleHandle {
        a.module(0)?.node::<client::RpcModule>().map(|r| r.session().clone())
    } else {
        None
    };
    let Some(session) = remote else { return crate::time_evaluator::create(a) };
    let dev_type = a.int32(2)?;
    let device = session.unmask(crate::dlpack::DLDevice { device_type: dev_type, device_id: a.int32(3)? })?;
    let mut args = ArgsBuilder::new();
    let m = a.module(0)?;
    match m.node::<client::RpcModule>().and_then(|r| r.remote_handle()) {
        Some(_) => args.object(m.clone().into_any()),
        None => args.null(),
    };
    args.str(a.str(1)?).int(i64::from(device.device_type)).int(i64::from(device.device_id));
    for i in 4..a.len() {
        match a.code(i) {
            crate::dlpack::kTVMStr => args.str(a.str(i)?),
            _ => args.int(a.int(i)?),
        };
    }
    session.call_global("runtime.RPCTimeEvaluator", &args.args())
}

/// `rpc.ServerLoop(fd)` (a connected socket, closed when the session ends) or
/// `rpc.ServerLoop(fsend, frecv)`: serves one session, the handshake already done.
fn server_loop(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("ServerLoop", 1, 2)?;
    if a.len() == 2 {
        let socket = rpc::FuncSocket { send: a.func(0)?, recv: a.func(1)? };
        return rpc::serve(socket, "SockServerLoop").map(|()| RetValue::None);
    }
    rpc::fd::serve_handed_socket(a.int32(0)?).map(|()| RetValue::None)
}

/// The program's work directory path for `path` (`tvm.rpc.server.workpath`, which the server
/// program registers).
fn workpath(path: &str) -> Result<String> {
    let f = registry::get("tvm.rpc.server.workpath").ok_or_else(|| Error::value("require tvm.rpc.server.workpath"))?;
    let mut args = ArgsBuilder::new();
    args.str(path);
    match f.call(&args.args())? {
        RetValue::Str(s) => Ok(s),
        RetValue::Object(o) => o
            .downcast_ref::<crate::packed::StringObj>()
            .map(|s| s.as_str().to_string())
            .ok_or_else(|| Error::type_err("tvm.rpc.server.workpath must return a path")),
        _ => Err(Error::type_err("tvm.rpc.server.workpath must return a path")),
    }
}
