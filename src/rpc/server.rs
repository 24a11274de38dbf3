//! The serving side of a session, with no socket in it: a packet's bytes in, what to send back
//! out. It serves the process's own runtime (upstream's `LocalSession`): global functions, calls,
//! device memory, copies. What a client names (a function, a module, memory) must be something
//! this session handed out; a packet that is malformed or names anything else ends the session
//! with an error (a failing call is just an error: the session goes on).

#![forbid(unsafe_code)]

use super::handles::Handles;
use super::memory::Regions;
use super::packet::{code, void_return, Packet, PROTOCOL_VERSION};
use super::wire::{Value, WireTensor, RPC_OBJECT_TYPE_INDEX};
use crate::device::Attr;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::AnyObject;
use crate::packed::{registry, ArgsBuilder, PackedFunc, RetValue};
use crate::tensor::NDArray;

/// What the driver does after a packet.
#[derive(Debug)]
pub enum Step {
    /// Send these bytes and go on.
    Send(Vec<u8>),
    /// Send these bytes (an exception) and end the session.
    SendAndClose(Vec<u8>),
    /// End the session (the client shut it down).
    Close,
}

/// An error that ends the session (the protocol was broken), as opposed to a call that failed.
struct Fatal(Error);

impl From<Error> for Fatal {
    fn from(e: Error) -> Fatal {
        Fatal(e)
    }
}

pub struct Session {
    /// Named in version errors, as upstream's `Server[<name>]`.
    name: String,
    initialised: bool,
    handles: Handles,
    memory: Regions,
    /// Streams this session made (`DevCreateStream`) and not freed, and the one it set current
    /// per device (the session is served on one thread, whose current stream that is).
    streams: Vec<(DLDevice, u64)>,
    current: Vec<(DLDevice, u64)>,
}

impl Session {
    pub fn new(name: &str) -> Session {
        Session {
            name: name.into(),
            initialised: false,
            handles: Handles::default(),
            memory: Regions::default(),
            streams: Vec::new(),
            current: Vec::new(),
        }
    }

    /// Stream `h` of device `d` as this session may name it: 0 (the device's default) or one it
    /// made.
    fn stream(&self, d: DLDevice, h: u64) -> std::result::Result<u64, Fatal> {
        if h == 0 || self.streams.contains(&(d, h)) {
            Ok(h)
        } else {
            Err(Fatal(Error::value(format!("RPC: stream {h:#x} was never handed out by this session"))))
        }
    }

    /// `CopyAmongRemote` on stream `h` (0: the current one).
    fn copy_on(&mut self, d: DLDevice, h: u64, from: &WireTensor, to: &WireTensor) -> Result<()> {
        let was = self.current_stream(d);
        let switch = h != 0 && h != was;
        if switch {
            self.set_current(d, h)?;
        }
        let copied = self.memory.copy(from, to);
        if switch {
            self.set_current(d, was)?;
        }
        copied
    }

    /// `DevFreeStream`: waits for the stream, then releases it (0: nothing to free).
    fn free_stream(&mut self, d: DLDevice, h: u64) -> Result<()> {
        if h == 0 {
            return Ok(());
        }
        if self.current_stream(d) == h {
            self.set_current(d, 0)?;
        }
        self.streams.retain(|&x| x != (d, h));
        crate::device::api_of(d)?.free_stream(d.device_id, h as usize as *mut std::ffi::c_void)
    }

    fn current_stream(&self, d: DLDevice) -> u64 {
        self.current.iter().find(|(x, _)| *x == d).map_or(0, |&(_, h)| h)
    }

    /// Makes `h` the serving thread's current stream of `d`.
    fn set_current(&mut self, d: DLDevice, h: u64) -> Result<()> {
        crate::device::api_of(d)?.set_stream(d.device_id, h as usize as *mut std::ffi::c_void)?;
        self.current.retain(|(x, _)| *x != d);
        if h != 0 {
            self.current.push((d, h));
        }
        Ok(())
    }

    /// Handles one packet's body.
    pub fn handle(&mut self, body: &[u8]) -> Step {
        let packet = match Packet::decode(body) {
            Ok(p) => p,
            Err(e) => return close_with(e.context("RPC: a malformed packet")),
        };
        if packet == Packet::Shutdown {
            return Step::Close;
        }
        match self.serve(packet) {
            Ok(Ok(reply)) => Step::Send(reply),
            Ok(Err(e)) => Step::Send(Packet::Exception(e.to_c_message()).encode()),
            Err(Fatal(e)) => close_with(e),
        }
    }

