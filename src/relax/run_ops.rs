//! The `relax.run.*` functions: operators upstream runs through Python functions its package
//! registers (so a deployment without TVM's Python cannot run them, apache/tvm#19849), here in
//! the runtime: `shape_to_tensor`, `nonzero`, `unique`, `assert_op` and `print`, with numpy's
//! semantics as upstream's Python gives them.

#![forbid(unsafe_code)]

use super::value::Value;
use crate::dlpack::{kDLBool, kDLFloat, kDLInt, kDLUInt, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::NDArray;
use std::cmp::Ordering;

const INT64: DLDataType = DLDataType { code: kDLInt, bits: 64, lanes: 1 };

fn int64_tensor(shape: &[i64], values: &[i64]) -> Result<Value> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(Value::Tensor(NDArray::from_bytes(shape, INT64, &bytes)?))
}

/// A tensor's bytes on the host.
fn host_bytes(t: &NDArray) -> Result<Vec<u8>> {
    if t.device().device_type == crate::dlpack::kDLCPU {
        return Ok(t.to_vec());
    }
    Ok(NDArray::copy_of(t.raw(), DLDevice::CPU)?.to_vec())
}

/// One element, ordered as numpy orders it (NaNs last, all equal).
#[derive(Clone, Copy, PartialEq)]
enum Key {
    Int(i128),
    Float(f64),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Float(a), Key::Float(b)) => match (a.is_nan(), b.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            },
            _ => Ordering::Equal,
        }
    }
}

/// The elements of a tensor as keys (the dtypes `unique` and `nonzero` take).
fn keys(t: &NDArray) -> Result<Vec<Key>> {
    let dt = t.dtype();
    let bytes = host_bytes(t)?;
    let width = usize::from(dt.bits).div_ceil(8).max(1);
    if dt.lanes != 1 {
        return Err(Error::type_err(format!("a vector dtype {dt}")));
    }
    bytes
        .chunks_exact(width)
        .map(|c| {
            Ok(match (dt.code, dt.bits) {
                (kDLInt, 8) => Key::Int(c[0] as i8 as i128),
                (kDLInt, 16) => Key::Int(i16::from_le_bytes([c[0], c[1]]) as i128),
                (kDLInt, 32) => Key::Int(i32::from_le_bytes(c.try_into().expect("4")) as i128),
                (kDLInt, 64) => Key::Int(i64::from_le_bytes(c.try_into().expect("8")) as i128),
                (kDLUInt | kDLBool, 1 | 8) => Key::Int(c[0] as i128),
                (kDLUInt, 16) => Key::Int(u16::from_le_bytes([c[0], c[1]]) as i128),
                (kDLUInt, 32) => Key::Int(u32::from_le_bytes(c.try_into().expect("4")) as i128),
                (kDLUInt, 64) => Key::Int(u64::from_le_bytes(c.try_into().expect("8")) as i128),
                (kDLFloat, 32) => Key::Float(f32::from_le_bytes(c.try_into().expect("4")) as f64),
                (kDLFloat, 64) => Key::Float(f64::from_le_bytes(c.try_into().expect("8"))),
                _ => return Err(Error::type_err(format!("relax.run operators do not take {dt}"))),
            })
        })
        .collect()
}

/// `shape_to_tensor(shape)`: the dims as an int64 tensor.
pub fn shape_to_tensor(args: &[&Value]) -> Result<Value> {
    let dims = args.first().copied().ok_or_else(|| Error::type_err("shape_to_tensor of nothing"))?.shape()?;
    int64_tensor(&[dims.len() as i64], dims)
}

/// `nonzero(x)`: the indices of the non-zero elements, one row per axis (a 0-d tensor as 1-d).
pub fn nonzero(args: &[&Value]) -> Result<Value> {
    let t = args.first().copied().ok_or_else(|| Error::type_err("nonzero of nothing"))?.tensor()?;
    let shape: Vec<i64> = if t.shape().is_empty() { vec![1] } else { t.shape().to_vec() };
    let found: Vec<usize> = keys(t)?
        .iter()
        .enumerate()
        .filter(|(_, k)| match k {
            Key::Int(v) => *v != 0,
            Key::Float(v) => *v != 0.0,
        })
        .map(|(i, _)| i)
        .collect();
    let mut rows = vec![0i64; shape.len() * found.len()];
    for (j, &flat) in found.iter().enumerate() {
        let mut rest = flat as i64;
        for axis in (0..shape.len()).rev() {
            rows[axis * found.len() + j] = rest % shape[axis].max(1);
            rest /= shape[axis].max(1);
        }
    }
    int64_tensor(&[shape.len() as i64, found.len() as i64], &rows)
}

