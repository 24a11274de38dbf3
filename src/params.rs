//! The params blob (`save_param_dict`): a magic, names, then one NDArray record per name. Records
//! are read in place: their data is a slice of the input, so loading copies each weight once, into
//! its final home.

#![forbid(unsafe_code)]

use crate::dlpack::{kDLCPU, DLDataType};
use crate::dtype::tensor_bytes;
use crate::error::Result;
use crate::stream::{Reader, Writer};
use crate::tensor::NDArray;

pub const NDARRAY_LIST_MAGIC: u64 = 0xF7E5_8D4F_0504_9CB7;
pub const NDARRAY_MAGIC: u64 = 0xDD5E_40F0_96B4_A13F;
/// More dimensions than any model has: a corrupt ndim is refused before it sizes anything.
const MAX_NDIM: i32 = 32;

/// One tensor record: dtype, shape and the bytes, borrowed from the input.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub data: &'a [u8],
}

impl Record<'_> {
    pub fn to_ndarray(&self) -> Result<crate::object::ObjRef<NDArray>> {
        NDArray::from_bytes(&self.shape, self.dtype, self.data)
    }
}

/// Reads one NDArray record (also the format inside module blobs).
pub fn read_record<'a>(r: &mut Reader<'a>) -> Result<Record<'a>> {
    let magic = r.u64()?;
    if magic != NDARRAY_MAGIC {
        return Err(r.error(format!("bad NDArray magic {magic:#x}, expected {NDARRAY_MAGIC:#x}")));
    }
    let _reserved = r.u64()?;
    let device_type = r.i32()?;
    let _device_id = r.i32()?;
    if device_type != kDLCPU {
        return Err(r.error(format!("tensor saved for device type {device_type}; only CPU (1) records load")));
    }
    let ndim = r.i32()?;
    if !(0..=MAX_NDIM).contains(&ndim) {
        return Err(r.error(format!("invalid ndim {ndim}")));
    }
    let dtype = DLDataType::new(r.u8()?, r.u8()?, r.u16()?);
    if dtype.lanes == 0 || dtype.bits == 0 || dtype.code > 7 {
        return Err(r.error(format!("invalid dtype (code {}, bits {}, lanes {})", dtype.code, dtype.bits, dtype.lanes)));
    }
    let shape = (0..ndim).map(|_| r.i64()).collect::<Result<Vec<_>>>()?;
    // The whole tensor, lanes included: what upstream writes (its reader, which leaves lanes out,
    // cannot read vector types back at all), and what an array of this type holds.
    let expected = tensor_bytes(&shape, dtype).map_err(|e| r.error(e))?;
    let data_bytes = r.i64()?;
    if usize::try_from(data_bytes).ok() != Some(expected) {
        return Err(r.error(format!("data size {data_bytes} does not match {dtype} {shape:?} ({expected} bytes)")));
    }
    let data = r.bytes(expected)?;
    Ok(Record { dtype, shape, data })
}

pub fn write_record(w: &mut Writer, a: &NDArray) {
    write_raw_record(w, a.dtype(), a.shape(), &a.to_vec());
}

fn read_header<'a>(r: &mut Reader<'a>) -> Result<Vec<&'a str>> {
    let magic = r.u64()?;
    if magic != NDARRAY_LIST_MAGIC {
        return Err(r.error(format!("not a params blob: magic {magic:#x}, expected {NDARRAY_LIST_MAGIC:#x}")));
    }
    let _reserved = r.u64()?;
    r.strings()
}

/// The smallest a name and its record can be: the name's length, and a record's magic, reserved
/// word, device, ndim, dtype and byte count.
const MIN_BYTES_PER_PARAM: u64 = 8 + 40;

/// Checks a params file's first 24 bytes against its length before anything more is read: a
/// count of names the file cannot hold (a hostile or damaged header) is refused at once, in
/// constant memory, however large the file.
pub fn check_header(head: &[u8], file_len: u64) -> Result<()> {
    let mut r = Reader::new(head, "params");
    let magic = r.u64()?;
    if magic != NDARRAY_LIST_MAGIC {
        return Err(r.error(format!("not a params blob: magic {magic:#x}, expected {NDARRAY_LIST_MAGIC:#x}")));
    }
    let _reserved = r.u64()?;
    let count = r.u64()?;
    if count.saturating_mul(MIN_BYTES_PER_PARAM).saturating_add(32) > file_len {
        return Err(r.error(format!("{count} parameters declared: more than a file of {file_len} bytes holds")));
    }
    Ok(())
}

