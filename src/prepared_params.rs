//! Prepared params files: a params blob (upstream loads it as one: the extra records name no input)
//! that also holds what a model's weight-only operators derive from its weights, for one or more
//! builds of the model (batch sizes, sequence lengths: the same weights, each build's own derived
//! layouts), and a stamp saying what they were derived from: each build's graph and library file,
//! and the weights themselves.
//!
//! A build's derived records are only worth using while all three still hold. TVM's own
//! `load_param_dict` -> edit -> `save_param_dict` round trip keeps every record, the derived ones
//! too: a digest of the weights in the stamp tells an edited file from the one prepared, and a
//! digest of the derived records themselves tells an edited derived record (even one of the same
//! size) from the one computed.
//!
//! Preparing a file that is already prepared (for another build of the same weights) keeps the
//! builds it holds and adds (or replaces) this one: one file, one set of weights, every build's
//! derived weights, for every process on a machine to map. Derived records are stored once per
//! content (builds at other batch sizes usually derive the very same layouts from the weights) and
//! named by it; each build's entry in the stamp says which record holds each of its roots.

#![forbid(unsafe_code)]

use crate::error::Result;
use crate::params::{self, Record, PAD_PREFIX};

/// The record holding the stamp.
pub const STAMP: &str = "__tvmrt.prepared";
/// Records holding derived weights: `<prefix><digest of the content>` (and `.<n>` after it for
/// the n-th other content with that digest).
pub const DERIVED_PREFIX: &str = "__tvmrt.derived.";
/// The stamp's format: 2 added the weights' digest (1 could not tell an edited file), 3 the
/// derived records' (2 could not tell an edited derived record) and several builds.
const VERSION: u32 = 3;

/// Whether a record is one a prepared file adds (not a weight).
pub fn is_prepared_record(name: &str) -> bool {
    name == STAMP || name.starts_with(DERIVED_PREFIX)
}

/// Whether a record holds a weight: neither a prepared record nor alignment padding.
pub fn is_weight_record(name: &str) -> bool {
    !is_prepared_record(name) && !name.starts_with(PAD_PREFIX)
}

/// One build a prepared file holds derived weights of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    /// A digest of the graph JSON.
    pub graph: u64,
    /// A digest of the operator library's file.
    pub library: u64,
    /// The alias roots whose values the build's derived weights are, and the record (its name's
    /// part after [`DERIVED_PREFIX`]) holding each.
    pub roots: Vec<(usize, String)>,
}

impl Build {
    /// The full record names of the build's derived weights, by root.
    pub fn records(&self) -> impl Iterator<Item = (usize, String)> + '_ {
        self.roots.iter().map(|(r, id)| (*r, format!("{DERIVED_PREFIX}{id}")))
    }
}

/// What a prepared file's derived weights were made from, and which they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// [`weights_digest`] of the records they were derived from.
    pub weights: u64,
    /// [`derived_digest`] of the derived records.
    pub derived: u64,
    /// The builds, in the order of their record names' numbers.
    pub builds: Vec<Build>,
}

impl Stamp {
    pub fn to_text(&self) -> String {
        let builds: Vec<String> = self
            .builds
            .iter()
            .map(|b| {
                let roots: Vec<String> = b.roots.iter().map(|(r, id)| format!("{r}:{id}")).collect();
                format!("{:016x}/{:016x}/{}", b.graph, b.library, roots.join(","))
            })
            .collect();
        format!(
            "tvmrt-prepared {VERSION} weights {:016x} records {:016x} builds {}",
            self.weights,
            self.derived,
            builds.join(";")
        )
    }