/// `unique(x, sorted, return_index, return_inverse, return_counts[, axis])`, over the flattened
/// tensor (axis None): the unique values, then the requested extras, as numpy returns them.
pub fn unique(args: &[&Value]) -> Result<Value> {
    let t: &ObjRef<NDArray> = args.first().copied().ok_or_else(|| Error::type_err("unique of nothing"))?.tensor()?;
    let flag = |i: usize| args.get(i).map(|v| v.int().map(|x| x != 0)).unwrap_or(Ok(false));
    let (sorted, want_index, want_inverse, want_counts) = (flag(1)?, flag(2)?, flag(3)?, flag(4)?);
    if let Some(axis) = args.get(5).filter(|v| !matches!(v, Value::None)) {
        return Err(Error::value(format!(
            "unique along an axis ({}) is not supported: only over all elements",
            axis.kind()
        )));
    }
    let values = keys(t)?;
    let width = usize::from(t.dtype().bits).div_ceil(8).max(1);
    let bytes = host_bytes(t)?;
    // Indices in sorted order, stable: each value's first occurrence leads its run.
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].cmp(&values[b]));
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new(); // (first index, members)
    for &i in &order {
        match groups.last_mut() {
            Some((_, members)) if values[members[0]].cmp(&values[i]) == Ordering::Equal => members.push(i),
            _ => groups.push((i, vec![i])),
        }
    }
    if !sorted {
        groups.sort_by_key(|(first, _)| *first);
    }
    let mut out_bytes = Vec::with_capacity(groups.len() * width);
    for (first, _) in &groups {
        out_bytes.extend_from_slice(&bytes[first * width..(first + 1) * width]);
    }
    let uniques = Value::Tensor(NDArray::from_bytes(&[groups.len() as i64], t.dtype(), &out_bytes)?);
    if !(want_index || want_inverse || want_counts) {
        return Ok(uniques);
    }
    let mut out = vec![uniques];
    let n = groups.len() as i64;
    if want_index {
        let index: Vec<i64> = groups.iter().map(|(first, _)| *first as i64).collect();
        out.push(int64_tensor(&[n], &index)?);
    }
    if want_inverse {
        let mut inverse = vec![0i64; values.len()];
        for (g, (_, members)) in groups.iter().enumerate() {
            for &m in members {
                inverse[m] = g as i64;
            }
        }
        out.push(int64_tensor(&[values.len() as i64], &inverse)?);
    }
    if want_counts {
        let counts: Vec<i64> = groups.iter().map(|(_, m)| m.len() as i64).collect();
        out.push(int64_tensor(&[n], &counts)?);
    }
    Ok(Value::Tuple(out.into()))
}

/// A value as upstream renders it in messages (tensors by their values).
fn render(v: &Value) -> String {
    match v {
        Value::Tensor(t) => match keys(t) {
            Ok(k) => {
                let items: Vec<String> = k
                    .iter()
                    .map(|k| match k {
                        Key::Int(i) => i.to_string(),
                        Key::Float(f) => f.to_string(),
                    })
                    .collect();
                if t.shape().is_empty() {
                    items.join("")
                } else {
                    format!("[{}]", items.join(", "))
                }
            }
            Err(_) => format!("<{} tensor {:?}>", t.dtype(), t.shape()),
        },
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Shape(s) => format!("{s:?}"),
        Value::Tuple(items) => format!("({})", items.iter().map(render).collect::<Vec<_>>().join(", ")),
        other => other.kind().to_string(),
    }
}

