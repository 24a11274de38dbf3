//! The endpoint's packets: `u64 nbytes`, then `nbytes` bytes starting with an `i32` code. Both
//! peers speak the same set; a packet is decoded from a complete body (the channel reads it), and
//! encoded with its length.

#![forbid(unsafe_code)]

use super::wire::{Reader, Value, WireTensor, Writer};
use crate::error::{Error, Result};

/// The protocol version both peers must speak.
pub const PROTOCOL_VERSION: &str = "0.8.0";

/// Packet codes (`RPCCode`).
pub mod code {
    pub const SHUTDOWN: i32 = 1;
    pub const INIT_SERVER: i32 = 2;
    pub const CALL_FUNC: i32 = 3;
    pub const RETURN: i32 = 4;
    pub const EXCEPTION: i32 = 5;
    pub const COPY_FROM_REMOTE: i32 = 6;
    pub const COPY_TO_REMOTE: i32 = 7;
    pub const COPY_ACK: i32 = 8;
    pub const GET_GLOBAL_FUNC: i32 = 9;
    pub const FREE_HANDLE: i32 = 10;
    pub const DEV_SET_DEVICE: i32 = 11;
    pub const DEV_GET_ATTR: i32 = 12;
    pub const DEV_ALLOC_DATA: i32 = 13;
    pub const DEV_FREE_DATA: i32 = 14;
    pub const DEV_STREAM_SYNC: i32 = 15;
    pub const COPY_AMONG_REMOTE: i32 = 16;
    pub const DEV_ALLOC_DATA_WITH_SCOPE: i32 = 17;
    pub const DEV_CREATE_STREAM: i32 = 18;
    pub const DEV_FREE_STREAM: i32 = 19;
    pub const DEV_SET_STREAM: i32 = 20;
    pub const DEV_GET_CURRENT_STREAM: i32 = 21;
}

/// One packet; copies borrow their bytes from the received body.
#[derive(Debug, Clone, PartialEq)]
pub enum Packet<'a> {
    Shutdown,
    InitServer {
        version: String,
        args: Vec<Value>,
    },
    CallFunc {
        func: u64,
        args: Vec<Value>,
    },
    Return(Vec<Value>),
    Exception(String),
    CopyFromRemote {
        tensor: WireTensor,
        nbytes: u64,
    },
    CopyToRemote {
        tensor: WireTensor,
        data: &'a [u8],
    },
    CopyAck(&'a [u8]),
    /// Codes 9 to 21, with their arguments.
    Syscall {
        code: i32,
        args: Vec<Value>,
    },
}

impl<'a> Packet<'a> {
    /// Decodes a packet body (the bytes after the length), which must be consumed exactly.
    pub fn decode(body: &'a [u8]) -> Result<Packet<'a>> {
        let mut r = Reader::new(body);
        let c = r.i32()?;
        let packet = match c {
            code::SHUTDOWN => Packet::Shutdown,
            code::INIT_SERVER => {
                let version = String::from_utf8_lossy(r.blob()?).into_owned();
                Packet::InitServer { version, args: r.values()? }
            }
            code::CALL_FUNC => Packet::CallFunc { func: r.u64()?, args: r.values()? },
            code::RETURN => Packet::Return(r.values()?),
            code::EXCEPTION => {
                let values = r.values()?;
                match values.as_slice() {
                    [Value::Str(s)] => Packet::Exception(s.clone()),
                    _ => return Err(Error::value("RPC: an exception packet must hold one string")),
                }
            }
            code::COPY_FROM_REMOTE => Packet::CopyFromRemote { tensor: r.tensor()?, nbytes: r.u64()? },
            code::COPY_TO_REMOTE => {
                let tensor = r.tensor()?;
                let n = r.u64()?;
                Packet::CopyToRemote { tensor, data: r.take(n)? }
            }
            code::COPY_ACK => Packet::CopyAck(r.rest()),
            code::GET_GLOBAL_FUNC..=code::DEV_GET_CURRENT_STREAM => Packet::Syscall { code: c, args: r.values()? },
            other => return Err(Error::value(format!("RPC: Unknown event {other}"))),
        };
        if !r.is_at_end() {
            return Err(Error::value(format!("RPC: {} bytes left over after a packet of code {c}", r.remaining())));
        }
        Ok(packet)
    }

    /// The packet's bytes on the wire, its length first.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(0);
        match self {
            Packet::Shutdown => w.i32(code::SHUTDOWN),
            Packet::InitServer { version, args } => {
                w.i32(code::INIT_SERVER);
                w.blob(version.as_bytes());
                w.values(args);
            }
            Packet::CallFunc { func, args } => {
                w.i32(code::CALL_FUNC);
                w.u64(*func);
                w.values(args);
            }
            Packet::Return(values) => {
                w.i32(code::RETURN);
                w.values(values);
            }
            Packet::Exception(msg) => {
                w.i32(code::EXCEPTION);
                w.values(&[Value::Str(msg.clone())]);
            }
            Packet::CopyFromRemote { tensor, nbytes } => {
                w.i32(code::COPY_FROM_REMOTE);
                w.tensor(tensor);
                w.u64(*nbytes);
            }
            Packet::CopyToRemote { tensor, data } => {
                w.i32(code::COPY_TO_REMOTE);
                w.tensor(tensor);
                w.blob(data);
            }
            Packet::CopyAck(data) => {
                w.i32(code::COPY_ACK);
                w.raw(data);
            }
            Packet::Syscall { code, args } => {
                w.i32(*code);
                w.values(args);
            }
        }
        let n = (w.bytes.len() - 8) as u64;
        w.bytes[..8].copy_from_slice(&n.to_le_bytes());
        w.bytes
    }
}

