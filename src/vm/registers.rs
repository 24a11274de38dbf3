//! Reading a frame's registers: the object, tensor or tuple a register holds (borrowed where the
//! caller only looks, so no count is taken), the integer scalar of a tensor (the first element,
//! read without copying the rest) and the shape a tensor holds. Each error names the register.

use super::code::Reg;
use super::objects::AdtObj;
use crate::dlpack::kDLInt;
use crate::dtype::num_elements;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef};
use crate::tensor::{Buffer, NDArray};
use std::sync::Arc;

/// What a register holds: an object, or a storage block tensors are allocated in.
#[derive(Clone)]
pub(super) enum Value {
    Obj(AnyObject),
    Storage(Arc<Buffer>),
}

pub(super) fn empty_register(r: Reg) -> Error {
    Error::value(format!("register ${r} is read before it is written"))
}

/// The object in register `r`, borrowed.
pub(super) fn object_ref(regs: &[Option<Value>], r: Reg) -> Result<&AnyObject> {
    match &regs[r] {
        Some(Value::Obj(o)) => Ok(o),
        Some(Value::Storage(_)) => Err(Error::type_err(format!("register ${r} holds a storage block, not an object"))),
        None => Err(empty_register(r)),
    }
}

pub(super) fn object(regs: &[Option<Value>], r: Reg) -> Result<AnyObject> {
    object_ref(regs, r).cloned()
}

/// The tensor in register `r`, borrowed (no count taken).
pub(super) fn tensor_ref(regs: &[Option<Value>], r: Reg) -> Result<&NDArray> {
    let o = object_ref(regs, r)?;
    o.payload::<NDArray>()
        .ok_or_else(|| Error::type_err(format!("register ${r} holds a {}, not a tensor", o.type_key())))
}

pub(super) fn tensor(regs: &[Option<Value>], r: Reg) -> Result<ObjRef<NDArray>> {
    object(regs, r)?
        .downcast::<NDArray>()
        .map_err(|o| Error::type_err(format!("register ${r} holds a {}, not a tensor", o.type_key())))
}

pub(super) fn adt(regs: &[Option<Value>], r: Reg) -> Result<ObjRef<AdtObj>> {
    object(regs, r)?
        .downcast::<AdtObj>()
        .map_err(|o| Error::type_err(format!("register ${r} holds a {}, not a tuple", o.type_key())))
}

/// A tensor's bytes on the host.
fn host_bytes(t: &NDArray) -> Result<Vec<u8>> {
    let mut out = vec![0u8; t.nbytes()];
    t.copy_to_bytes(&mut out)?;
    Ok(out)
}

/// The first element of the tensor in `r`, as an integer (upstream's `LoadScalarInt`).
pub(super) fn scalar(regs: &[Option<Value>], r: Reg) -> Result<i64> {
    let t = tensor_ref(regs, r)?;
    let size = t.dtype().element_bytes();
    if num_elements(t.shape()).map_or(true, |n| n < 1) || !matches!(t.dtype().bits, 1 | 8 | 16 | 32 | 64) {
        return Err(Error::type_err(format!("register ${r} holds no integer scalar ({} {:?})", t.dtype(), t.shape())));
    }
    // The first element alone, on the stack: a scalar read costs no allocation.
    let mut first = [0u8; 8];
    let b = &mut first[..size.clamp(1, 8)];
    t.copy_prefix_to_bytes(b)?;
    let signed = t.dtype().code == kDLInt;
    Ok(match (t.dtype().bits, signed) {
        (1 | 8, true) => i64::from(b[0] as i8),
        (1 | 8, false) => i64::from(b[0]),
        (16, true) => i64::from(i16::from_le_bytes([b[0], b[1]])),
        (16, false) => i64::from(u16::from_le_bytes([b[0], b[1]])),
        (32, true) => i64::from(i32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
        (32, false) => i64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
        _ => i64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
    })
}

/// The shape a 1-D int32 or int64 tensor in `r` holds.
pub(super) fn shape_from(regs: &[Option<Value>], r: Reg) -> Result<Vec<i64>> {
    let t = tensor_ref(regs, r)?;
    let dt = t.dtype();
    if t.shape().len() > 1 || dt.code != kDLInt || !matches!(dt.bits, 32 | 64) || dt.lanes != 1 {
        return Err(Error::type_err(format!(
            "register ${r}: a shape is a 1-D int32 or int64 tensor, not {dt} {:?}",
            t.shape()
        )));
    }
    let bytes = host_bytes(t)?;
    Ok(if dt.bits == 32 {
        bytes.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes")))).collect()
    } else {
        bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::{DLDataType, DLDevice};

    fn holding(t: ObjRef<NDArray>) -> Vec<Option<Value>> {
        vec![None, Some(Value::Obj(t.into_any()))]
    }

    /// Every integer width a scalar register may hold reads as its value, sign included; an empty
    /// tensor or a float is no integer scalar, and an empty register says so.
    #[test]
    fn scalars_of_every_width_read_as_their_values() {
        let cases: [(u8, u8, &[u8], i64); 8] = [
            (0, 8, &[0xff], -1),
            (1, 8, &[0xff], 255),
            (0, 16, &[0xfe, 0xff], -2),
            (1, 16, &[0xff, 0xff], 65535),
            (0, 32, &[0xfd, 0xff, 0xff, 0xff], -3),
            (1, 32, &[0xff, 0xff, 0xff, 0xff], 4_294_967_295),
            (0, 64, &[0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], -4),
            (1, 1, &[1], 1),
        ];
        for (code, bits, bytes, want) in cases {
            let t = NDArray::from_bytes(&[], DLDataType::new(code, bits, 1), bytes).unwrap();
            assert_eq!(scalar(&holding(t), 1).unwrap(), want, "{code} {bits}");
        }
        // The first element of a longer tensor.
        let t = NDArray::from_bytes(&[2], DLDataType::new(0, 32, 1), &[7, 0, 0, 0, 9, 0, 0, 0]).unwrap();
        assert_eq!(scalar(&holding(t), 1).unwrap(), 7);
        let empty = NDArray::empty(&[0], DLDataType::new(0, 32, 1), DLDevice::CPU).unwrap();
        assert!(scalar(&holding(empty), 1).unwrap_err().to_string().contains("holds no integer scalar"));
        let odd = NDArray::empty(&[1], DLDataType::new(0, 4, 1), DLDevice::CPU).unwrap();
        assert!(scalar(&holding(odd), 1).unwrap_err().to_string().contains("holds no integer scalar"));
        assert!(scalar(&[None], 0).unwrap_err().to_string().contains("read before it is written"));
    }
}