/// Python's `str.format` with positional `{}` fields only.
fn format(fmt: &str, values: &[&Value]) -> String {
    let mut out = String::new();
    let mut next = values.iter();
    let mut rest = fmt;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        match rest[at..].find('}') {
            Some(end) => {
                out.push_str(&next.next().map(|v| render(v)).unwrap_or_default());
                rest = &rest[at + end + 1..];
            }
            None => {
                rest = &rest[at..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The message of `print` and of a failed `assert_op`: the format, else the values joined.
fn message(fmt: &str, values: &[&Value], otherwise: &str) -> String {
    if !fmt.is_empty() {
        format(fmt, values)
    } else if values.is_empty() {
        otherwise.to_string()
    } else {
        values.iter().map(|v| render(v)).collect::<Vec<_>>().join(", ")
    }
}

/// `assert_op(condition, format, values...)`: an error when the condition (a bool or int, or a
/// bool scalar tensor) is false.
pub fn assert_op(args: &[&Value]) -> Result<Value> {
    let holds = match args.first().copied() {
        Some(Value::Int(i)) => *i != 0,
        Some(Value::Tensor(t)) => {
            if !t.shape().is_empty() {
                return Err(Error::value(format!(
                    "The condition must be a scalar, but it has a shape of {:?}",
                    t.shape()
                )));
            }
            match keys(t)?.first() {
                Some(Key::Int(v)) => *v != 0,
                _ => {
                    return Err(Error::value(format!(
                        "The condition must be a bool scalar, but given a {} tensor",
                        t.dtype()
                    )))
                }
            }
        }
        other => {
            return Err(Error::type_err(format!("an assert condition of {}", other.map_or("nothing", Value::kind))))
        }
    };
    if holds {
        return Ok(Value::None);
    }
    let fmt = args.get(1).copied().and_then(Value::opt_str).unwrap_or("");
    let rest = args.get(2..).unwrap_or(&[]);
    Err(Error::value(format!("AssertionError: {}", message(fmt, rest, "Assertion Failed"))))
}

/// `print(format, values...)`: to standard output.
pub fn print(args: &[&Value]) -> Result<Value> {
    let fmt = args.first().copied().and_then(Value::opt_str).unwrap_or("");
    let rest = args.get(1..).unwrap_or(&[]);
    println!("{}", message(fmt, rest, ""));
    Ok(Value::None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(values: &[Value]) -> Vec<&Value> {
        values.iter().collect()
    }

    fn floats(v: &[f32]) -> Value {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Value::Tensor(
            NDArray::from_bytes(&[v.len() as i64], DLDataType { code: kDLFloat, bits: 32, lanes: 1 }, &bytes).unwrap(),
        )
    }

    fn ints(v: &Value) -> Vec<i64> {
        v.tensor().unwrap().to_vec().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn unique_as_numpy() {
        let x = floats(&[3.0, 1.0, 3.0, 2.0, 1.0]);
        let all = unique(&refs(&[x.clone(), Value::Int(1), Value::Int(1), Value::Int(1), Value::Int(1)])).unwrap();
        let parts = all.tuple().unwrap();
        assert_eq!(
            parts[0].tensor().unwrap().to_vec(),
            [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()
        );
        assert_eq!(ints(&parts[1]), [1, 3, 0]); // first occurrences
        assert_eq!(ints(&parts[2]), [2, 0, 2, 1, 0]); // inverse
        assert_eq!(ints(&parts[3]), [2, 1, 2]); // counts
        let unsorted = unique(&refs(&[x, Value::Int(0), Value::Int(0), Value::Int(0), Value::Int(0)])).unwrap();
        assert_eq!(
            unsorted.tensor().unwrap().to_vec(),
            [3.0f32, 1.0, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn nonzero_rows_per_axis() {
        let bytes: Vec<u8> = [0i32, 5, 0, 7, 0, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = NDArray::from_bytes(&[2, 3], DLDataType { code: kDLInt, bits: 32, lanes: 1 }, &bytes).unwrap();
        let nz = nonzero(&refs(&[Value::Tensor(t)])).unwrap();
        assert_eq!(nz.tensor().unwrap().shape(), &[2, 3]);
        assert_eq!(ints(&nz), [0, 1, 1, 1, 0, 2]);
    }

    #[test]
    fn assert_formats_like_python() {
        assert!(assert_op(&refs(&[Value::Int(1), Value::Str("x".into())])).is_ok());
        let e =
            assert_op(&refs(&[Value::Int(0), Value::Str("got {} and {}".into()), Value::Int(3), Value::Float(0.5)]))
                .err()
                .unwrap();
        assert!(e.to_string().contains("AssertionError: got 3 and 0.5"), "{e}");
        let e = assert_op(&refs(&[Value::Int(0), Value::Str("".into())])).err().unwrap();
        assert!(e.to_string().contains("Assertion Failed"), "{e}");
    }
}
