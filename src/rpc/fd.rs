//! File descriptors a host hands the RPC layer: `rpc.ServerLoop(fd)` takes a connected socket and
//! closes it when the session ends; `rpc.ReturnException(fd, msg)` writes to one it does not own.

use crate::error::{Error, Result};
use std::os::fd::{FromRawFd, RawFd};

/// Serves one session on the connected socket `fd` a host handed over (`rpc.ServerLoop(fd)`,
/// `RPCServerLoop(int)`): the session owns it from now on and closes it when it ends.
pub fn serve_handed_socket(fd: RawFd) -> Result<()> {
    if fd < 0 {
        return Err(Error::value(format!("RPC: {fd} is not a file descriptor")));
    }
    // SAFETY: upstream's contract for the server loop, which hosts (TVM's Python server,
    // `tvm_rpc`) keep: a connected socket whose ownership passes to the loop, used by nothing
    // else meanwhile.
    let socket = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    super::serve(socket, "SockServerLoop")
}

/// Writes `bytes` to `fd`, which stays open and the caller's.
pub fn write_borrowed(fd: RawFd, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    if fd < 0 {
        return Err(Error::value(format!("RPC: {fd} is not a file descriptor")));
    }
    // SAFETY: the stream is never dropped (ManuallyDrop), so the caller's fd is not closed; writing
    // to a descriptor the host names is what it asked for (a closed one fails the write).
    let mut stream = std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) });
    stream.write_all(bytes).map_err(|e| Error::tvm(format!("RPC: writing to fd {fd}: {e}")))
}
