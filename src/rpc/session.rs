//! One connection to a server: the session table (a session's index names its devices), one
//! request at a time over the channel, syscalls, copies in the server's packet size, and the end
//! of the session when its last holder goes.

#![forbid(unsafe_code)]

use super::channel::{Channel, Socket};
use super::packet::{code, Packet, PROTOCOL_VERSION};
use super::wire::{Value, WireTensor};
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
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

    pub(super) fn request(&self, packet: &Packet<'_>) -> Result<Vec<Value>> {
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
    fn max_packet(&self) -> Result<u64> {
        if let Some(m) = *self.max_packet.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(m);
        }
        let name = Value::Str("tvm.rpc.server.GetCRTMaxPacketSize".into());
        let m = match self.syscall(code::GET_GLOBAL_FUNC, vec![name])? {
            Value::Handle(0) | Value::Null => u64::MAX,
            Value::Handle(h) => {
                let reply = self.request(&Packet::CallFunc { func: h, args: vec![] });
                self.free_handle(h, crate::dlpack::kTVMPackedFuncHandle);
                match reply?.as_slice() {
                    [Value::Int(_), Value::Int(n)] if *n > 64 => *n as u64,
                    other => return Err(Error::tvm(format!("RPC: the server's packet size is {other:?}"))),
                }
            }
            other => return Err(Error::tvm(format!("RPC: GetGlobalFunc answered {other:?}"))),
        };
        *self.max_packet.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        Ok(m)
    }

    /// The bytes a copy packet may carry besides the tensor (`max - overhead`).
    fn block(&self, t: &WireTensor) -> Result<usize> {
        let overhead = 4 + 8 + 8 + 4 + 4 + 8 + 8 * t.shape.len() as u64 + 8;
        let max = self.max_packet()?;
        Ok(usize::try_from(max.saturating_sub(overhead).max(1)).unwrap_or(usize::MAX))
    }

    /// Copies `bytes` to remote memory `t` (from its byte offset), in packets the server accepts.
    pub fn copy_to_remote(&self, t: &WireTensor, bytes: &[u8]) -> Result<()> {
        let block = self.block(t)?;
        for (k, chunk) in bytes.chunks(block).enumerate() {
            let tensor = WireTensor { byte_offset: t.byte_offset + (k * block) as u64, ..t.clone() };
            self.request(&Packet::CopyToRemote { tensor, data: chunk })?;
        }
        Ok(())
    }

    /// Copies remote memory `t` (from its byte offset) into `out`.
    pub fn copy_from_remote(&self, t: &WireTensor, out: &mut [u8]) -> Result<()> {
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
