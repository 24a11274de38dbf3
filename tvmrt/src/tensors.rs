//! Host tensors for the CLI: `.npy` / `.npz` files (read and written with the `npyz` and `zip`
//! crates) and filling.

use std::io::{Read, Write};
use tvm_runtime::dlpack::DLDataType;
use tvm_runtime::{Error, Result};

/// A named host tensor: raw little-endian bytes.
#[derive(Clone, Debug)]
pub struct HostTensor {
    pub name: String,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

fn io_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::value(format!("{what}: {e}"))
}

/// numpy's type string for a dtype.
fn type_str(dtype: DLDataType) -> Result<&'static str> {
    Ok(match dtype.to_string().as_str() {
        "float32" => "<f4",
        "float16" => "<f2",
        "float64" => "<f8",
        "int8" => "|i1",
        "uint8" => "|u1",
        "int16" => "<i2",
        "uint16" => "<u2",
        "int32" => "<i4",
        "uint32" => "<u4",
        "int64" => "<i8",
        "uint64" => "<u8",
        "bool" => "|b1",
        other => return Err(Error::value(format!("dtype {other} cannot be stored in a .npy file"))),
    })
}

/// The dtype of a numpy type string, and whether its bytes are in the other order (big-endian).
fn dtype_of(ts: &str) -> Result<(DLDataType, bool)> {
    let unsupported = || Error::value(format!("unsupported .npy dtype '{ts}' (numbers and bool only)"));
    let (order, kind) = ts.split_at(ts.char_indices().nth(1).map_or(ts.len(), |(i, _)| i));
    let swapped = match order {
        "<" | "|" | "=" => false,
        ">" => true,
        _ => return Err(unsupported()),
    };
    let name = match kind {
        "f4" => "float32",
        "f2" => "float16",
        "f8" => "float64",
        "i1" => "int8",
        "u1" => "uint8",
        "i2" => "int16",
        "u2" => "uint16",
        "i4" => "int32",
        "u4" => "uint32",
        "i8" => "int64",
        "u8" => "uint64",
        "b1" => "bool",
        _ => return Err(unsupported()),
    };
    let dtype: DLDataType = name.parse()?;
    Ok((dtype, swapped && dtype.bits > 8))
}

/// `data`, `size`-byte elements of a Fortran-ordered array of `shape`, in C order.
fn c_order(data: &[u8], shape: &[i64], size: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let count: usize = dims.iter().product();
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0usize; dims.len()];
    for _ in 0..count {
        // Fortran order: the first index varies fastest.
        let (mut at, mut stride) = (0usize, 1usize);
        for (i, &d) in index.iter().zip(&dims) {
            at += i * stride;
            stride *= d;
        }
        out.extend_from_slice(&data[at * size..(at + 1) * size]);
        // The next C-order index: the last varies fastest.
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

/// Reads one `.npy` stream: any byte order (big-endian values are turned into this machine's)
/// and either memory order (Fortran-ordered arrays are laid out in C order).
/// `label` says where it comes from in errors (a file, an archive's member); `name` is the
/// tensor's.
pub fn read_npy(name: &str, label: &str, r: impl Read) -> Result<HostTensor> {
    let at = |e| io_err(&format!("reading {label}"), e);
    let npy = npyz::NpyFile::new(r).map_err(at)?;
    let fortran = npy.order() == npyz::Order::Fortran;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(Error::value(format!("{label}: structured arrays are not supported")));
    };
    let (dtype, swapped) = dtype_of(&ts.to_string()).map_err(|e| e.context(label.to_string()))?;
    let shape: Vec<i64> = npy.shape().iter().map(|&d| d as i64).collect();
    let want = tvm_runtime::dtype::tensor_bytes(&shape, dtype)?;
    let mut data = Vec::with_capacity(want);
    npy.into_inner().take(want as u64).read_to_end(&mut data).map_err(at)?;
    if data.len() != want {
        return Err(Error::value(format!("{label}: {} data bytes, {dtype} {shape:?} needs {want}", data.len())));
    }
    let size = dtype.element_bytes();
    if swapped {
        data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    if fortran && shape.len() > 1 {
        data = c_order(&data, &shape, size);
    }
    Ok(HostTensor { name: name.to_string(), dtype, shape, data })
}

pub fn write_npy(t: &HostTensor, w: impl Write) -> Result<()> {
    use npyz::WriterBuilder;
    let at = |e: &dyn std::fmt::Display| io_err(&format!("writing '{}'", t.name), e);
    let ts: npyz::TypeStr = type_str(t.dtype)?.parse().map_err(|e| at(&e))?;
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let mut w = w;
    npyz::WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(ts))
        .shape(&shape)
        .writer(&mut w)
        .write_header_only()
        .map_err(|e| at(&e))?;
    w.write_all(&t.data).map_err(|e| at(&e))
}

