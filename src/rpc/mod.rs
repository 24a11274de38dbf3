//! TVM's RPC, compatible both ways with TVM 0.16's (protocol "0.8.0"): a device runs a server on
//! this runtime, a host with the full TVM drives it (uploads a library, runs it, reads outputs,
//! times and profiles it), and TVM's Python on this runtime can drive a remote server as well.
//!
//! Rooms: `wire` (values and tensors on the wire) and `packet` (the endpoint's packets) are the
//! format, with no socket in them; `server` is the serving session, also without a socket
//! (packets in, replies out), over `handles` (objects handed out) and `memory` (memory handed out:
//! the only memory a client can name); `channel` reads packets from a socket as their bytes
//! arrive; `handshake` and `tracker` are the socket's preamble and the tracker's protocol; `fd`
//! adopts a host's socket. Whoever can connect to a server can run code on it (upstream's
//! design: a client uploads and loads libraries); what this layer guarantees beyond that is that
//! no packet crashes the server or makes it touch memory it did not hand out.

pub mod channel;
pub mod client;
pub mod fd;
pub mod handles;
pub mod handshake;
mod memory;
pub mod packet;
mod remote_device;
pub mod server;
pub mod session;
pub(crate) mod tar;
pub mod tracker;
pub mod wire;
pub mod workdir;

use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::packed::{registry, ArgsBuilder, PackedFunc, RetValue};
use channel::{Channel, Socket};
use server::{Session, Step};

/// Puts the API of remote devices in the device layer (at the runtime's init).
pub fn install() {
    crate::device::install_remote(remote_device::api);
}

/// Serves one session on `socket` until the client shuts it down or closes the connection
/// (upstream's `RPCServerLoop`): the `tvm.rpc.server.start` / `shutdown` hooks around it, if a
/// program registered them. A protocol violation ends the session with an error.
pub fn serve(socket: impl Socket, name: &str) -> Result<()> {
    let hook = |name: &str| registry::get(name).map(|f| f.call(&ArgsBuilder::new().args()).map(|_| ()));
    hook("tvm.rpc.server.start").transpose()?;
    let served = serve_packets(Channel::new(socket), name);
    let stopped = hook("tvm.rpc.server.shutdown").transpose();
    served.and(stopped.map(|_| ()))
}

fn serve_packets(mut channel: Channel<impl Socket>, name: &str) -> Result<()> {
    let mut session = Session::new(name);
    while let Some(body) = channel.recv()? {
        match session.handle(&body) {
            Step::Send(reply) => channel.send(&[&reply])?,
            Step::SendAndClose(reply) => {
                let _ = channel.send(&[&reply]);
                return Err(Error::value(format!("RPC session {name} ended: {}", exception_text(&reply))));
            }
            Step::Close => return Ok(()),
        }
    }
    Ok(())
}

/// What a refused client is sent after the handshake's answer: an exception packet with `why`,
/// which TVM's client raises once its init packet is answered. Sent at once (the client reads it
/// after sending its init packet, which the server then reads and drops before it closes, so
/// closing does not reset the connection under the answer).
pub fn refusal(why: &str) -> Vec<u8> {
    packet::Packet::Exception(why.to_string()).encode()
}

/// The message of an encoded exception packet (for the server's own report).
fn exception_text(encoded: &[u8]) -> String {
    match packet::Packet::decode(&encoded[8..]) {
        Ok(packet::Packet::Exception(msg)) => msg,
        _ => "a protocol error".into(),
    }
}

/// A stream over two packed functions, as `rpc.ServerLoop(fsend, frecv)` takes it: `fsend(bytes)`
/// returns how many it sent (-1: failed), `frecv(n)` up to `n` bytes (none: closed).
pub struct FuncSocket {
    pub send: ObjRef<PackedFunc>,
    pub recv: ObjRef<PackedFunc>,
}

impl std::io::Read for FuncSocket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut a = ArgsBuilder::new();
        a.int(buf.len() as i64);
        match self.recv.call(&a.args()) {
            Ok(RetValue::Bytes(b)) => {
                let n = b.len().min(buf.len());
                buf[..n].copy_from_slice(&b[..n]);
                Ok(n)
            }
            Ok(RetValue::Str(s)) => {
                let n = s.len().min(buf.len());
                buf[..n].copy_from_slice(&s.as_bytes()[..n]);
                Ok(n)
            }
            Ok(_) => Ok(0),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}

impl std::io::Write for FuncSocket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut a = ArgsBuilder::new();
        a.bytes(buf);
        match self.send.call(&a.args()) {
            Ok(RetValue::Int(n)) if n >= 0 => Ok((n as usize).min(buf.len())),
            Ok(_) => Err(std::io::Error::other("RPC: the send function failed")),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Socket for FuncSocket {
    fn set_read_timeout(&mut self, _: Option<std::time::Duration>) -> std::io::Result<()> {
        Ok(())
    }
}