    /// Reads a stamp; the error says why it is not one this version uses.
    pub fn parse(text: &str) -> std::result::Result<Stamp, String> {
        let words: Vec<&str> = text.split(' ').collect();
        let malformed = || format!("a malformed stamp '{text}'");
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| malformed());
        match words.as_slice() {
            ["tvmrt-prepared", v, ..] if *v != VERSION.to_string() => {
                Err(format!("a stamp of format {v}, not {VERSION} (prepare the file again)"))
            }
            ["tvmrt-prepared", _, "weights", w, "records", d, "builds", builds] => {
                let builds = builds
                    .split(';')
                    .map(|b| match b.split('/').collect::<Vec<_>>().as_slice() {
                        [g, l, roots] => Ok(Build {
                            graph: hex(g)?,
                            library: hex(l)?,
                            roots: roots
                                .split(',')
                                .filter(|r| !r.is_empty())
                                .map(|r| match r.split_once(':') {
                                    Some((root, id)) if !id.is_empty() && !id.contains(['/', ';', ' ']) => {
                                        Ok((root.parse().map_err(|_| malformed())?, id.to_string()))
                                    }
                                    _ => Err(malformed()),
                                })
                                .collect::<std::result::Result<_, _>>()?,
                        }),
                        _ => Err(malformed()),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(Stamp { weights: hex(w)?, derived: hex(d)?, builds })
            }
            _ => Err(malformed()),
        }
    }

    /// The build made for `graph` and `library`, with its number.
    pub fn build_for(&self, graph: u64, library: u64) -> Option<(usize, &Build)> {
        self.builds.iter().enumerate().find(|(_, b)| b.graph == graph && b.library == library)
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

/// Whether a prepared file's weights are the ones written when it was prepared (its stamp's
/// digest of them, formats 2 and later): a file damaged or edited since is not to answer from, by
/// any loader. Plain params, and stamps that name no digest, pass.
pub fn weights_as_written(records: &[(&str, Record<'_>)]) -> std::result::Result<(), String> {
    let Some((_, record)) = records.iter().find(|(n, _)| *n == STAMP) else { return Ok(()) };
    let Ok(text) = std::str::from_utf8(record.data) else { return Ok(()) };
    let words: Vec<&str> = text.split(' ').collect();
    let written = match words.as_slice() {
        ["tvmrt-prepared", _, "weights", w, ..] => u64::from_str_radix(w, 16).ok(),
        _ => None,
    };
    match written {
        Some(w) if w != weights_digest(records) => {
            Err("its weights are not the ones written when it was prepared (the file was damaged or edited since): \
             prepare it again from the original params, or, to run edited weights, save them as plain params \
             (tvmrt.save_params(tvmrt.load_params(path)), or align-params, drop the prepared records)"
                .into())
        }
        _ => Ok(()),
    }
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
    for b in &stamp.builds {
        for (_, name) in b.records() {
            if !records.iter().any(|(n, _)| *n == name) {
                return Err(format!("the stamp names derived weights '{name}' the file does not hold"));
            }
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

/// A build's derived weights: (alias root, bytes).
type DerivedBytes<'a> = Vec<(usize, &'a [u8])>;

/// A prepared file: the weight records of `blob`, the derived weights (root, bytes) of the build
/// made from `graph` and `library`, and the stamp, every tensor 64-byte aligned. When `blob` is a
/// prepared file itself (of these weights, verified), the builds it holds are kept, but for one of
/// the same graph and library, which this one replaces. Each distinct derived content is stored
/// once, whichever builds use it.
pub fn write(blob: &[u8], derived: &[(usize, Vec<u8>)], graph: u64, library: u64) -> Result<Vec<u8>> {
    let records = params::parse(blob)?;
    let u8s = crate::dlpack::DLDataType { code: crate::dlpack::kDLUInt, bits: 8, lanes: 1 };
    // Each build's (root, bytes): the builds kept, then this one.
    let mut builds: Vec<((u64, u64), DerivedBytes<'_>)> = Vec::new();
    if let Ok(Some(stamp)) = verified_stamp(&records) {
        for b in &stamp.builds {
            if (b.graph, b.library) == (graph, library) {
                continue;
            }
            let data = b
                .records()
                .map(|(r, name)| {
                    let (_, rec) = records.iter().find(|(n, _)| *n == name).expect("verified above");
                    (r, rec.data)
                })
                .collect();
            builds.push(((b.graph, b.library), data));
        }
    }
    builds.push(((graph, library), derived.iter().map(|(r, d)| (*r, d.as_slice())).collect()));
    // Content-addressed: a digest names a content; another content of the same digest (never
    // seen, but possible) gets a suffix.
    let mut stored: Vec<(String, &[u8])> = Vec::new();
    let mut stamp_builds = Vec::new();
    for ((g, l), data) in &builds {
        let mut roots = Vec::new();
        for &(r, bytes) in data {
            let digest = crate::digest::xxh64(bytes);
            let mut id = format!("{digest:016x}");
            let mut n = 0;
            loop {
                match stored.iter().find(|(s, _)| *s == id) {
                    Some((_, same)) if *same == bytes => break,
                    Some(_) => {
                        n += 1;
                        id = format!("{digest:016x}.{n}");
                    }
                    None => {
                        stored.push((id.clone(), bytes));
                        break;
                    }
                }
            }
            roots.push((r, id));
        }
        stamp_builds.push(Build { graph: *g, library: *l, roots });
    }
    let mut arrays = Vec::new();
    for (name, rec) in records.iter().filter(|(n, _)| is_weight_record(n)) {
        arrays.push((name.to_string(), rec.to_ndarray()?));
    }
    let names: Vec<String> = stored.iter().map(|(id, _)| format!("{DERIVED_PREFIX}{id}")).collect();
    for (name, (_, bytes)) in names.iter().zip(&stored) {
        arrays.push((name.clone(), crate::tensor::NDArray::from_bytes(&[bytes.len() as i64], u8s, bytes)?));
    }
    let digest_input: Vec<(&str, Record<'_>)> = names
        .iter()
        .zip(&stored)
        .map(|(n, (_, b))| (n.as_str(), Record { dtype: u8s, shape: vec![b.len() as i64], data: b }))
        .collect();
    let stamp =
        Stamp { weights: weights_digest(&records), derived: derived_digest(&digest_input), builds: stamp_builds };
    let text = stamp.to_text();
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
        let b = |graph, roots: &[usize]| Build {
            graph,
            library: 0xab,
            roots: roots.iter().map(|&r| (r, format!("{r:016x}"))).collect(),
        };
        let s = Stamp { weights: u64::MAX, derived: 5, builds: vec![b(1, &[3, 17]), b(2, &[]), b(3, &[4])] };
        assert_eq!(Stamp::parse(&s.to_text()), Ok(s.clone()));
        assert_eq!(s.build_for(3, 0xab).map(|(k, _)| k), Some(2));
        assert_eq!(s.build_for(3, 0xac), None, "another library");
        let old = "tvmrt-prepared 1 graph 0000000000000001 library 00000000000000ab derived 3";
        assert!(Stamp::parse(old).unwrap_err().contains("format 1"));
        let v2 = "tvmrt-prepared 2 graph 1 library 2 weights 3 derived 3";
        assert!(Stamp::parse(v2).unwrap_err().contains("format 2, not 3"));
        assert!(Stamp::parse("tvmrt-prepared 3 weights 0 records 0 builds zz/0/").is_err());
        assert!(Stamp::parse("tvmrt-prepared 3 weights 0 records 0 builds 1/2").is_err());
        assert!(
            Stamp::parse("tvmrt-prepared 3 weights 0 records 0 builds 1/2/3").is_err(),
            "a root without its record"
        );
        assert!(Stamp::parse("tvmrt-prepared 3 weights 0 records 0 builds 1/2/3:").is_err());
        assert!(Stamp::parse("nonsense").is_err());
    }

    #[test]
    fn derived_records_are_trusted_only_beside_their_weights() {
        let file = write(&blob(1), &[(5, vec![9; 8])], 7, 8).unwrap();
        let stamp = verified_stamp(&params::parse(&file).unwrap()).unwrap().unwrap();
        let id = format!("{:016x}", crate::digest::xxh64(&[9; 8]));
        assert_eq!(stamp.builds, vec![Build { graph: 7, library: 8, roots: vec![(5, id)] }]);
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
    fn builds_are_added_to_a_prepared_file_and_replaced_by_their_own() {
        let one = write(&blob(1), &[(5, vec![9; 8])], 7, 8).unwrap();
        // A second build: one derived weight of its own, one the same as the first build's.
        let two = write(&one, &[(2, vec![4; 16]), (6, vec![9; 8])], 70, 80).unwrap();
        let records = params::parse(&two).unwrap();
        let stamp = verified_stamp(&records).unwrap().unwrap();
        assert_eq!(stamp.builds.len(), 2);
        let data = |b: &Build, root: usize| {
            let (_, name) = b.records().find(|(r, _)| *r == root).unwrap();
            records.iter().find(|(n, _)| *n == name).unwrap().1.data.to_vec()
        };
        let (_, first) = stamp.build_for(7, 8).unwrap();
        let (_, second) = stamp.build_for(70, 80).unwrap();
        assert_eq!((data(first, 5), data(second, 2), data(second, 6)), (vec![9; 8], vec![4; 16], vec![9; 8]));
        let derived = records.iter().filter(|(n, _)| n.starts_with(DERIVED_PREFIX)).count();
        assert_eq!(derived, 2, "the content both builds derive is stored once");
        assert_eq!(records.iter().filter(|(n, _)| is_weight_record(n)).count(), 2, "the weights once");
        // The first build again, with new derived bytes: replaced, the other kept.
        let again = write(&two, &[(5, vec![1; 8])], 7, 8).unwrap();
        let records = params::parse(&again).unwrap();
        let stamp = verified_stamp(&records).unwrap().unwrap();
        assert_eq!(stamp.builds.iter().map(|b| b.graph).collect::<Vec<_>>(), vec![70, 7]);
        let (_, first) = stamp.build_for(7, 8).unwrap();
        let (_, name) = first.records().next().unwrap();
        assert_eq!(records.iter().find(|(n, _)| *n == name).unwrap().1.data, &[1; 8]);
        // Prepared over a file whose weights were edited: its builds are not carried over.
        let recs = params::parse(&two).unwrap();
        let edited = NDArray::from_bytes(&[2, 2], DLDataType::F32, &[2; 16]).unwrap();
        let mut items: Vec<(String, crate::object::ObjRef<NDArray>)> = recs
            .iter()
            .filter(|(n, _)| *n != "w" && !n.starts_with(PAD_PREFIX))
            .map(|(n, r)| (n.to_string(), r.to_ndarray().unwrap()))
            .collect();
        items.push(("w".into(), edited));
        let edited = params::save(items.iter().map(|(n, a)| (n.as_str(), &**a)));
        let over = write(&edited, &[(5, vec![3; 8])], 7, 8).unwrap();
        let stamp = verified_stamp(&params::parse(&over).unwrap()).unwrap().unwrap();
        assert_eq!(stamp.builds.len(), 1, "an edited file's builds are dropped, not carried over");
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