    /// The reply to a packet: `Ok(Err)` a call that failed, `Err` the end of the session.
    fn serve(&mut self, packet: Packet<'_>) -> std::result::Result<Result<Vec<u8>>, Fatal> {
        if let Packet::InitServer { version, args } = &packet {
            return self.init(version, args).map(Ok);
        }
        if !self.initialised {
            return Err(Fatal(Error::value("Need to call InitRemoteSession first before any further actions")));
        }
        Ok(match packet {
            Packet::CallFunc { func, args } => {
                let f = self.handles.func(func)?;
                let args = self.local_args(&args)?;
                f.call(&args.args()).map(|r| Packet::Return(self.encode_return(r)).encode())
            }
            Packet::CopyFromRemote { tensor, nbytes } => {
                let n = usize::try_from(nbytes).map_err(|_| Error::value("RPC: a huge copy"))?;
                self.memory.view(&tensor)?;
                // Sized only once the tensor has been checked to hold these bytes.
                let mut out = vec![0u8; n.min(tensor.nbytes()?)];
                if out.len() != n {
                    return Err(Fatal(Error::value("CopyFromRemote: overflow in tensor size")));
                }
                self.memory.read(&tensor, &mut out).map(|()| Packet::CopyAck(&out).encode())
            }
            Packet::CopyToRemote { tensor, data } => self.memory.write(&tensor, data).map(|()| void_return().encode()),
            Packet::Syscall { code, args } => self.syscall(code, &args)?.map(|v| Packet::Return(vec![v]).encode()),
            other => return Err(Fatal(Error::value(format!("RPC: a client sent {}", packet_name(&other))))),
        })
    }

    fn init(&mut self, version: &str, args: &[Value]) -> std::result::Result<Vec<u8>, Fatal> {
        if self.initialised {
            return Err(Fatal(Error::value("Server has already been initialized")));
        }
        if version != PROTOCOL_VERSION {
            return Err(Fatal(Error::value(format!(
                "Server[{}]: Client protocol version mismatch with the server  server protocol={PROTOCOL_VERSION}, client \
                 protocol={version}",
                self.name
            ))));
        }
        match args.first() {
            None => {}
            Some(Value::Str(ctor)) if ctor == "rpc.LocalSession" => {}
            Some(Value::Str(ctor)) => {
                return Err(Fatal(Error::value(format!(
                    "this server serves its own runtime (rpc.LocalSession), not sessions made by '{ctor}'"
                ))))
            }
            Some(_) => return Err(Fatal(Error::type_err("the session constructor must be named by a string"))),
        }
        self.initialised = true;
        Ok(void_return().encode())
    }

    /// The arguments of a call, each checked: memory and objects the session handed out only.
    fn local_args(&self, values: &[Value]) -> std::result::Result<ArgsBuilder, Fatal> {
        let mut args = ArgsBuilder::new();
        for v in values {
            match v {
                Value::Int(i) => args.int(*i),
                Value::UInt(u) => args.int(*u as i64),
                Value::Float(f) => args.float(*f),
                Value::Null => args.null(),
                Value::Str(s) => args.str(s),
                Value::Bytes(b) => args.bytes(b),
                Value::DataType(t) => args.dtype(*t),
                Value::Device(d) => args.device(checked_device(*d)?),
                Value::Handle(0) => args.null(),
                Value::Handle(h) => {
                    return Err(Fatal(Error::value(format!("RPC: an opaque handle {h:#x} as argument"))))
                }
                Value::Tensor(t) => args.object(self.memory.view(t)?.into_any()),
                Value::Object { type_index, handle } => {
                    if *type_index != RPC_OBJECT_TYPE_INDEX {
                        return Err(Fatal(Error::value("RPCServerError:kInvalidTypeCodeObject")));
                    }
                    args.object(self.handles.get(*handle)?.clone())
                }
                Value::Module(h) => args.object(self.handles.module(*h)?.into_any()),
                Value::Func(h) => args.object(self.handles.func(*h)?.into_any()),
            };
        }
        Ok(args)
    }

