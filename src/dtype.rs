//! dtype strings (`"float32"`, `"int8x4"`, `"bool"`) and element sizes.

#![forbid(unsafe_code)]

use crate::dlpack::{kDLBfloat, kDLFloat, kDLInt, kDLOpaqueHandle, kDLUInt, DLDataType};
use crate::error::{Error, Result};
use std::fmt;

impl DLDataType {
    pub const fn new(code: u8, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }
    pub const F32: DLDataType = DLDataType::new(kDLFloat, 32, 1);

    /// Bytes one element occupies in memory: `ceil(bits * lanes / 8)` (bool and int4 take a byte).
    pub fn element_bytes(&self) -> usize {
        (self.bits as usize * self.lanes as usize).div_ceil(8)
    }

    /// The alignment TVM records for tensors of this type: `max(64, bytes per element)`.
    pub fn alignment(&self) -> usize {
        (self.bits as usize / 8 * self.lanes as usize).max(64)
    }

    /// Checks what `TVMArrayAlloc` accepts.
    pub fn validate_for_alloc(&self) -> Result<()> {
        let bits = self.bits as u32;
        if self.lanes == 0 {
            return Err(Error::value(format!("dtype {self}: lanes must be at least 1")));
        }
        let ok = match self.code {
            c if c == kDLFloat || c == kDLBfloat => bits % 8 == 0 && bits > 0,
            c if c == kDLInt || c == kDLUInt => bits == 1 || bits == 4 || (bits % 8 == 0 && bits > 0),
            c if c == kDLOpaqueHandle => bits == 64 || bits == 0,
            _ => false,
        };
        if !ok || !bits.is_power_of_two() && bits != 0 {
            return Err(Error::value(format!("unsupported dtype {self} for an array")));
        }
        Ok(())
    }
}

impl std::str::FromStr for DLDataType {
    type Err = Error;

    fn from_str(s: &str) -> Result<DLDataType> {
        parse(s)
    }
}

/// Parses `<prefix><bits>[x<lanes>]`; `bits` defaults to 32, `bool` is uint1, `handle` is 64 bits.
pub fn parse(s: &str) -> Result<DLDataType> {
    let bad = || Error::value(format!("unknown dtype '{s}'"));
    match s {
        "bool" => return Ok(DLDataType::new(kDLUInt, 1, 1)),
        "" | "void" => return Ok(DLDataType::new(kDLOpaqueHandle, 0, 0)),
        _ => {}
    }
    let (code, rest, default_bits) = [
        ("uint", kDLUInt, 32),
        ("int", kDLInt, 32),
        ("float", kDLFloat, 32),
        ("bfloat", kDLBfloat, 16),
        ("handle", kDLOpaqueHandle, 64),
    ]
    .iter()
    .find_map(|&(p, c, d)| s.strip_prefix(p).map(|r| (c, r, d)))
    .ok_or_else(bad)?;
    let (bits_str, lanes_str) = match rest.split_once('x') {
        Some((b, l)) => (b, Some(l)),
        None => (rest, None),
    };
    let bits: u8 = if bits_str.is_empty() { default_bits } else { bits_str.parse().map_err(|_| bad())? };
    let lanes: u16 = match lanes_str {
        Some(l) => l.parse().map_err(|_| bad())?,
        None => 1,
    };
    if lanes == 0 {
        return Err(bad());
    }
    Ok(DLDataType::new(code, bits, lanes))
}

impl fmt::Display for DLDataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code == kDLUInt && self.bits == 1 && self.lanes == 1 {
            return f.write_str("bool");
        }
        if self.code == kDLOpaqueHandle && self.bits == 0 && self.lanes == 0 {
            return f.write_str("void");
        }
        let prefix = match self.code {
            c if c == kDLInt => "int",
            c if c == kDLUInt => "uint",
            c if c == kDLFloat => "float",
            c if c == kDLBfloat => "bfloat",
            c if c == kDLOpaqueHandle => return f.write_str("handle"),
            6 => "e4m3_float",
            7 => "e5m2_float",
            c => return write!(f, "custom[{c}]{}", self.bits),
        };
        write!(f, "{prefix}{}", self.bits)?;
        if self.lanes != 1 {
            write!(f, "x{}", self.lanes)?;
        }
        Ok(())
    }
}

/// The number of elements of `shape`, refusing negative dims and overflow.
pub fn num_elements(shape: &[i64]) -> Result<usize> {
    let mut n = 1usize;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| Error::value(format!("negative dimension in shape {shape:?}")))?;
        n = n.checked_mul(d).ok_or_else(|| Error::value(format!("shape {shape:?} overflows")))?;
    }
    Ok(n)
}

/// The largest tensor this runtime accepts (1 TiB): a bound on every size that comes from a file
/// or a caller, so sums and roundings of sizes cannot overflow.
pub(crate) const MAX_TENSOR_BYTES: usize = 1 << 40;

/// Bytes a compact tensor of `shape` and `dtype` occupies, at most [`MAX_TENSOR_BYTES`].
pub fn tensor_bytes(shape: &[i64], dtype: DLDataType) -> Result<usize> {
    match num_elements(shape)?.checked_mul(dtype.element_bytes()) {
        Some(n) if n <= MAX_TENSOR_BYTES => Ok(n),
        _ => Err(Error::value(format!("{dtype} {shape:?} is larger than the 1 TiB a tensor may have"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in ["float32", "float16", "int8", "uint8", "int64", "bool", "int8x4", "handle", "bfloat16"] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
        assert_eq!(parse("int").unwrap(), DLDataType::new(kDLInt, 32, 1));
        assert!(parse("float32garbage").is_err());
        assert!(parse("complex64").is_err());
        assert!(parse("float32x0").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse("bool").unwrap().element_bytes(), 1);
        assert_eq!(tensor_bytes(&[2, 3], parse("float64").unwrap()).unwrap(), 48);
        assert_eq!(tensor_bytes(&[], DLDataType::F32).unwrap(), 4);
        assert!(tensor_bytes(&[-1], DLDataType::F32).is_err());
        assert!(tensor_bytes(&[i64::MAX, 4], DLDataType::F32).is_err());
    }
}
