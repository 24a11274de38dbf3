//! The client's side: a session with a remote server (`rpc.Connect`), its functions and modules
//! (type key `rpc`), remote objects and arrays. What the remote gives out is held by a local
//! object whose last reference frees it remotely; what the client sends must belong to the same
//! session. Remote devices are the device types `type + 128 * (session + 1)`, served by
//! `remote_device` through the session.

#![forbid(unsafe_code)]

use super::channel::{Channel, Socket};
use super::packet::{code, Packet, PROTOCOL_VERSION};
use super::wire::{Value, WireTensor, RPC_OBJECT_TYPE_INDEX};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue, StringObj};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Sessions a process can hold at once (upstream's `RPCSessTable::kMaxRPCSession`).
pub const MAX_SESSIONS: usize = 32;

static TABLE: Mutex<[Option<Weak<ClientSession>>; MAX_SESSIONS]> = Mutex::new([const { None }; MAX_SESSIONS]);

/// The session of table index `index`, while it lives.
pub fn session(index: usize) -> Result<Arc<ClientSession>> {
    TABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(index)
        .and_then(|w| w.as_ref().and_then(Weak::upgrade))
        .ok_or_else(|| Error::value(format!("RPC session {index} is closed")))
}

/// One connection to a server, serving one request at a time.
pub struct ClientSession {
    index: usize,
    /// The server's key (`server:<key>`).
    remote_key: String,
    channel: Mutex<Option<Channel<Box<dyn Socket>>>>,
    /// The server's largest packet (`tvm.rpc.server.GetCRTMaxPacketSize`): asked once.
    max_packet: Mutex<Option<u64>>,
}

impl Socket for Box<dyn Socket> {
    fn set_read_timeout(&mut self, timeout: Option<std::time::Duration>) -> std::io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
}

/// How a reply ended a request.
enum Reply {
    Values(Vec<Value>),
    Ack(Vec<u8>),
}

impl ClientSession {
    /// Starts a session on a connected socket whose handshake is done: the server is asked to
    /// serve `ctor_args` (a local session when empty); the session takes a table index.
    pub fn start(socket: Box<dyn Socket>, remote_key: &str, ctor_args: Vec<Value>) -> Result<Arc<ClientSession>> {
        let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let index = table
            .iter()
            .position(|s| s.as_ref().is_none_or(|w| w.strong_count() == 0))
            .ok_or_else(|| Error::value(format!("RPC: {MAX_SESSIONS} sessions are open already")))?;
        let s = Arc::new(ClientSession {
            index,
            remote_key: remote_key.to_string(),
            channel: Mutex::new(Some(Channel::new(socket))),
            max_packet: Mutex::new(None),
        });
        table[index] = Some(Arc::downgrade(&s));
        drop(table);
        s.request(&Packet::InitServer { version: PROTOCOL_VERSION.into(), args: ctor_args })?;
        Ok(s)
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn remote_key(&self) -> &str {
        &self.remote_key
    }

    /// The device type of remote type `t` in this session.
    pub fn masked(&self, t: i32) -> i32 {
        t + crate::device::RPC_SESS_MASK * (self.index as i32 + 1)
    }

    /// A remote device of this session, unmasked for the wire.
    pub fn unmask(&self, d: DLDevice) -> Result<DLDevice> {
        if !crate::device::is_remote(d) {
            return Err(Error::value("Can not pass in local device"));
        }
        if (d.device_type / crate::device::RPC_SESS_MASK - 1) as usize != self.index {
            return Err(Error::value("Can not pass in device of a different remote session"));
        }
        Ok(DLDevice { device_type: d.device_type % crate::device::RPC_SESS_MASK, device_id: d.device_id })
    }

    /// Sends one request and reads until its reply: values, or a copy's bytes (`ack_into`, when
    /// given, receives them in place).
    fn exchange(&self, packet: &Packet<'_>, ack_into: Option<&mut [u8]>) -> Result<Reply> {
        let mut guard = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        let channel = guard.as_mut().ok_or_else(|| Error::value("RPC: the session is closed"))?;
        let sent = match packet {
            Packet::CopyToRemote { tensor, data } => {
                // The header, then the bytes from where they are (no copy of a large array).
                let mut head = Packet::CopyToRemote { tensor: tensor.clone(), data: &[] }.encode();
                let n = (head.len() - 8 + data.len()) as u64;
                head[..8].copy_from_slice(&n.to_le_bytes());
                let len_at = head.len() - 8;
                head[len_at..].copy_from_slice(&(data.len() as u64).to_le_bytes());
                channel.send(&[&head, data])
            }
            other => channel.send(&[&other.encode()]),
        };
        let body = sent.and_then(|()| match ack_into {
            Some(out) => channel.recv_copy_ack(out),
            None => {
                channel.recv().and_then(|b| b.map(Some).ok_or_else(|| Error::tvm("RPC: the server closed the session")))
            }
        });
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                // A broken connection ends the session.
                *guard = None;
                return Err(e);
            }
        };
        let Some(body) = body else { return Ok(Reply::Ack(Vec::new())) };
        match Packet::decode(&body) {
            Ok(Packet::Return(values)) => Ok(Reply::Values(values)),
            Ok(Packet::CopyAck(bytes)) => Ok(Reply::Ack(bytes.to_vec())),
            Ok(Packet::Exception(msg)) => Err(remote_error(&msg)),
            Ok(_) | Err(_) => {
                *guard = None;
                Err(Error::tvm("RPC: the server sent something other than a reply; the session is closed"))
            }
        }
    }

    fn request(&self, packet: &Packet<'_>) -> Result<Vec<Value>> {
        match self.exchange(packet, None)? {
            Reply::Values(v) => Ok(v),
            Reply::Ack(_) => Err(Error::tvm("RPC: a copy's bytes in reply to a request")),
        }
    }

    /// A syscall's one value.
    pub fn syscall(&self, code: i32, args: Vec<Value>) -> Result<Value> {
        let mut values = self.request(&Packet::Syscall { code, args })?;
        match values.len() {
            1 => Ok(values.remove(0)),
            n => Err(Error::tvm(format!("RPC: a syscall's reply of {n} values"))),
        }
    }

    /// Calls remote function `func` with `args` (made wire values here).
    pub fn call(self: &Arc<Self>, func: u64, args: &Args<'_>) -> Result<RetValue> {
        let values = (0..args.len()).map(|i| self.to_wire(args, i)).collect::<Result<Vec<_>>>()?;
        let reply = self.request(&Packet::CallFunc { func, args: values })?;
        self.from_wire(reply)
    }

    /// Calls remote global `name`.
    pub fn call_global(self: &Arc<Self>, name: &str, args: &Args<'_>) -> Result<RetValue> {
        let f = self.global(name)?.ok_or_else(|| Error::attribute(format!("the remote has no function {name}")))?;
        f.call(args)
    }

    /// Remote global `name`, or `None` when the server has none.
    pub fn global(self: &Arc<Self>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        match self.syscall(code::GET_GLOBAL_FUNC, vec![Value::Str(name.into())])? {
            Value::Handle(0) | Value::Null => Ok(None),
            Value::Handle(h) => Ok(Some(remote_function(self, h))),
            other => Err(Error::tvm(format!("RPC: GetGlobalFunc answered {other:?}"))),
        }
    }

    /// Frees a handle the server gave out (errors are the server's to log: the object is gone
    /// here either way).
    pub fn free_handle(&self, handle: u64, type_code: i32) {
        let _ = self.request(&Packet::Syscall {
            code: code::FREE_HANDLE,
            args: vec![Value::Handle(handle), Value::Int(type_code as i64)],
        });
    }

    /// The server's largest packet: `tvm.rpc.server.GetCRTMaxPacketSize` if it has one (asked
    /// once), else unlimited.
    fn max_packet(self: &Arc<Self>) -> Result<u64> {
        if let Some(m) = *self.max_packet.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(m);
        }
        let m = match self.global("tvm.rpc.server.GetCRTMaxPacketSize")? {
            None => u64::MAX,
            Some(f) => match f.call(&crate::packed::ArgsBuilder::new().args())? {
                RetValue::Int(n) if n > 64 => n as u64,
                other => return Err(Error::tvm(format!("RPC: the server's packet size is {other:?}"))),
            },
        };
        *self.max_packet.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        Ok(m)
    }

    /// The bytes a copy packet may carry besides the tensor (`max - overhead`).
    fn block(self: &Arc<Self>, t: &WireTensor) -> Result<usize> {
        let overhead = 4 + 8 + 8 + 4 + 4 + 8 + 8 * t.shape.len() as u64 + 8;
        let max = self.max_packet()?;
        Ok(usize::try_from(max.saturating_sub(overhead).max(1)).unwrap_or(usize::MAX))
    }

    /// Copies `bytes` to remote memory `t` (from its byte offset), in packets the server accepts.
    pub fn copy_to_remote(self: &Arc<Self>, t: &WireTensor, bytes: &[u8]) -> Result<()> {
        let block = self.block(t)?;
        for (k, chunk) in bytes.chunks(block).enumerate() {
            let tensor = WireTensor { byte_offset: t.byte_offset + (k * block) as u64, ..t.clone() };
            self.request(&Packet::CopyToRemote { tensor, data: chunk })?;
        }
        Ok(())
    }

    /// Copies remote memory `t` (from its byte offset) into `out`.
    pub fn copy_from_remote(self: &Arc<Self>, t: &WireTensor, out: &mut [u8]) -> Result<()> {
        let block = self.block(t)?;
        for (k, chunk) in out.chunks_mut(block).enumerate() {
            let tensor = WireTensor { byte_offset: t.byte_offset + (k * block) as u64, ..t.clone() };
            let n = chunk.len() as u64;
            match self.exchange(&Packet::CopyFromRemote { tensor, nbytes: n }, Some(chunk))? {
                Reply::Ack(b) if b.is_empty() => {}
                Reply::Ack(b) if b.len() == chunk.len() => chunk.copy_from_slice(&b),
                _ => return Err(Error::tvm("RPC: a copy's reply of the wrong size")),
            }
        }
        Ok(())
    }

    /// Ends the session (`CloseRPCConnection`, or the last reference going).
    pub fn shutdown(&self) {
        let mut guard = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ch) = guard.as_mut() {
            let _ = ch.send(&[&Packet::Shutdown.encode()]);
        }
        *guard = None;
    }

    /// Argument `i` as the wire carries it: what belongs to this session, by its remote handle.
    fn to_wire(&self, args: &Args<'_>, i: usize) -> Result<Value> {
        let cannot =
            |what: &str| Error::value(format!("Cannot pass argument {i}, type {what} is not supported by RPC"));
        Ok(match args.code(i) {
            kTVMArgInt | 1 => Value::Int(args.int_bits(i)?),
            kTVMArgFloat => Value::Float(args.float(i)?),
            kTVMNullptr => Value::Null,
            kTVMStr => Value::Str(args.str(i)?.to_string()),
            kTVMBytes => Value::Bytes(args.bytes(i)?.to_vec()),
            kTVMDataType => Value::DataType(args.data_type(i)?),
            kDLDevice => Value::Device(self.unmask(args.device(i)?)?),
            kTVMOpaqueHandle => Value::Handle(args.handle(i)? as u64),
            kTVMDLTensorHandle | kTVMNDArrayHandle => {
                let t = args.tensor(i)?;
                if !t.is_compact() {
                    return Err(Error::value("RPCServerError:kInvalidDLTensorFieldStride"));
                }
                let place = t.place();
                let device = self.unmask(place.device)?;
                let data = super::remote_device::remote_pointer(place.data, place.device)?;
                Value::Tensor(WireTensor {
                    data,
                    device,
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                    byte_offset: place.offset as u64,
                })
            }
            kTVMModuleHandle => {
                let m = args.module(i)?;
                let handle = m.node::<RpcModule>().and_then(|r| r.handle.as_ref().map(|h| (r, h.handle)));
                match handle {
                    Some((r, h)) if r.session.index == self.index => Value::Module(h),
                    _ => return Err(cannot("a module of another session or not remote")),
                }
            }
            kTVMPackedFuncHandle => match remote_handle_of(&args.func(i)?) {
                Some((session, h)) if session == self.index => Value::Func(h),
                _ => return Err(cannot("a local function")),
            },
            kTVMObjectHandle => {
                let obj = args.object(i)?.ok_or_else(|| cannot("a null object"))?;
                if let Some(s) = obj.downcast_ref::<StringObj>() {
                    Value::Str(s.as_str().to_string())
                } else if let Some(r) = obj.downcast_ref::<RpcObjectRef>() {
                    if r.session.index != self.index {
                        return Err(cannot("an object of another session"));
                    }
                    Value::Object { type_index: RPC_OBJECT_TYPE_INDEX, handle: r.handle }
                } else {
                    return Err(cannot(&crate::object::type_key_of(obj.type_index())));
                }
            }
            other => return Err(cannot(&format!("code {other}"))),
        })
    }

    /// A call's reply as a local value: `[type code, value...]`, remote objects held locally.
    fn from_wire(self: &Arc<Self>, reply: Vec<Value>) -> Result<RetValue> {
        let bad = || Error::tvm(format!("RPC: a malformed return value {reply:?}"));
        let (Some(Value::Int(c)), rest) = (reply.first(), &reply[1.min(reply.len())..]) else { return Err(bad()) };
        let c = i32::try_from(*c).map_err(|_| bad())?;
        Ok(match (c, rest) {
            (kTVMNullptr, [Value::Null]) => RetValue::None,
            (kTVMArgInt | 1, [Value::Int(v)]) => RetValue::Int(*v),
            (kTVMArgFloat, [Value::Float(v)]) => RetValue::Float(*v),
            (kTVMStr, [Value::Str(s)]) => RetValue::Str(s.clone()),
            (kTVMBytes, [Value::Bytes(b)]) => RetValue::Bytes(b.clone()),
            (kTVMDataType, [Value::DataType(t)]) => RetValue::DataType(*t),
            (kTVMDataType, [Value::Str(s)]) => RetValue::DataType(s.parse()?),
            (kDLDevice, [Value::Device(d)]) => RetValue::Device(*d),
            (kTVMOpaqueHandle, [Value::Handle(h)]) => RetValue::Handle(*h as *mut std::ffi::c_void),
            (kTVMPackedFuncHandle, [Value::Handle(h)]) => remote_function(self, *h).into(),
            (kTVMModuleHandle, [Value::Handle(h)]) => remote_module(self, Some(*h)).into(),
            (kTVMObjectHandle, [Value::Handle(h)]) => {
                ObjRef::new(RpcObjectRef { session: self.clone(), handle: *h }).into()
            }
            (kTVMNDArrayHandle, [Value::Tensor(t), Value::Handle(h)]) => {
                super::remote_device::remote_array(self, t, *h)?.into()
            }
            _ => return Err(bad()),
        })
    }
}