    /// A call's result as the reply's values: its type code, the value (objects as handles given
    /// out, arrays as their tensor and handle).
    fn encode_return(&mut self, r: RetValue) -> Vec<Value> {
        let tagged = |c: i32, v: Value| vec![Value::Int(c as i64), v];
        match r {
            RetValue::None => tagged(4, Value::Null),
            RetValue::Int(i) => tagged(0, Value::Int(i)),
            RetValue::Float(f) => tagged(2, Value::Float(f)),
            RetValue::Handle(p) => tagged(3, Value::Handle(p as u64)),
            RetValue::Str(s) => tagged(11, Value::Str(s)),
            RetValue::Bytes(b) => tagged(12, Value::Bytes(b)),
            RetValue::DataType(t) => tagged(5, Value::DataType(t)),
            RetValue::Device(d) => tagged(6, Value::Device(d)),
            RetValue::Object(o) => self.give(o),
        }
    }

    fn give(&mut self, o: AnyObject) -> Vec<Value> {
        if let Some(array) = o.downcast_ref::<NDArray>() {
            let data = self.memory.add_array(&array);
            let tensor = WireTensor {
                data,
                device: array.device(),
                dtype: array.dtype(),
                shape: array.shape().to_vec(),
                byte_offset: 0,
            };
            let handle = self.handles.give(o);
            return vec![Value::Int(13), Value::Tensor(tensor), Value::Handle(handle)];
        }
        let kind = if o.downcast_ref::<PackedFunc>().is_some() {
            10
        } else if o.downcast_ref::<Module>().is_some() {
            9
        } else {
            8
        };
        vec![Value::Int(kind), Value::Handle(self.handles.give(o))]
    }

    /// A syscall's one value, or a failure (`Ok(Err)`), or the end of the session.
    fn syscall(&mut self, c: i32, args: &[Value]) -> std::result::Result<Result<Value>, Fatal> {
        let arity = |n: usize| -> std::result::Result<(), Fatal> {
            if args.len() == n {
                Ok(())
            } else {
                Err(Fatal(Error::value(format!("RPC: syscall {c} takes {n} arguments, {} given", args.len()))))
            }
        };
        let device = |i: usize| match &args[i] {
            Value::Device(d) => checked_device(*d),
            _ => Err(Fatal(Error::type_err(format!("RPC: syscall {c}: argument {i} must be a device")))),
        };
        let int = |i: usize| match &args[i] {
            Value::Int(v) => Ok(*v),
            _ => Err(Fatal(Error::type_err(format!("RPC: syscall {c}: argument {i} must be an int")))),
        };
        let handle = |i: usize| match &args[i] {
            Value::Handle(h) => Ok(*h),
            Value::Null => Ok(0),
            _ => Err(Fatal(Error::type_err(format!("RPC: syscall {c}: argument {i} must be a handle")))),
        };
        let tensor = |i: usize| match &args[i] {
            Value::Tensor(t) => Ok(t),
            _ => Err(Fatal(Error::type_err(format!("RPC: syscall {c}: argument {i} must be a tensor")))),
        };
        Ok(match c {
            code::GET_GLOBAL_FUNC => {
                arity(1)?;
                let Value::Str(name) = &args[0] else {
                    return Err(Fatal(Error::type_err("RPC: GetGlobalFunc takes a name")));
                };
                Ok(Value::Handle(registry::get(name).map_or(0, |f| self.handles.give(f.into_any()))))
            }
            code::FREE_HANDLE => {
                arity(2)?;
                let (h, kind) = (handle(0)?, int(1)?);
                if let Some(obj) = self.handles.free(h)? {
                    if kind == 13 {
                        if let Some(array) = obj.downcast_ref::<NDArray>() {
                            self.memory.remove_array(&array);
                        }
                    }
                }
                Ok(Value::Null)
            }
            code::DEV_SET_DEVICE => {
                arity(1)?;
                let d = device(0)?;
                crate::device::api_of(d).and_then(|api| api.set_device(d.device_id)).map(|()| Value::Null)
            }
            code::DEV_GET_ATTR => {
                arity(2)?;
                let (d, kind) = (device(0)?, int(1)?);
                device_attr(d, kind as i32)
            }
            code::DEV_ALLOC_DATA => {
                arity(4)?;
                let (d, nbytes) = (device(0)?, int(1)?);
                let n = usize::try_from(nbytes).map_err(|_| Error::value(format!("RPC: allocating {nbytes} bytes")))?;
                self.memory.alloc(d, n).map(Value::Handle)
            }
            code::DEV_FREE_DATA => {
                arity(2)?;
                self.memory.free(device(0)?, handle(1)?)?;
                Ok(Value::Null)
            }
            code::DEV_STREAM_SYNC => {
                arity(2)?;
                let d = device(0)?;
                let h = self.stream(d, handle(1)?)?;
                let s = h as usize as *mut std::ffi::c_void;
                crate::device::api_of(d).and_then(|api| api.sync_stream(d.device_id, s)).map(|()| Value::Null)
            }
            code::COPY_AMONG_REMOTE => {
                arity(3)?;
                let (from, to) = (tensor(0)?, tensor(1)?);
                self.memory.view(from)?;
                self.memory.view(to)?;
                // Queued on the stream named (of the device side whose API copies), as upstream's.
                let d = checked_device(if crate::device::is_host(from.device) { to.device } else { from.device })?;
                let h = self.stream(d, handle(2)?)?;
                self.copy_on(d, h, from, to).map(|()| Value::Null)
            }
            code::DEV_ALLOC_DATA_WITH_SCOPE => {
                arity(2)?;
                let t = tensor(0)?;
                match &args[1] {
                    Value::Null => {}
                    Value::Str(scope) => crate::device::check_memory_scope(scope)?,
                    _ => return Err(Fatal(Error::type_err("RPC: a memory scope must be a string"))),
                }
                let d = checked_device(t.device)?;
                t.nbytes().and_then(|n| self.memory.alloc(d, n)).map(Value::Handle)
            }
            code::DEV_CREATE_STREAM => {
                arity(1)?;
                let d = device(0)?;
                crate::device::api_of(d).and_then(|api| api.create_stream(d.device_id)).map(|s| {
                    let h = s as usize as u64;
                    if h != 0 {
                        self.streams.push((d, h));
                    }
                    Value::Handle(h)
                })
            }
            code::DEV_GET_CURRENT_STREAM => {
                arity(1)?;
                let d = device(0)?;
                Ok(Value::Handle(self.current_stream(d)))
            }
            code::DEV_SET_STREAM => {
                arity(2)?;
                let d = device(0)?;
                let h = self.stream(d, handle(1)?)?;
                self.set_current(d, h).map(|()| Value::Null)
            }
            code::DEV_FREE_STREAM => {
                arity(2)?;
                let d = device(0)?;
                let h = self.stream(d, handle(1)?)?;
                self.free_stream(d, h).map(|()| Value::Null)
            }
            other => return Err(Fatal(Error::value(format!("RPC: Unknown event {other}")))),
        })
    }
}