/// The dtype and shape a raw file is read as: written after the file name (`FILE@float32[1,3,8]`,
/// or `FILE@int64` for a one-dimensional array of the file's length), else the model's own.
pub type Like<'a> = Option<(DLDataType, &'a [i64])>;

/// A layout written after a file name: its dtype, and its shape when given.
type Layout = (DLDataType, Option<Vec<i64>>);

/// `FILE[@DTYPE[SHAPE]]` split: the path, and the layout written after it, if any. A name whose
/// part after the last `@` is no layout is a path with `@` in it.
fn split_layout(spec: &str) -> Result<(&str, Option<Layout>)> {
    let Some((path, layout)) = spec.rsplit_once('@') else { return Ok((spec, None)) };
    let (dtype, shape) = match layout.split_once('[') {
        Some((d, rest)) => (d, Some(rest)),
        None => (layout, None),
    };
    let Ok(dtype) = dtype.parse::<DLDataType>() else { return Ok((spec, None)) };
    let shape = match shape {
        None => None,
        Some(rest) => {
            let dims = rest.strip_suffix(']').ok_or_else(|| {
                Error::value(format!("'{spec}': a shape is written as DTYPE[D0,D1,...], e.g. @float32[1,3,224,224]"))
            })?;
            let dims: std::result::Result<Vec<i64>, _> =
                dims.split(',').filter(|d| !d.trim().is_empty()).map(|d| d.trim().parse::<i64>()).collect();
            match dims {
                Ok(d) if d.iter().all(|&x| x >= 0) => Some(d),
                _ => return Err(Error::value(format!("'{spec}': the shape's dimensions are numbers of 0 or more"))),
            }
        }
    };
    Ok((path, Some((dtype, shape))))
}

/// A tensor named `name` from a file given on the command line: an `.npy` (known by its magic
/// string, whatever the file's name), else raw little-endian bytes in C order, read as the layout
/// written after the name (`FILE@DTYPE[SHAPE]`) or, without one, as `like` (the model's input or
/// output it stands for). A raw file of the wrong size is refused, saying what it should hold.
pub fn read_tensor_file(name: &str, spec: &str, like: Like<'_>) -> Result<HostTensor> {
    let (path, layout) = split_layout(spec)?;
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    if bytes.starts_with(b"\x93NUMPY") {
        if layout.is_some() {
            return Err(Error::value(format!("'{spec}': {path} is an .npy file, which says its own dtype and shape")));
        }
        return read_npy(name, path, bytes.as_slice());
    }
    let (dtype, shape) = match (layout, like) {
        (Some((dtype, Some(shape))), _) => (dtype, shape),
        (Some((dtype, None)), _) => {
            let size = dtype.element_bytes().max(1);
            (dtype, vec![(bytes.len() / size) as i64])
        }
        (None, Some((dtype, shape))) => (dtype, shape.to_vec()),
        (None, None) => {
            return Err(Error::value(format!(
                "{path} is not an .npy file and nothing says how to read its bytes: write its layout after the \
                 name, e.g. {path}@float32[1,3,224,224]"
            )))
        }
    };
    if shape.iter().any(|&d| d < 0) {
        return Err(Error::value(format!(
            "{path}: '{name}' has dimensions of any size ({shape:?}); write the file's layout after its name, \
             e.g. {path}@{dtype}[...]"
        )));
    }
    let want = tvm_runtime::dtype::tensor_bytes(&shape, dtype)?;
    if bytes.len() != want {
        return Err(Error::value(format!(
            "{path} holds {} bytes, read as raw {dtype} {shape:?} for '{name}' it must hold {want} (an .npy file, or \
             FILE@DTYPE[SHAPE], says what a file holds)",
            bytes.len()
        )));
    }
    Ok(HostTensor { name: name.to_string(), dtype, shape, data: bytes })
}

