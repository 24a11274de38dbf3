//! `tvm.contrib.sort.*`: the sorting routines CPU kernels of `argsort`, `sort`, `topk` and NMS call
//! through `TVMBackendGetFuncFromEnv`. Stable (ties keep the lower index first), along any axis.

#![deny(unsafe_code)]

use crate::dlpack::{kDLFloat, kDLInt, DLDataType};
use crate::error::{Error, Result};
use crate::packed::{Args, RetValue};
use crate::tensor::{raw, RawTensor};
use std::cmp::Ordering;

/// Elements read out of a tensor, compared in their own type.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl Values {
    fn read(t: RawTensor<'_>) -> Result<Values> {
        let d = t.dtype();
        if d.lanes != 1 {
            return Err(Error::type_err(format!("sorting {d} is not supported (one lane)")));
        }
        let mut bytes = vec![0u8; t.nbytes()?];
        raw::copy_to_bytes(t, &mut bytes)?;
        let values = match (d.code, d.bits) {
            (c, 32) if c == kDLFloat => {
                Values::Float(bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect())
            }
            (c, 64) if c == kDLFloat => {
                Values::Float(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect())
            }
            (c, 32) if c == kDLInt => {
                Values::Int(bytes.chunks_exact(4).map(|b| i32::from_le_bytes(b.try_into().unwrap()) as i64).collect())
            }
            (c, 64) if c == kDLInt => {
                Values::Int(bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect())
            }
            _ => return Err(Error::type_err(format!("sorting {d} is not supported (float32/64, int32/64)"))),
        };
        // Every position an axis walks must hold a value.
        let count: Option<usize> = t.shape().iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        if count != Some(values.len()) {
            return Err(Error::value(format!(
                "sorting a tensor of shape {:?} holding {} values",
                t.shape(),
                values.len()
            )));
        }
        Ok(values)
    }

    fn len(&self) -> usize {
        match self {
            Values::Float(v) => v.len(),
            Values::Int(v) => v.len(),
        }
    }

    fn cmp(&self, a: usize, b: usize) -> Ordering {
        match self {
            Values::Float(v) => v[a].partial_cmp(&v[b]).unwrap_or(Ordering::Equal),
            Values::Int(v) => v[a].cmp(&v[b]),
        }
    }
}

/// The layout of a sort along `axis`: `outer` rows of `n` elements, `inner` apart.
struct Axis {
    outer: usize,
    n: usize,
    inner: usize,
}

impl Axis {
    fn new(shape: &[i64], axis: i64) -> Result<Axis> {
        let nd = shape.len() as i64;
        let a = if axis < 0 { axis + nd } else { axis };
        if !(0..nd).contains(&a) {
            return Err(Error::index(format!("axis {axis} out of range for {nd} dimensions")));
        }
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let a = a as usize;
        Ok(Axis { outer: dims[..a].iter().product(), n: dims[a], inner: dims[a + 1..].iter().product() })
    }

    fn at(&self, row: usize, i: usize) -> usize {
        let (o, k) = (row / self.inner, row % self.inner);
        (o * self.n + i) * self.inner + k
    }

    fn rows(&self) -> usize {
        self.outer * self.inner
    }
}

/// The order of one row: positions `0..len` sorted by value, stably.
fn order(values: &Values, axis: &Axis, row: usize, len: usize, ascending: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..len).collect();
    idx.sort_by(|&a, &b| {
        let o = values.cmp(axis.at(row, a), axis.at(row, b));
        if ascending {
            o
        } else {
            o.reverse()
        }
    });
    idx
}

fn encode_index(dtype: DLDataType, v: usize, out: &mut Vec<u8>) -> Result<()> {
    match (dtype.code, dtype.bits) {
        (c, 32) if c == kDLInt => out.extend_from_slice(&(v as i32).to_le_bytes()),
        (c, 64) if c == kDLInt => out.extend_from_slice(&(v as i64).to_le_bytes()),
        (c, 32) if c == kDLFloat => out.extend_from_slice(&(v as f32).to_le_bytes()),
        (c, 64) if c == kDLFloat => out.extend_from_slice(&(v as f64).to_le_bytes()),
        _ => return Err(Error::type_err(format!("indices cannot be written as {dtype}"))),
    }
    Ok(())
}

/// Writes `f(row, position)` (an index or a copied value, `width` bytes each) into `out`, laid out
/// like `axis` with `k` positions per row.
fn write<F: FnMut(usize, usize, &mut Vec<u8>) -> Result<()>>(
    out: RawTensor<'_>,
    axis: &Axis,
    k: usize,
    width: usize,
    mut f: F,
) -> Result<()> {
    let mut bytes = vec![0u8; axis.rows() * k * width];
    let out_axis = Axis { outer: axis.outer, n: k, inner: axis.inner };
    let mut one = Vec::with_capacity(width);
    for row in 0..axis.rows() {
        for i in 0..k {
            one.clear();
            f(row, i, &mut one)?;
            let at = out_axis.at(row, i) * width;
            bytes[at..at + width].copy_from_slice(&one);
        }
    }
    #[allow(unsafe_code)]
    // SAFETY: `out` is the output tensor the calling kernel passes to be written, and nothing else
    // touches it until the call returns (the packed-call contract for output arguments).
    unsafe {
        raw::copy_from_bytes(out, &bytes)
    }
}

