//! The client's side: a session with a remote server (`rpc.Connect`), its functions and modules
//! (type key `rpc`), remote objects and arrays. What the remote gives out is held by a local
//! object whose last reference frees it remotely; what the client sends must belong to the same
//! session. Remote devices are the device types `type + 128 * (session + 1)`, served by
//! `remote_device` through the session.

// No unsafe code of its own: `object_type!`'s deleter is the one exception, which it allows.
#![deny(unsafe_code)]

use super::packet::{code, Packet};
use super::session::ClientSession;
use super::wire::{Value, WireTensor, RPC_OBJECT_TYPE_INDEX};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::module::ModuleArg;
use crate::module::{Module, ModuleNode};
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue, StringObj};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

impl ClientSession {
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
                    Some((r, h)) if r.session.index() == self.index() => Value::Module(h),
                    _ => return Err(cannot("a module of another session or not remote")),
                }
            }
            kTVMPackedFuncHandle => match remote_handle_of(&args.func(i)?) {
                Some((session, h)) if session == self.index() => Value::Func(h),
                _ => return Err(cannot("a local function")),
            },
            kTVMObjectHandle => {
                let obj = args.object(i)?.ok_or_else(|| cannot("a null object"))?;
                if let Some(s) = obj.downcast_ref::<StringObj>() {
                    Value::Str(s.as_str().to_string())
                } else if let Some(r) = obj.downcast_ref::<RpcObjectRef>() {
                    if r.session.index() != self.index() {
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
        .insert(addr, (session.index(), handle));
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

crate::object::object_type!(RpcObjectRef, crate::object::type_index::RPC_OBJECT_REF);

impl Drop for RpcObjectRef {
    fn drop(&mut self) {
        self.session.free_handle(self.handle, kTVMObjectHandle);
    }
}