impl Drop for ClientSession {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A failure the server reported, as TVM's client reports it: `RPCError` (or the session's
/// timeout, unchanged), the server's message on the next line.
fn remote_error(msg: &str) -> Error {
    if msg.starts_with("RPCSessionTimeoutError: ") {
        Error::foreign(msg)
    } else {
        Error::foreign(format!("RPCError: Error caught from RPC call:\n{msg}"))
    }
}

/// A handle the server gave out, freed there when the last local holder goes.
struct RemoteHandle {
    session: Arc<ClientSession>,
    handle: u64,
    type_code: i32,
    /// The local function standing for it (a remote function), to forget when it goes.
    func: std::sync::OnceLock<usize>,
}

impl RemoteHandle {
    fn new(session: &Arc<ClientSession>, handle: u64, type_code: i32) -> RemoteHandle {
        RemoteHandle { session: session.clone(), handle, type_code, func: std::sync::OnceLock::new() }
    }
}

impl Drop for RemoteHandle {
    fn drop(&mut self) {
        self.session.free_handle(self.handle, self.type_code);
        if let (Some(addr), Some(table)) =
            (self.func.get(), REMOTE_FUNCS.lock().unwrap_or_else(|e| e.into_inner()).as_mut())
        {
            table.remove(addr);
        }
    }
}

/// Remote functions by the address of the local function standing for each: (session, handle),
/// to pass them back to their session.
static REMOTE_FUNCS: Mutex<Option<HashMap<usize, (usize, u64)>>> = Mutex::new(None);

fn remote_handle_of(f: &ObjRef<PackedFunc>) -> Option<(usize, u64)> {
    let table = REMOTE_FUNCS.lock().unwrap_or_else(|e| e.into_inner());
    table.as_ref()?.get(&(f.as_ptr() as usize)).copied()
}

/// A local function calling remote function `handle`.
fn remote_function(session: &Arc<ClientSession>, handle: u64) -> ObjRef<PackedFunc> {
    let held = Arc::new(RemoteHandle::new(session, handle, kTVMPackedFuncHandle));
    let inner = held.clone();
    let f = PackedFunc::native(move |args| inner.session.call(inner.handle, args));
    let addr = f.as_ptr() as usize;
    let _ = held.func.set(addr);
    REMOTE_FUNCS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(addr, (session.index, handle));
    f
}

/// A session's module (`handle` none: its global functions) or a module the server gave out.
pub struct RpcModule {
    session: Arc<ClientSession>,
    handle: Option<RemoteHandle>,
}

pub fn remote_module(session: &Arc<ClientSession>, handle: Option<u64>) -> ObjRef<Module> {
    let handle = handle.map(|h| RemoteHandle::new(session, h, kTVMModuleHandle));
    Module::new(RpcModule { session: session.clone(), handle })
}

impl RpcModule {
    pub fn session(&self) -> &Arc<ClientSession> {
        &self.session
    }