/// How a reply's values end a call: `[int code, value...]` as `LocalSession::EncodeReturn` writes
/// it (the value and, for arrays, the handle).
pub fn void_return() -> Packet<'static> {
    Packet::Return(vec![Value::Null])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::{DLDataType, DLDevice};

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Packets RPC.md captured between TVM's own client and server.
    #[test]
    fn matches_captured_packets() {
        let init = Packet::InitServer { version: PROTOCOL_VERSION.into(), args: vec![] };
        assert_eq!(
            hex(&init.encode()),
            ["1500000000000000", "02000000", "0500000000000000", "302e382e30", "00000000"].concat()
        );
        assert_eq!(hex(&void_return().encode()), "0c00000000000000040000000100000004000000");
        let get = Packet::Syscall { code: code::GET_GLOBAL_FUNC, args: vec![Value::Str("rpc.test.addone".into())] };
        let want = ["2300000000000000", "09000000", "01000000", "0b000000", "0f00000000000000"].concat()
            + "7270632e746573742e6164646f6e65";
        assert_eq!(hex(&get.encode()), want);
        assert_eq!(hex(&Packet::Shutdown.encode()), "040000000000000001000000");
        let free =
            Packet::Syscall { code: code::FREE_HANDLE, args: vec![Value::Handle(0x55aa2d244290), Value::Int(10)] };
        let want = [
            "2000000000000000",
            "0a000000",
            "02000000",
            "03000000",
            "00000000",
            "9042242daa550000",
            "0a00000000000000",
        ];
        assert_eq!(hex(&free.encode()), want.concat());
        let call = Packet::CallFunc { func: 0x55aa2d244290, args: vec![Value::Int(10)] };
        let want = ["1c00000000000000", "03000000", "9042242daa550000", "01000000", "00000000", "0a00000000000000"];
        assert_eq!(hex(&call.encode()), want.concat());
    }

    #[test]
    fn every_packet_round_trips() {
        let t =
            WireTensor { data: 16, device: DLDevice::CPU, dtype: DLDataType::F32, shape: vec![2, 2], byte_offset: 0 };
        let data = [1u8, 2, 3, 4];
        for p in [
            Packet::Shutdown,
            Packet::InitServer { version: "0.8.0".into(), args: vec![Value::Str("rpc.LocalSession".into())] },
            Packet::CallFunc { func: 7, args: vec![Value::Int(1), Value::Tensor(t.clone())] },
            Packet::Return(vec![Value::Int(4), Value::Null]),
            Packet::Exception("RPCError: no".into()),
            Packet::CopyFromRemote { tensor: t.clone(), nbytes: 16 },
            Packet::CopyToRemote { tensor: t.clone(), data: &data },
            Packet::CopyAck(&data),
            Packet::Syscall { code: code::DEV_SET_DEVICE, args: vec![Value::Device(DLDevice::CPU)] },
        ] {
            let bytes = p.encode();
            assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize, bytes.len() - 8);
            assert_eq!(Packet::decode(&bytes[8..]).unwrap(), p);
        }
    }

    #[test]
    fn malformed_packets_are_errors() {
        for body in [
            vec![],
            0i32.to_le_bytes().to_vec(),
            22i32.to_le_bytes().to_vec(),
            [1i32.to_le_bytes(), 0i32.to_le_bytes()].concat(),
            [5i32.to_le_bytes(), 0i32.to_le_bytes()].concat(),
            [&7i32.to_le_bytes()[..], &[0u8; 28], &u64::MAX.to_le_bytes()].concat(),
        ] {
            assert!(Packet::decode(&body).is_err(), "{body:?}");
        }
    }
}