/// Parses a whole params blob into `(name, record)` pairs, in file order.
pub fn parse(bytes: &[u8]) -> Result<Vec<(&str, Record<'_>)>> {
    let mut r = Reader::new(bytes, "params");
    let names = read_header(&mut r)?;
    let count = r.count(40)?;
    if count != names.len() {
        return Err(r.error(format!("{} names but {count} arrays", names.len())));
    }
    let mut out = Vec::with_capacity(count);
    for name in names {
        let rec = read_record(&mut r).map_err(|e| e.context(format!("parameter '{name}'")))?;
        out.push((name, rec));
    }
    if !r.is_at_end() {
        return Err(r.error(format!("{} trailing bytes", r.remaining())));
    }
    Ok(out)
}

/// Only the names of a params blob (what `share_params` needs).
pub fn parse_names(bytes: &[u8]) -> Result<Vec<&str>> {
    let mut r = Reader::new(bytes, "params");
    let names = read_header(&mut r)?;
    let count = r.u64()?;
    if count != names.len() as u64 {
        return Err(r.error(format!("{} names but {count} arrays", names.len())));
    }
    Ok(names)
}

/// Serialises `(name, array)` pairs in the given order.
pub fn save<'a>(items: impl IntoIterator<Item = (&'a str, &'a NDArray)>) -> Vec<u8> {
    let items: Vec<_> = items.into_iter().collect();
    let mut w = Writer::default();
    w.u64(NDARRAY_LIST_MAGIC);
    w.u64(0);
    w.u64(items.len() as u64);
    for (name, _) in &items {
        w.string(name);
    }
    w.u64(items.len() as u64);
    for (_, a) in &items {
        write_record(&mut w, a);
    }
    w.buf
}

/// Names of the padding records `align` inserts; readers skip names the graph does not have.
pub const PAD_PREFIX: &str = "__tvmrt_align_pad_";
/// What `align` aligns tensor data to: what kernels assume of their buffers.
pub const DATA_ALIGNMENT: usize = 64;

