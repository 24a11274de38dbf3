//! Prepared params files: a params blob (upstream loads it as one: the extra records name no input)
//! that also holds what a model's weight-only operators derive from its weights, and a stamp saying
//! what they were derived from: the graph, the library's file, and the weights themselves.
//!
//! The derived records are only worth using while all three still hold. TVM's own
//! `load_param_dict` -> edit -> `save_param_dict` round trip keeps every record, the derived ones
//! too: a digest of the weights in the stamp tells an edited file from the one prepared, and a
//! digest of the derived records themselves tells an edited derived record (even one of the same
//! size) from the one computed.

#![forbid(unsafe_code)]

use crate::error::Result;
use crate::params::{self, Record, PAD_PREFIX};

/// The record holding the stamp.
pub const STAMP: &str = "__tvmrt.prepared";
/// Records holding derived weights, by the alias root entry they are the value of.
pub const DERIVED_PREFIX: &str = "__tvmrt.derived.";
/// The stamp's format: 2 added the weights' digest (1 could not tell an edited file), 3 the
/// derived records' (2 could not tell an edited derived record).
const VERSION: u32 = 3;

/// Whether a record is one a prepared file adds (not a weight).
pub fn is_prepared_record(name: &str) -> bool {
    name == STAMP || name.starts_with(DERIVED_PREFIX)
}

/// Whether a record holds a weight: neither a prepared record nor alignment padding.
pub fn is_weight_record(name: &str) -> bool {
    !is_prepared_record(name) && !name.starts_with(PAD_PREFIX)
}

/// What a prepared file's derived weights were made from, and which they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// A digest of the graph JSON.
    pub graph: u64,
    /// A digest of the operator library's file.
    pub library: u64,
    /// [`weights_digest`] of the records they were derived from.
    pub weights: u64,
    /// [`derived_digest`] of the derived records.
    pub derived: u64,
    /// The alias roots whose values the `DERIVED_PREFIX` records hold.
    pub roots: Vec<usize>,
}

impl Stamp {
    pub fn to_text(&self) -> String {
        let roots: Vec<String> = self.roots.iter().map(usize::to_string).collect();
        format!(
            "tvmrt-prepared {VERSION} graph {:016x} library {:016x} weights {:016x} records {:016x} derived {}",
            self.graph,
            self.library,
            self.weights,
            self.derived,
            roots.join(",")
        )
    }

    /// Reads a stamp; the error says why it is not one this version uses.
    pub fn parse(text: &str) -> std::result::Result<Stamp, String> {
        let words: Vec<&str> = text.split(' ').collect();
        let malformed = || format!("a malformed stamp '{text}'");
        match words.as_slice() {
            ["tvmrt-prepared", v, ..] if *v != VERSION.to_string() => {
                Err(format!("a stamp of format {v}, not {VERSION} (prepare the file again)"))
            }
            ["tvmrt-prepared", _, "graph", g, "library", l, "weights", w, "records", d, "derived", roots] => {
                let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| malformed());
                let roots = roots
                    .split(',')
                    .filter(|r| !r.is_empty())
                    .map(|r| r.parse().map_err(|_| malformed()))
                    .collect::<std::result::Result<_, _>>()?;
                Ok(Stamp { graph: hex(g)?, library: hex(l)?, weights: hex(w)?, derived: hex(d)?, roots })
            }
            _ => Err(malformed()),
        }
    }
}