    /// The module's remote handle (`None` for the session's own module).
    pub fn remote_handle(&self) -> Option<u64> {
        self.handle.as_ref().map(|h| h.handle)
    }
}

impl ModuleNode for RpcModule {
    fn type_key(&self) -> &str {
        "rpc"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        if name == "CloseRPCConnection" {
            let session = self.session.clone();
            return Ok(Some(PackedFunc::native(move |_| {
                session.shutdown();
                Ok(RetValue::None)
            })));
        }
        match &self.handle {
            None => self.session.global(name),
            Some(h) => {
                let mut a = crate::packed::ArgsBuilder::new();
                a.object(this.clone().into_any()).str(name).int(1);
                match self.session.call_global("tvm.rpc.server.ModuleGetFunction", &a.args()) {
                    Ok(RetValue::Object(o)) => Ok(o.downcast::<PackedFunc>().ok()),
                    Ok(_) => Ok(None),
                    Err(e) => Err(e.context(format!("remote module {:#x}", h.handle))),
                }
            }
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `runtime.RPCObjectRef`: an object of the server, freed there when the last local holder goes.
pub struct RpcObjectRef {
    session: Arc<ClientSession>,
    handle: u64,
}

impl Drop for RpcObjectRef {
    fn drop(&mut self) {
        self.session.free_handle(self.handle, kTVMObjectHandle);
    }
}
