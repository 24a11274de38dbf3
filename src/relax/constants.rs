//! Tensor constants held once per process: a second load of a library (another VM module of the
//! same file, a model reloaded, another file with the same weights) shares the first one's bytes
//! instead of holding them again. Constants are never written (kernels take them as inputs), so
//! every executable holding equal bytes may hold the same ones.
//!
//! Weights are found by length, then compared byte for byte with the blob's bytes (no copy is
//! made to compare); constants below [`SHARED_FROM`] bytes (shapes, scalars) are simply copied.

#![forbid(unsafe_code)]

use crate::error::Result;
use crate::object::ObjRef;
use crate::params::Record;
use crate::tensor::{Buffer, NDArray};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Constants this large and larger are shared.
/// cbindgen:ignore
pub const SHARED_FROM: usize = 1024;

static LIVE: Mutex<Option<HashMap<usize, Vec<Weak<Buffer>>>>> = Mutex::new(None);

/// The tensor a constant record holds: the bytes of an equal constant already loaded, or a copy.
pub fn tensor(record: &Record<'_>) -> Result<ObjRef<NDArray>> {
    let bytes = record.data;
    if bytes.len() < SHARED_FROM {
        return record.to_ndarray();
    }
    let buffer = {
        let mut guard = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let table = guard.get_or_insert_with(HashMap::new);
        // Lengths whose constants are all gone are dropped as the table grows.
        if table.len() > 64 && table.len().is_power_of_two() {
            table.retain(|_, list| list.iter().any(|w| w.strong_count() > 0));
        }
        let list = table.entry(bytes.len()).or_default();
        list.retain(|w| w.strong_count() > 0);
        match list.iter().filter_map(Weak::upgrade).find(|b| holds(b, bytes)) {
            Some(b) => b,
            None => {
                let b = Arc::new(Buffer::from_bytes(bytes)?);
                list.push(Arc::downgrade(&b));
                b
            }
        }
    };
    NDArray::view_of(&buffer, 0, &record.shape, record.dtype)
}

/// Whether a host buffer holds exactly `bytes` (read a chunk at a time).
fn holds(b: &Buffer, bytes: &[u8]) -> bool {
    const CHUNK: usize = 64 * 1024;
    let mut scratch = vec![0u8; CHUNK.min(bytes.len())];
    b.len() == bytes.len()
        && bytes.chunks(CHUNK).enumerate().all(|(i, want)| {
            let got = &mut scratch[..want.len()];
            b.read(i * CHUNK, got).is_ok() && got == want
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::DLDataType;

    fn record(data: &[u8]) -> Record<'_> {
        Record { shape: vec![data.len() as i64 / 4], dtype: DLDataType::F32, data }
    }

    #[test]
    fn equal_weights_share_bytes_and_others_do_not() {
        let a: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut b = a.clone();
        let (x, y) = (tensor(&record(&a)).unwrap(), tensor(&record(&a)).unwrap());
        assert_eq!(x.dl_tensor().data, y.dl_tensor().data, "one copy of equal bytes");
        *b.last_mut().unwrap() ^= 1;
        let z = tensor(&record(&b)).unwrap();
        assert_ne!(x.dl_tensor().data, z.dl_tensor().data, "a byte apart is another constant");
        assert_eq!(z.to_vec(), b);
        // From SHARED_FROM bytes on, shared; below, copies of their own.
        let edge = vec![3u8; SHARED_FROM];
        let (e, f) = (tensor(&record(&edge)).unwrap(), tensor(&record(&edge)).unwrap());
        assert_eq!(e.dl_tensor().data, f.dl_tensor().data);
        let small = [1u8; 64];
        let (s, t) = (tensor(&record(&small)).unwrap(), tensor(&record(&small)).unwrap());
        assert_ne!(s.dl_tensor().data, t.dl_tensor().data);
        // Once every holder is gone, so are the bytes: a new load makes them again.
        drop((x, y));
        assert_eq!(tensor(&record(&a)).unwrap().to_vec(), a);
    }
}