fn element(data: RawTensor<'_>, bytes: &[u8], index: usize, out: &mut Vec<u8>) {
    let w = data.dtype().element_bytes();
    out.extend_from_slice(&bytes[index * w..(index + 1) * w]);
}

fn data_bytes(t: RawTensor<'_>) -> Result<Vec<u8>> {
    let mut b = vec![0u8; t.nbytes()?];
    raw::copy_to_bytes(t, &mut b)?;
    Ok(b)
}

/// `argsort(data, out, axis, is_ascend)`.
pub fn argsort(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("argsort", 4, 4)?;
    let (data, out) = (a.tensor(0)?, a.tensor(1)?);
    let axis = Axis::new(data.shape(), a.int(2)?)?;
    let ascending = a.int(3)? != 0;
    let values = Values::read(data)?;
    let width = out.dtype().element_bytes();
    let mut cache = (usize::MAX, Vec::new());
    write(out, &axis, axis.n, width, |row, i, buf| {
        if cache.0 != row {
            cache = (row, order(&values, &axis, row, axis.n, ascending));
        }
        encode_index(out.dtype(), cache.1[i], buf)
    })?;
    Ok(RetValue::None)
}

/// `sort(data, out, axis, is_ascend)`.
pub fn sort(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("sort", 4, 4)?;
    let (data, out) = (a.tensor(0)?, a.tensor(1)?);
    let axis = Axis::new(data.shape(), a.int(2)?)?;
    let ascending = a.int(3)? != 0;
    let values = Values::read(data)?;
    let bytes = data_bytes(data)?;
    let mut cache = (usize::MAX, Vec::new());
    write(out, &axis, axis.n, data.dtype().element_bytes(), |row, i, buf| {
        if cache.0 != row {
            cache = (row, order(&values, &axis, row, axis.n, ascending));
        }
        element(data, &bytes, axis.at(row, cache.1[i]), buf);
        Ok(())
    })?;
    Ok(RetValue::None)
}

/// `topk(data, [values_out], [indices_out], k, axis, ret_type, is_ascend)`; `k < 1` means the whole
/// axis; `ret_type` is "both", "values" or "indices".
pub fn topk(a: &Args<'_>) -> Result<RetValue> {
    let n_out = match a.len() {
        7 => 2,
        6 => 1,
        n => return Err(Error::type_err(format!("topk takes 6 or 7 arguments, {n} given"))),
    };
    let data = a.tensor(0)?;
    let k_arg = a.int(1 + n_out)?;
    let axis = Axis::new(data.shape(), a.int(2 + n_out)?)?;
    let ret_type = a.str(3 + n_out)?;
    let ascending = a.int(4 + n_out)? != 0;
    let (values_out, indices_out) = match (ret_type, n_out) {
        ("both", 2) => (Some(a.tensor(1)?), Some(a.tensor(2)?)),
        ("values", 1) => (Some(a.tensor(1)?), None),
        ("indices", 1) => (None, Some(a.tensor(1)?)),
        _ => return Err(Error::value(format!("topk: ret_type '{ret_type}' does not fit {n_out} output(s)"))),
    };
    let k = if k_arg < 1 { axis.n } else { (k_arg as usize).min(axis.n) };
    let values = Values::read(data)?;
    let orders: Vec<Vec<usize>> = (0..axis.rows()).map(|row| order(&values, &axis, row, axis.n, ascending)).collect();
    if let Some(out) = values_out {
        let bytes = data_bytes(data)?;
        write(out, &axis, k, data.dtype().element_bytes(), |row, i, buf| {
            element(data, &bytes, axis.at(row, orders[row][i]), buf);
            Ok(())
        })?;
    }
    if let Some(out) = indices_out {
        write(out, &axis, k, out.dtype().element_bytes(), |row, i, buf| {
            encode_index(out.dtype(), orders[row][i], buf)
        })?;
    }
    Ok(RetValue::None)
}

/// `argsort_nms(data, valid_count, out, axis, is_ascend)`: only the first `valid_count[row]`
/// elements of each row are sorted; the others keep their own index.
pub fn argsort_nms(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("argsort_nms", 5, 5)?;
    let (data, valid, out) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let axis = Axis::new(data.shape(), a.int(3)?)?;
    let ascending = a.int(4)? != 0;
    let values = Values::read(data)?;
    let Values::Int(counts) = Values::read(valid)? else {
        return Err(Error::type_err("argsort_nms: valid_count must be int32"));
    };
    if counts.len() != axis.outer {
        return Err(Error::value(format!("argsort_nms: {} valid counts for {} rows", counts.len(), axis.outer)));
    }
    let mut cache = (usize::MAX, Vec::new());
    write(out, &axis, axis.n, out.dtype().element_bytes(), |row, i, buf| {
        if cache.0 != row {
            let valid = (counts[row / axis.inner].max(0) as usize).min(axis.n);
            let mut o = order(&values, &axis, row, valid, ascending);
            o.extend(valid..axis.n);
            cache = (row, o);
        }
        encode_index(out.dtype(), cache.1[i], buf)
    })?;
    Ok(RetValue::None)
}
