//! The wire format of TVM's RPC (protocol "0.8.0"): little-endian integers, packed sequences of
//! typed values, the wire DLTensor. Decoding reads from a bounded [`Reader`] over bytes that have
//! arrived: every length is checked against what is left before anything is sized from it, and
//! every malformed input is an error, never a panic.

#![forbid(unsafe_code)]

use crate::dlpack::{DLDataType, DLDevice};
use crate::error::{Error, Result};

/// The type codes of packed values on the wire.
pub mod code {
    pub const INT: i32 = 0;
    pub const UINT: i32 = 1;
    pub const FLOAT: i32 = 2;
    pub const HANDLE: i32 = 3;
    pub const NULL: i32 = 4;
    pub const DATA_TYPE: i32 = 5;
    pub const DEVICE: i32 = 6;
    pub const DL_TENSOR: i32 = 7;
    pub const OBJECT: i32 = 8;
    pub const MODULE: i32 = 9;
    pub const FUNC: i32 = 10;
    pub const STR: i32 = 11;
    pub const BYTES: i32 = 12;
    pub const NDARRAY: i32 = 13;
}

/// The one object type that crosses the wire (`runtime.RPCObjectRef`).
pub const RPC_OBJECT_TYPE_INDEX: u32 = 9;
/// Dimensions a wire tensor may claim: more than any model has.
const MAX_NDIM: i32 = 32;

/// A DLTensor as the wire carries it: `data` is a pointer in the server's address space (a
/// handle to the client), never dereferenced by whoever decodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct WireTensor {
    pub data: u64,
    pub device: DLDevice,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub byte_offset: u64,
}

impl WireTensor {
    /// The tensor's bytes (dtype times the shape), or an error for a shape that overflows.
    pub fn nbytes(&self) -> Result<usize> {
        crate::dtype::tensor_bytes(&self.shape, self.dtype)
    }
}

/// One packed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    /// A uint (code 1), carried as its 64 bits.
    UInt(u64),
    Float(f64),
    Handle(u64),
    Null,
    DataType(DLDataType),
    Device(DLDevice),
    Tensor(WireTensor),
    Object {
        type_index: u32,
        handle: u64,
    },
    Module(u64),
    Func(u64),
    Str(String),
    Bytes(Vec<u8>),
}

impl Value {
    pub fn code(&self) -> i32 {
        match self {
            Value::Int(_) => code::INT,
            Value::UInt(_) => code::UINT,
            Value::Float(_) => code::FLOAT,
            Value::Handle(_) => code::HANDLE,
            Value::Null => code::NULL,
            Value::DataType(_) => code::DATA_TYPE,
            Value::Device(_) => code::DEVICE,
            Value::Tensor(_) => code::DL_TENSOR,
            Value::Object { .. } => code::OBJECT,
            Value::Module(_) => code::MODULE,
            Value::Func(_) => code::FUNC,
            Value::Str(_) => code::STR,
            Value::Bytes(_) => code::BYTES,
        }
    }
}

/// Reads a received packet's bytes, never past their end.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn is_at_end(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes (a length field is checked here, against what arrived).
    pub fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).ok().filter(|&n| n <= self.remaining()).ok_or_else(|| {
            Error::value(format!("RPC: {n} bytes announced, {} left in the packet", self.remaining()))
        })?;
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.bytes[self.at..];
        self.at = self.bytes.len();
        out
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N as u64)?.try_into().expect("N bytes"))
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn i32(&mut self) -> Result<i32> {
        self.array().map(i32::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn i64(&mut self) -> Result<i64> {
        self.array().map(i64::from_le_bytes)
    }

    pub fn f64(&mut self) -> Result<f64> {
        self.array().map(f64::from_le_bytes)
    }

    /// `u64 len` then that many bytes.
    pub fn blob(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()?;
        self.take(n)
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.blob()?;
        String::from_utf8(b.to_vec()).map_err(|_| Error::value("RPC: a string that is not UTF-8"))
    }

    pub fn device(&mut self) -> Result<DLDevice> {
        Ok(DLDevice { device_type: self.i32()?, device_id: self.i32()? })
    }

    pub fn data_type(&mut self) -> Result<DLDataType> {
        Ok(DLDataType { code: self.u8()?, bits: self.u8()?, lanes: self.u16()? })
    }

    /// A wire DLTensor: data, device, ndim, dtype, shape, byte offset.
    pub fn tensor(&mut self) -> Result<WireTensor> {
        let data = self.u64()?;
        let device = self.device()?;
        let ndim = self.i32()?;
        if !(0..=MAX_NDIM).contains(&ndim) {
            return Err(Error::value(format!("RPC: a tensor of {ndim} dimensions")));
        }
        let dtype = self.data_type()?;
        let shape = (0..ndim).map(|_| self.i64()).collect::<Result<Vec<_>>>()?;
        let byte_offset = self.u64()?;
        Ok(WireTensor { data, device, dtype, shape, byte_offset })
    }

    /// A packed sequence: `i32 n`, `n` type codes, the values.
    pub fn values(&mut self) -> Result<Vec<Value>> {
        let n = self.i32()?;
        // Each value takes at least its 4-byte code: a count the packet cannot hold is refused
        // before anything is sized from it.
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n.saturating_mul(4) <= self.remaining())
            .ok_or_else(|| Error::value(format!("RPC: {n} values announced, {} bytes left", self.remaining())))?;
        let codes = (0..n).map(|_| self.i32()).collect::<Result<Vec<_>>>()?;
        codes.into_iter().map(|c| self.value(c)).collect()
    }

    fn value(&mut self, c: i32) -> Result<Value> {
        Ok(match c {
            code::INT => Value::Int(self.i64()?),
            code::UINT => Value::UInt(self.u64()?),
            code::FLOAT => Value::Float(self.f64()?),
            code::HANDLE => Value::Handle(self.u64()?),
            code::NULL => Value::Null,
            code::DATA_TYPE => {
                let t = self.data_type()?;
                self.i32()?;
                Value::DataType(t)
            }
            code::DEVICE => Value::Device(self.device()?),
            code::DL_TENSOR => Value::Tensor(self.tensor()?),
            code::OBJECT => Value::Object { type_index: self.u32()?, handle: self.u64()? },
            code::MODULE => Value::Module(self.u64()?),
            code::FUNC => Value::Func(self.u64()?),
            code::STR => Value::Str(self.string()?),
            code::BYTES => Value::Bytes(self.blob()?.to_vec()),
            code::NDARRAY => return Err(Error::value("RPCServerError:kInvalidTypeCodeNDArray")),
            other => return Err(Error::value(format!("RPCServerError:kUnknownTypeCode ({other})"))),
        })
    }
}

