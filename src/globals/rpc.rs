//! The RPC globals a server program and TVM's Python server call: `rpc.ServerLoop`,
//! `rpc.ReturnException`, the work directory's `tvm.rpc.server.upload` / `download` / `remove`
//! (through the program's `tvm.rpc.server.workpath`), `tvm.rpc.server.ImportModule` and
//! `ModuleGetFunction`, and `cache_flush_cpu_non_first_arg` for remote timing.

use super::{def, Register};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::packed::{registry, Args, ArgsBuilder, RetValue};
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
        std::fs::write(&path, a.bytes(1)?).map_err(|e| Error::io(&path, e))?;
        Ok(RetValue::None)
    });
    def(reg, "tvm.rpc.server.download", |a| {
        a.expect_count("download", 1, 1)?;
        let path = workpath(a.str(0)?)?;
        std::fs::read(&path).map(RetValue::Bytes).map_err(|e| Error::io(&path, e))
    });
    def(reg, "tvm.rpc.server.remove", |a| {
        a.expect_count("remove", 1, 1)?;
        let path = workpath(a.str(0)?)?;
        let p = std::path::Path::new(&path);
        let removed = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
        removed.map(|()| RetValue::None).map_err(|e| Error::io(&path, e))
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