/// The reference arrays of `run --expect`: every array of an `.npz` (by name, else in order), or
/// one array for the first output, from an `.npy` or a raw file (read as `first`, the first
/// output's dtype and shape, unless a layout follows its name). The flag says which.
pub fn read_expected(spec: &str, first: Like<'_>) -> Result<(Vec<HostTensor>, bool)> {
    let (path, _) = split_layout(spec)?;
    let mut head = [0u8; 4];
    let is_zip = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"PK\x03\x04";
    if is_zip {
        return Ok((read_npz(path)?, false));
    }
    Ok((vec![read_tensor_file("output_0", spec, first)?], true))
}

/// Every array of an `.npz` archive, named by entry (without `.npy`).
pub fn read_npz(path: &str) -> Result<Vec<HostTensor>> {
    let f = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(f)).map_err(|e| io_err(path, e))?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| io_err(path, e))?;
        let name = entry.name().trim_end_matches(".npy").to_string();
        let label = format!("{path}:{}", entry.name());
        out.push(read_npy(&name, &label, entry)?);
    }
    Ok(out)
}

pub fn write_npz(path: &str, tensors: &[HostTensor]) -> Result<()> {
    let f = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let mut zip = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for t in tensors {
        zip.start_file(format!("{}.npy", t.name), opts).map_err(|e| io_err(path, e))?;
        write_npy(t, &mut zip)?;
    }
    zip.finish().map_err(|e| io_err(path, e))?;
    Ok(())
}

/// How to fill inputs no file provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    Random(u64),
    Zeros,
    Ones,
}

/// The fill a `--fill` names.
pub fn fill_of(kind: crate::FillKind, seed: u64) -> Fill {
    match kind {
        crate::FillKind::Random => Fill::Random(seed),
        crate::FillKind::Zeros => Fill::Zeros,
        crate::FillKind::Ones => Fill::Ones,
    }
}

/// The arrays of `run --expect`, read once the outputs are known (a raw reference takes the first
/// output's dtype and shape); the flag: one array, for the first output only.
pub fn expected_of(a: &crate::RunArgs, first: Option<&HostTensor>) -> Result<Option<(Vec<HostTensor>, bool)>> {
    let Some(p) = &a.expect else { return Ok(None) };
    read_expected(&p.to_string_lossy(), first.map(|t| (t.dtype, &t.shape[..]))).map(Some)
}

/// A tensor filled as asked: random values are small and valid for the dtype.
pub fn filled(name: &str, dtype: DLDataType, shape: &[i64], fill: Fill) -> Result<HostTensor> {
    let n = tvm_runtime::dtype::num_elements(shape)?;
    let mut rng = Rng::new(match fill {
        Fill::Random(seed) => seed ^ name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)),
        _ => 0,
    });
    let mut unit = || -> f64 {
        match fill {
            Fill::Zeros => 0.0,
            Fill::Ones => 1.0,
            Fill::Random(_) => (rng.next_u64() % 2001) as f64 / 1000.0 - 1.0,
        }
    };
    let mut data = Vec::with_capacity(n * dtype.element_bytes());
    for _ in 0..n {
        let v = unit();
        match dtype.to_string().as_str() {
            "float32" => data.extend_from_slice(&(v as f32).to_le_bytes()),
            "float64" => data.extend_from_slice(&v.to_le_bytes()),
            "float16" => data.extend_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
            "bool" => data.push((v > 0.0) as u8),
            "int8" => data.push(((v * 100.0) as i8) as u8),
            "uint8" => data.push((v.abs() * 200.0) as u8),
            "int32" => data.extend_from_slice(&((v * 100.0) as i32).to_le_bytes()),
            "int64" => data.extend_from_slice(&((v * 100.0) as i64).to_le_bytes()),
            other => return Err(Error::value(format!("cannot fill an input of dtype {other}"))),
        }
    }
    Ok(HostTensor { name: name.to_string(), dtype, shape: shape.to_vec(), data })
}