impl Drop for Session {
    /// Streams the client left behind go with the session (the serving thread's current ones
    /// back to the default first).
    fn drop(&mut self) {
        for (d, _) in std::mem::take(&mut self.current) {
            let _ = crate::device::api_of(d).and_then(|api| api.set_stream(d.device_id, std::ptr::null_mut()));
        }
        for (d, h) in std::mem::take(&mut self.streams) {
            let s = h as usize as *mut std::ffi::c_void;
            let _ = crate::device::api_of(d).and_then(|api| api.free_stream(d.device_id, s));
        }
    }
}

/// A device as the client names it: unmasked (an RPC device of a further hop is not served).
fn checked_device(d: DLDevice) -> std::result::Result<DLDevice, Fatal> {
    if d.device_type >= 128 {
        return Err(Fatal(Error::value("cannot pass RPC device in the channel")));
    }
    Ok(d)
}

/// `DevGetAttr`: kExist answers 0 where the device API is missing; others the device's attribute.
fn device_attr(d: DLDevice, kind: i32) -> Result<Value> {
    if kind == crate::device::attr::EXIST {
        let exists = crate::device::api(d.device_type)
            .and_then(|api| api.count())
            .is_ok_and(|n| d.device_id >= 0 && (d.device_id as usize) < n || crate::device::is_host(d));
        return Ok(Value::Int(i64::from(exists)));
    }
    let api = crate::device::api_of(d)?;
    Ok(match api.attr(d.device_id, kind)? {
        Some(Attr::Int(v)) => Value::Int(v),
        Some(Attr::Str(s)) => Value::Str(s),
        None => Value::Null,
    })
}

fn close_with(e: Error) -> Step {
    Step::SendAndClose(Packet::Exception(e.to_c_message()).encode())
}

fn packet_name(p: &Packet<'_>) -> &'static str {
    match p {
        Packet::Return(_) => "a return",
        Packet::Exception(_) => "an exception",
        Packet::CopyAck(_) => "a copy acknowledgement",
        _ => "an unexpected packet",
    }
}