/// Rewrites a params blob so every tensor's data starts at a multiple of 64 bytes in the file,
/// by putting a small `uint8` padding record before each tensor. The result is still a valid
/// params blob (upstream's runtime skips the padding names), and can be mapped and used in place.
pub fn align(bytes: &[u8]) -> Result<Vec<u8>> {
    let records: Vec<(&str, Record<'_>)> =
        parse(bytes)?.into_iter().filter(|(n, _)| !n.starts_with(PAD_PREFIX)).collect();
    let pad_name = |k: usize| format!("{PAD_PREFIX}{k}");
    let mut w = Writer::default();
    w.u64(NDARRAY_LIST_MAGIC);
    w.u64(0);
    w.u64(2 * records.len() as u64);
    for (k, (name, _)) in records.iter().enumerate() {
        w.string(&pad_name(k));
        w.string(name);
    }
    w.u64(2 * records.len() as u64);
    for rec in records.iter().map(|(_, r)| r) {
        // pad record: 48 bytes of header with ndim 1, then `n` bytes; then the tensor's header.
        let header = 32 + 8 * rec.shape.len() + 8;
        let n = (DATA_ALIGNMENT - (w.buf.len() + 48 + header) % DATA_ALIGNMENT) % DATA_ALIGNMENT;
        write_raw_record(&mut w, DLDataType::new(crate::dlpack::kDLUInt, 8, 1), &[n as i64], &vec![0u8; n]);
        write_raw_record(&mut w, rec.dtype, &rec.shape, rec.data);
        debug_assert_eq!((w.buf.len() - rec.data.len()) % DATA_ALIGNMENT, 0);
    }
    Ok(w.buf)
}

fn write_raw_record(w: &mut Writer, dtype: DLDataType, shape: &[i64], data: &[u8]) {
    w.u64(NDARRAY_MAGIC);
    w.u64(0);
    w.i32(kDLCPU);
    w.i32(0);
    w.i32(shape.len() as i32);
    w.u8(dtype.code);
    w.u8(dtype.bits);
    w.u16(dtype.lanes);
    for &d in shape {
        w.i64(d);
    }
    w.i64(data.len() as i64);
    w.bytes(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let a = NDArray::from_bytes(&[2, 2], DLDataType::F32, &[1u8; 16]).unwrap();
        let b = NDArray::from_bytes(&[], "int64".parse().unwrap(), &7i64.to_le_bytes()).unwrap();
        save([("w", &*a), ("s", &*b)])
    }

    #[test]
    fn round_trip() {
        let blob = sample();
        let p = parse(&blob).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, "w");
        assert_eq!(p[0].1.shape, vec![2, 2]);
        assert_eq!(p[1].1.data, &7i64.to_le_bytes());
        assert_eq!(parse_names(&blob).unwrap(), vec!["w", "s"]);
    }

    #[test]
    fn every_truncation_fails_cleanly() {
        let blob = sample();
        for n in 0..blob.len() {
            let e = parse(&blob[..n]).unwrap_err().to_string();
            assert!(e.contains("params"), "{e}");
        }
    }

    #[test]
    fn align_puts_every_tensor_on_64_bytes_and_keeps_the_contents() {
        let blob = sample();
        let aligned = align(&blob).unwrap();
        let before = parse(&blob).unwrap();
        let after: Vec<_> = parse(&aligned).unwrap().into_iter().filter(|(n, _)| !n.starts_with(PAD_PREFIX)).collect();
        assert_eq!(before.len(), after.len());
        for ((n0, r0), (n1, r1)) in before.iter().zip(&after) {
            assert_eq!((n0, &r0.shape, r0.data), (n1, &r1.shape, r1.data));
            let offset = r1.data.as_ptr() as usize - aligned.as_ptr() as usize;
            assert_eq!(offset % DATA_ALIGNMENT, 0, "{n1} at {offset}");
        }
        assert_eq!(align(&aligned).unwrap(), aligned, "aligning twice changes nothing");
    }

    /// A blob of one record named "t", written with any dtype.
    fn one_record(dtype: DLDataType, data: &[u8]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(NDARRAY_LIST_MAGIC);
        w.u64(0);
        w.u64(1);
        w.string("t");
        w.u64(1);
        write_raw_record(&mut w, dtype, &[2], data);
        w.buf
    }

    #[test]
    fn dtypes_outside_dlpack_are_refused() {
        for (code, bits, lanes) in [(2, 0, 1), (2, 32, 0), (8, 32, 1)] {
            let e = parse(&one_record(DLDataType::new(code, bits, lanes), &[0u8; 8])).unwrap_err().to_string();
            assert!(e.contains("invalid dtype"), "({code}, {bits}, {lanes}): {e}");
        }
        // Every code up to 7 is read (the writer's, not the runtime's, business to use them).
        let blob = one_record(DLDataType::new(7, 32, 1), &[1u8; 8]);
        let p = parse(&blob).unwrap().remove(0);
        assert_eq!((p.0, p.1.dtype.code, p.1.data.len()), ("t", 7, 8));
    }

    #[test]
    fn align_pads_with_less_than_the_alignment() {
        let aligned = align(&sample()).unwrap();
        let pads: Vec<usize> = parse(&aligned)
            .unwrap()
            .into_iter()
            .filter(|(n, _)| n.starts_with(PAD_PREFIX))
            .map(|(_, r)| r.data.len())
            .collect();
        assert_eq!(pads.len(), 2);
        assert!(pads.iter().all(|&n| n < DATA_ALIGNMENT), "{pads:?}");
    }

    #[test]
    fn absurd_counts_are_refused() {
        let mut blob = sample();
        check_header(&blob[..24], blob.len() as u64).unwrap();
        blob[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&blob).unwrap_err().to_string().contains("exceeds"));
        // From the header alone: a count the file's length cannot hold.
        for count in [u64::MAX, 1 << 40, 3] {
            blob[16..24].copy_from_slice(&count.to_le_bytes());
            let e = check_header(&blob[..24], blob.len() as u64).unwrap_err().to_string();
            assert!(e.contains("more than a file"), "{e}");
        }
        assert!(check_header(&blob[..20], 1 << 30).is_err(), "a header cut short");
        assert!(check_header(&[0; 24], 1 << 30).unwrap_err().to_string().contains("magic"));
    }
}