fn f32_to_f16(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let man = b & 0x7f_ffff;
    if exp <= 0 {
        sign
    } else if exp >= 31 {
        sign | 0x7c00
    } else {
        sign | ((exp as u16) << 10) | ((man >> 13) as u16)
    }
}

/// The first few values in the tensor's own type, for summaries: integers as integers, booleans
/// as booleans, floats as numbers.
pub fn preview(t: &HostTensor, count: usize) -> Vec<serde_json::Value> {
    use serde_json::Value;
    fn le<const N: usize>(c: &[u8]) -> [u8; N] {
        c.try_into().expect("chunks of the element size")
    }
    let b = &t.data;
    let float = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
    let vals: Box<dyn Iterator<Item = Value>> = match t.dtype.to_string().as_str() {
        "float32" => Box::new(b.chunks_exact(4).map(|c| float(f32::from_le_bytes(le(c)) as f64))),
        "float64" => Box::new(b.chunks_exact(8).map(|c| float(f64::from_le_bytes(le(c))))),
        "float16" => Box::new(b.chunks_exact(2).map(|c| float(f16_to_f32(u16::from_le_bytes(le(c))) as f64))),
        "int8" => Box::new(b.iter().map(|&x| Value::from(x as i8))),
        "int16" => Box::new(b.chunks_exact(2).map(|c| Value::from(i16::from_le_bytes(le(c))))),
        "int32" => Box::new(b.chunks_exact(4).map(|c| Value::from(i32::from_le_bytes(le(c))))),
        "int64" => Box::new(b.chunks_exact(8).map(|c| Value::from(i64::from_le_bytes(le(c))))),
        "uint8" => Box::new(b.iter().map(|&x| Value::from(x))),
        "uint16" => Box::new(b.chunks_exact(2).map(|c| Value::from(u16::from_le_bytes(le(c))))),
        "uint32" => Box::new(b.chunks_exact(4).map(|c| Value::from(u32::from_le_bytes(le(c))))),
        "uint64" => Box::new(b.chunks_exact(8).map(|c| Value::from(u64::from_le_bytes(le(c))))),
        "bool" => Box::new(b.iter().map(|&x| Value::from(x != 0))),
        _ => Box::new(std::iter::empty()),
    };
    vals.take(count).collect()
}

/// A preview value as text: floats with six decimals, integers and booleans as they are.
pub fn show(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => format!("{:.6}", n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    }
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            let mut e = 127 - 15 + 1;
            let mut m = man;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
        31 => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// xorshift64*: small, seeded, the same values on every machine (inputs a seed names are the same
/// inputs everywhere).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Every value of a tensor as f64 (for comparisons and rankings; int64 beyond 2^53 rounds).
pub fn values(t: &HostTensor) -> Result<Vec<f64>> {
    fn le<const N: usize>(c: &[u8]) -> [u8; N] {
        c.try_into().expect("chunks of the element size")
    }
    let b = &t.data;
    Ok(match t.dtype.to_string().as_str() {
        "float32" => b.chunks_exact(4).map(|c| f32::from_le_bytes(le(c)) as f64).collect(),
        "float64" => b.chunks_exact(8).map(|c| f64::from_le_bytes(le(c))).collect(),
        "float16" => b.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes(le(c))) as f64).collect(),
        "int8" => b.iter().map(|&x| x as i8 as f64).collect(),
        "int16" => b.chunks_exact(2).map(|c| i16::from_le_bytes(le(c)) as f64).collect(),
        "int32" => b.chunks_exact(4).map(|c| i32::from_le_bytes(le(c)) as f64).collect(),
        "int64" => b.chunks_exact(8).map(|c| i64::from_le_bytes(le(c)) as f64).collect(),
        "uint8" | "bool" => b.iter().map(|&x| x as f64).collect(),
        "uint16" => b.chunks_exact(2).map(|c| u16::from_le_bytes(le(c)) as f64).collect(),
        "uint32" => b.chunks_exact(4).map(|c| u32::from_le_bytes(le(c)) as f64).collect(),
        "uint64" => b.chunks_exact(8).map(|c| u64::from_le_bytes(le(c)) as f64).collect(),
        other => return Err(Error::type_err(format!("no values of dtype {other}"))),
    })
}