/// A digest of a file's weights: every weight record, by name, with its dtype, shape and bytes
/// (independent of the records' order and of padding, so aligning a file keeps it).
pub fn weights_digest(records: &[(&str, Record<'_>)]) -> u64 {
    let mut weights: Vec<&(&str, Record<'_>)> = records.iter().filter(|(n, _)| is_weight_record(n)).collect();
    weights.sort_by_key(|(n, _)| *n);
    let heads: Vec<Vec<u8>> = weights
        .iter()
        .map(|(_, r)| {
            let mut head = vec![r.dtype.code, r.dtype.bits];
            head.extend_from_slice(&r.dtype.lanes.to_le_bytes());
            r.shape.iter().for_each(|d| head.extend_from_slice(&d.to_le_bytes()));
            head
        })
        .collect();
    let parts = weights.iter().zip(&heads).flat_map(|((n, r), head)| [(*n, &head[..]), (*n, r.data)]);
    crate::digest::of_parts(parts)
}

/// A digest of a file's derived records (by name, with their bytes): independent of order and
/// padding, as the weights' is.
pub fn derived_digest(records: &[(&str, Record<'_>)]) -> u64 {
    let mut derived: Vec<&(&str, Record<'_>)> = records.iter().filter(|(n, _)| n.starts_with(DERIVED_PREFIX)).collect();
    derived.sort_by_key(|(n, _)| *n);
    crate::digest::of_parts(derived.iter().map(|(n, r)| (*n, r.data)))
}

/// The stamp of `records`, when they are a prepared file whose derived records were made from the
/// weights it holds: `Ok(None)` for plain params, `Err(why)` when its derived records cannot be
/// trusted (they are then plain params with records to skip).
pub fn verified_stamp(records: &[(&str, Record<'_>)]) -> std::result::Result<Option<Stamp>, String> {
    let Some((_, record)) = records.iter().find(|(n, _)| *n == STAMP) else { return Ok(None) };
    let text = std::str::from_utf8(record.data).map_err(|_| "a stamp that is not text".to_string())?;
    let stamp = Stamp::parse(text)?;
    if weights_digest(records) != stamp.weights {
        return Err("its weights are not the ones its derived weights were made from (edited since it was \
                    prepared?)"
            .into());
    }
    for r in &stamp.roots {
        let name = format!("{DERIVED_PREFIX}{r}");
        if !records.iter().any(|(n, _)| *n == name) {
            return Err(format!("the stamp names derived weights '{name}' the file does not hold"));
        }
    }
    if derived_digest(records) != stamp.derived {
        return Err("its derived weights are not the ones computed when it was prepared (edited since?)".into());
    }
    Ok(Some(stamp))
}

/// `params::align` for prepared files too: the derived records are kept only when they can be
/// verified against the weights beside them; returns the aligned file and whether derived records
/// were dropped (and why).
pub fn align(bytes: &[u8]) -> Result<(Vec<u8>, Option<String>)> {
    let records = params::parse(bytes)?;
    match verified_stamp(&records) {
        Ok(_) => Ok((params::align(bytes)?, None)),
        Err(why) => {
            let kept = records
                .iter()
                .filter(|(n, _)| !is_prepared_record(n) && !n.starts_with(PAD_PREFIX))
                .map(|(n, r)| Ok((n.to_string(), r.to_ndarray()?)))
                .collect::<Result<Vec<_>>>()?;
            let plain = params::save(kept.iter().map(|(n, a)| (n.as_str(), &**a)));
            Ok((params::align(&plain)?, Some(why)))
        }
    }
}

/// A prepared file: the weight records of `blob`, the derived weights (root, bytes) and the stamp,
/// every tensor 64-byte aligned.
pub fn write(blob: &[u8], derived: &[(usize, Vec<u8>)], graph: u64, library: u64) -> Result<Vec<u8>> {
    let records = params::parse(blob)?;
    let u8s = crate::dlpack::DLDataType { code: crate::dlpack::kDLUInt, bits: 8, lanes: 1 };
    let names: Vec<String> = derived.iter().map(|(r, _)| format!("{DERIVED_PREFIX}{r}")).collect();
    let derived_records: Vec<(&str, Record<'_>)> = names
        .iter()
        .zip(derived)
        .map(|(n, (_, bytes))| (n.as_str(), Record { dtype: u8s, shape: vec![bytes.len() as i64], data: bytes }))
        .collect();
    let stamp = Stamp {
        graph,
        library,
        weights: weights_digest(&records),
        derived: derived_digest(&derived_records),
        roots: derived.iter().map(|(r, _)| *r).collect(),
    };
    let text = stamp.to_text();
    let mut arrays = Vec::new();
    for (name, rec) in records.iter().filter(|(n, _)| is_weight_record(n)) {
        arrays.push((name.to_string(), rec.to_ndarray()?));
    }
    for (r, bytes) in derived {
        let array = crate::tensor::NDArray::from_bytes(&[bytes.len() as i64], u8s, bytes)?;
        arrays.push((format!("{DERIVED_PREFIX}{r}"), array));
    }
    arrays.push((STAMP.to_string(), crate::tensor::NDArray::from_bytes(&[text.len() as i64], u8s, text.as_bytes())?));
    params::align(&params::save(arrays.iter().map(|(n, a)| (n.as_str(), &**a))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::DLDataType;
    use crate::tensor::NDArray;

    fn blob(w: u8) -> Vec<u8> {
        let a = NDArray::from_bytes(&[2, 2], DLDataType::F32, &[w; 16]).unwrap();
        let b = NDArray::from_bytes(&[4], DLDataType::F32, &[2; 16]).unwrap();
        params::save([("w", &*a), ("b", &*b)])
    }

    #[test]
    fn a_stamp_reads_back_and_refuses_other_formats() {
        let s = Stamp { graph: 1, library: 0xab, weights: u64::MAX, derived: 5, roots: vec![3, 17] };
        assert_eq!(Stamp::parse(&s.to_text()), Ok(s));
        let old = "tvmrt-prepared 1 graph 0000000000000001 library 00000000000000ab derived 3";
        assert!(Stamp::parse(old).unwrap_err().contains("format 1"));
        let v2 = "tvmrt-prepared 2 graph 1 library 2 weights 3 derived 3";
        assert!(Stamp::parse(v2).unwrap_err().contains("format 2, not 3"));
        assert!(Stamp::parse("tvmrt-prepared 3 graph zz library 0 weights 0 records 0 derived ").is_err());
        assert!(Stamp::parse("nonsense").is_err());
    }

    #[test]
    fn derived_records_are_trusted_only_beside_their_weights() {
        let file = write(&blob(1), &[(5, vec![9; 8])], 7, 8).unwrap();
        let stamp = verified_stamp(&params::parse(&file).unwrap()).unwrap().unwrap();
        assert_eq!((stamp.graph, stamp.library, stamp.roots.clone()), (7, 8, vec![5]));
        // Aligning again keeps them (padding is not a weight).
        let (again, dropped) = align(&file).unwrap();
        assert!(dropped.is_none());
        assert_eq!(verified_stamp(&params::parse(&again).unwrap()).unwrap(), Some(stamp));
        // A weight edited (as TVM's load_param_dict / save_param_dict round trip would keep the
        // other records): not trusted, and `align` drops them.
        let records = params::parse(&file).unwrap();
        let edited = NDArray::from_bytes(&[2, 2], DLDataType::F32, &[3; 16]).unwrap();
        let rest: Vec<_> = records
            .iter()
            .filter(|(n, _)| *n != "w" && !n.starts_with(PAD_PREFIX))
            .map(|(n, r)| (n.to_string(), r.to_ndarray().unwrap()))
            .collect();
        let mut items: Vec<(&str, &NDArray)> = rest.iter().map(|(n, a)| (n.as_str(), &**a)).collect();
        items.push(("w", &edited));
        let saved = params::save(items);
        let why = verified_stamp(&params::parse(&saved).unwrap()).unwrap_err();
        assert!(why.contains("edited"), "{why}");
        let (aligned, dropped) = align(&saved).unwrap();
        assert!(dropped.is_some());
        assert!(params::parse(&aligned).unwrap().iter().all(|(n, _)| !is_prepared_record(n)));
        // A derived record edited in place (same name, same size): not trusted.
        let mut tampered = file.clone();
        let at = tampered.windows(8).position(|w| w == [9u8; 8]).unwrap();
        tampered[at + 3] = 10;
        let why = verified_stamp(&params::parse(&tampered).unwrap()).unwrap_err();
        assert!(why.contains("derived weights are not the ones computed"), "{why}");
        // Plain params are plain.
        assert_eq!(verified_stamp(&params::parse(&blob(1)).unwrap()), Ok(None));
    }

    #[test]
    fn the_weights_digest_sees_names_shapes_and_bytes_not_order() {
        let d = |items: Vec<(&str, Vec<i64>, u8)>| {
            let arrays: Vec<_> = items
                .iter()
                .map(|(n, s, v)| {
                    let n_bytes = 4 * s.iter().product::<i64>() as usize;
                    (*n, NDArray::from_bytes(s, DLDataType::F32, &vec![*v; n_bytes]).unwrap())
                })
                .collect();
            let blob = params::save(arrays.iter().map(|(n, a)| (*n, &**a)));
            weights_digest(&params::parse(&blob).unwrap())
        };
        let base = d(vec![("a", vec![4], 1), ("b", vec![2], 2)]);
        assert_eq!(base, d(vec![("b", vec![2], 2), ("a", vec![4], 1)]));
        assert_ne!(base, d(vec![("a", vec![2, 2], 1), ("b", vec![2], 2)]));
        assert_ne!(base, d(vec![("a", vec![4], 1), ("b", vec![2], 3)]));
        assert_ne!(base, d(vec![("a", vec![4], 1), ("c", vec![2], 2)]));
    }
}