/// Builds bytes in the wire's order.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn raw(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    pub fn blob(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }

    pub fn device(&mut self, d: DLDevice) {
        self.i32(d.device_type);
        self.i32(d.device_id);
    }

    pub fn data_type(&mut self, t: DLDataType) {
        self.bytes.extend_from_slice(&[t.code, t.bits]);
        self.bytes.extend_from_slice(&t.lanes.to_le_bytes());
    }

    pub fn tensor(&mut self, t: &WireTensor) {
        self.u64(t.data);
        self.device(t.device);
        self.i32(t.shape.len() as i32);
        self.data_type(t.dtype);
        t.shape.iter().for_each(|&d| self.i64(d));
        self.u64(t.byte_offset);
    }

    pub fn values(&mut self, values: &[Value]) {
        self.i32(values.len() as i32);
        values.iter().for_each(|v| self.i32(v.code()));
        for v in values {
            match v {
                Value::Int(i) => self.i64(*i),
                Value::UInt(u) => self.u64(*u),
                Value::Float(f) => self.raw(&f.to_le_bytes()),
                Value::Handle(h) | Value::Module(h) | Value::Func(h) => self.u64(*h),
                Value::Null => {}
                Value::DataType(t) => {
                    self.data_type(*t);
                    self.i32(0);
                }
                Value::Device(d) => self.device(*d),
                Value::Tensor(t) => self.tensor(t),
                Value::Object { type_index, handle } => {
                    self.u32(*type_index);
                    self.u64(*handle);
                }
                Value::Str(s) => self.blob(s.as_bytes()),
                Value::Bytes(b) => self.blob(b),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(values: Vec<Value>) {
        let mut w = Writer::default();
        w.values(&values);
        let mut r = Reader::new(&w.bytes);
        assert_eq!(r.values().unwrap(), values);
        assert!(r.is_at_end());
    }

    #[test]
    fn every_value_round_trips() {
        let t = WireTensor {
            data: 0x5555_0000_1000,
            device: DLDevice { device_type: 4, device_id: 1 },
            dtype: DLDataType::F32,
            shape: vec![1, 3, 224, 224],
            byte_offset: 64,
        };
        round_trip(vec![
            Value::Int(-7),
            Value::UInt(u64::MAX),
            Value::Float(2.5),
            Value::Handle(0xdead_beef),
            Value::Null,
            Value::DataType(DLDataType::F32),
            Value::Device(DLDevice::CPU),
            Value::Tensor(t),
            Value::Object { type_index: RPC_OBJECT_TYPE_INDEX, handle: 42 },
            Value::Module(1),
            Value::Func(2),
            Value::Str("héllo".into()),
            Value::Bytes(vec![0, 1, 2]),
        ]);
        round_trip(vec![]);
    }

    /// The bytes RPC.md captured: `strcat("ab", 7)`'s reply sequence [int 11, str "ab:7"].
    #[test]
    fn matches_a_captured_sequence() {
        let mut w = Writer::default();
        w.values(&[Value::Int(11), Value::Str("ab:7".into())]);
        let hex: String = w.bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "02000000000000000b000000".to_string() + "0b00000000000000" + "0400000000000000" + "61623a37");
    }

    #[test]
    fn malformed_sequences_are_errors() {
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            (-1i32).to_le_bytes().to_vec(),
            [i32::MAX.to_le_bytes(), 0i32.to_le_bytes()].concat(),
            [1i32.to_le_bytes(), 11i32.to_le_bytes()].concat(),
            [1i32.to_le_bytes(), 13i32.to_le_bytes()].concat(),
            [1i32.to_le_bytes(), 99i32.to_le_bytes()].concat(),
            [&1i32.to_le_bytes()[..], &11i32.to_le_bytes(), &u64::MAX.to_le_bytes()].concat(),
            [&1i32.to_le_bytes()[..], &7i32.to_le_bytes(), &[0u8; 16], &1000i32.to_le_bytes()].concat(),
        ];
        for bytes in cases {
            assert!(Reader::new(&bytes).values().is_err(), "{bytes:?}");
        }
    }
}