/// `t` converted to `dtype`, as numpy's `astype` does for numbers (floats to integers truncated),
/// refusing a value the new dtype cannot hold rather than wrapping it.
pub fn cast(t: &HostTensor, dtype: DLDataType) -> Result<HostTensor> {
    let name = dtype.to_string();
    let vals = values(t)?;
    let range = |lo: f64, hi: f64| -> Result<()> {
        match vals.iter().find(|v| v.is_nan() || v.trunc() < lo || v.trunc() > hi) {
            Some(v) => {
                Err(Error::value(format!("cannot cast input '{}' to {name}: the value {v} does not fit it", t.name)))
            }
            None => Ok(()),
        }
    };
    let mut data = Vec::with_capacity(vals.len() * dtype.element_bytes());
    match name.as_str() {
        "float32" => vals.iter().for_each(|v| data.extend_from_slice(&(*v as f32).to_le_bytes())),
        "float64" => vals.iter().for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
        "float16" => vals.iter().for_each(|v| data.extend_from_slice(&f32_to_f16(*v as f32).to_le_bytes())),
        "bool" => vals.iter().for_each(|v| data.push(u8::from(*v != 0.0))),
        "int8" => {
            range(i8::MIN as f64, i8::MAX as f64)?;
            vals.iter().for_each(|v| data.push(*v as i8 as u8));
        }
        "uint8" => {
            range(0.0, u8::MAX as f64)?;
            vals.iter().for_each(|v| data.push(*v as u8));
        }
        "int16" => {
            range(i16::MIN as f64, i16::MAX as f64)?;
            vals.iter().for_each(|v| data.extend_from_slice(&(*v as i16).to_le_bytes()));
        }
        "int32" => {
            range(i32::MIN as f64, i32::MAX as f64)?;
            vals.iter().for_each(|v| data.extend_from_slice(&(*v as i32).to_le_bytes()));
        }
        "int64" => {
            range(i64::MIN as f64, i64::MAX as f64)?;
            vals.iter().for_each(|v| data.extend_from_slice(&(*v as i64).to_le_bytes()));
        }
        other => return Err(Error::type_err(format!("--cast: no conversion to {other}"))),
    }
    Ok(HostTensor { name: t.name.clone(), dtype, shape: t.shape.clone(), data })
}

/// How an output compares with the expected array: the largest differences and how many values
/// are outside the tolerance (numpy's `allclose`: |got - want| <= atol + rtol * |want|; NaN equals
/// NaN).
pub fn compare(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> Result<serde_json::Value> {
    if got.shape != want.shape {
        return Ok(serde_json::json!({"name": got.name, "ok": false,
            "why": format!("shape {:?}, expected {:?}", got.shape, want.shape)}));
    }
    let (g, w) = (values(got)?, values(want)?);
    let (mut max_abs, mut at_abs, mut max_rel, mut outside) = (0.0f64, 0usize, 0.0f64, 0usize);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let d = (a - b).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        if d > max_abs {
            (max_abs, at_abs) = (d, i);
        }
        if b.abs() > 0.0 {
            max_rel = max_rel.max(d / b.abs());
        }
        if d > atol + rtol * b.abs() {
            outside += 1;
        }
    }
    Ok(serde_json::json!({"name": got.name, "ok": outside == 0, "max_abs_diff": max_abs, "at": at_abs,
        "max_rel_diff": max_rel, "outside": outside, "values": g.len()}))
}

/// The `n` largest values with their flat indices, largest first.
pub fn top(t: &HostTensor, n: usize) -> Result<Vec<(usize, f64)>> {
    let mut v: Vec<(usize, f64)> = values(t)?.into_iter().enumerate().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(n);
    Ok(v)
}
