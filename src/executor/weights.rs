//! How weights come into an executor: a params blob, a mapped params file (prepared or not), a
//! factory's weights, another executor's (`share_params`). Each is one transaction: every weight
//! and the layout that folds from them, or nothing.

#![forbid(unsafe_code)]

use super::factory::Param;
use super::instance::Instance;
use super::GraphExecutor;
use crate::error::{Error, Result};
use crate::params;
use crate::prepared_params;
use crate::tensor::{FileMap, Weight};
use std::sync::Arc;

/// Derived weights by the alias root they are the value of.
type DerivedWeights = Vec<(usize, Arc<Weight>)>;

impl GraphExecutor {
    /// Loads a params blob straight into the executor's memory: one copy per weight. Names that
    /// are not inputs are skipped (a blob may hold more than one graph needs).
    pub fn load_params(&self, blob: &[u8]) -> Result<()> {
        self.load_records(params::parse(blob)?, None).map(|_| ())
    }

    /// Uses the weights of a params file mapped read-only (`FileMap::open`, whose contract the
    /// caller keeps) in place where their data is 64-byte aligned in the file: no copy, and one copy
    /// in the page cache for every process mapping the file. The others are copied. Writing a
    /// mapped weight gives this executor a private copy; the file never changes. Before each run
    /// the file is checked for changes (see `FileMap::check_unchanged`). Returns how many weights
    /// were mapped and how many copied.
    pub fn load_params_mapped(&self, map: &Arc<FileMap>) -> Result<(usize, usize)> {
        let records = params::parse(map.bytes()).map_err(|e| e.context(map.path().to_string()))?;
        self.load_records(records, Some(map))
    }

    /// Loads `records` in one transaction: every weight and the layout that folds from them, or
    /// (on any failure) nothing. From a mapped prepared file, its derived weights are used in place
    /// when they were made from these very weights for this graph and library; else the file
    /// loads as the plain params it also is, and the executor's report says why.
    fn load_records(
        &self,
        records: Vec<(&str, params::Record<'_>)>,
        map: Option<&Arc<FileMap>>,
    ) -> Result<(usize, usize)> {
        // Every record is checked before anything is loaded: a prepared file answers from the
        // weights written into it or not at all.
        prepared_params::weights_as_written(&records).map_err(|why| match map {
            Some(m) => Error::value(format!("the prepared params file {}: {why}", m.path())),
            None => Error::value(format!("a prepared params blob: {why}")),
        })?;
        let mut load = Vec::new();
        for (name, rec) in &records {
            let Some(index) = self.plan.input_index(name) else { continue };
            let eid = self.plan.input_entries[index];
            let e = &self.plan.graph.entries[eid];
            if rec.dtype != e.dtype || rec.data.len() != self.plan.entry_bytes[eid] {
                return Err(Error::value(format!(
                    "parameter '{name}' is {} {:?} in the blob but {} {:?} in the graph",
                    rec.dtype, rec.shape, e.dtype, e.shape
                )));
            }
            load.push((*name, rec, eid));
        }
        let prepared = match map {
            Some(map) => self.prepared_derived(map, &records),
            None => Ok(None),
        };
        self.lock().transaction(|st| {
            let counts = self.load_into(st, &load, map)?;
            st.prepared = match prepared {
                Ok(None) => None,
                Err(why) => Some(format!("not used: {why}")),
                Ok(Some(derived)) => Some(if st.adopt(derived)? {
                    "used".into()
                } else {
                    "not used: its derived weights do not cover what this executor folds".into()
                }),
            };
            st.prepare()?;
            Ok(counts)
        })
    }

    /// Binds or writes each checked record; returns how many were mapped and how many copied.
    fn load_into(
        &self,
        st: &mut Instance,
        load: &[(&str, &params::Record<'_>, usize)],
        map: Option<&Arc<FileMap>>,
    ) -> Result<(usize, usize)> {
        let (mut mapped, mut copied) = (0, 0);
        for &(name, rec, eid) in load {
            let e = &self.plan.graph.entries[eid];
            let slot_bytes = self.plan.storage.slots[e.storage_id].bytes;
            // Used in place when the file's bytes cover the slot (on a device: mirrored there once,
            // the mapping staying shared between processes); else a weight of its own,
            // read-only, so what is derived from it can be kept (writing it later makes a private
            // copy, as for a shared one). `set_param` decides whether the slot takes it.
            let weight = match map {
                Some(map)
                    if rec.data.as_ptr() as usize % params::DATA_ALIGNMENT == 0 && rec.data.len() >= slot_bytes =>
                {
                    Weight::mapped(map, rec.data)?
                }
                // On a device, straight into device memory: the host bytes are the caller's blob (an
                // image for a texture slot holding exactly the record: kernels read it as one).
                _ => match self.plan.new_slot_image(e.storage_id, rec.data.len())? {
                    Some(mut image) => {
                        image.write(0, rec.data)?;
                        Weight::freeze(image)
                    }
                    None => Weight::padded_on(self.plan.slot_device[e.storage_id], rec.data, slot_bytes)?,
                },
            };
            let in_place = weight.is_mapped();
            match st.set_param(name, eid, Arc::new(weight))? {
                true if in_place => mapped += 1,
                _ => copied += 1,
            }
        }
        Ok((mapped, copied))
    }

    /// The derived weights of a prepared params file mapped at `map`, when its stamp holds for this
    /// executor: made from the weights the file holds (not edited since), for this graph and this
    /// library as loaded. `Ok(None)` for plain params; `Err(why)` when the derived records are not
    /// to be used.
    fn prepared_derived(
        &self,
        map: &Arc<FileMap>,
        records: &[(&str, params::Record<'_>)],
    ) -> std::result::Result<Option<DerivedWeights>, String> {
        let Some(stamp) = prepared_params::verified_stamp(records)? else { return Ok(None) };
        let library = self.plan.library_digest().ok_or("the operator library is not a file")?;
        let Some((_, build)) = stamp.build_for(self.plan.graph_digest, library) else {
            let made: Vec<String> =
                stamp.builds.iter().map(|b| format!("graph {:016x} library {:016x}", b.graph, b.library)).collect();
            return Err(format!(
                "made for another build of the model ({}; this executor's are graph {:016x} library {library:016x})",
                made.join(", "),
                self.plan.graph_digest
            ));
        };
        build
            .records()
            .map(|(r, name)| {
                let (_, rec) = records.iter().find(|(n, _)| *n == name).ok_or(format!("no record '{name}'"))?;
                if rec.data.as_ptr() as usize % params::DATA_ALIGNMENT != 0 {
                    return Err(format!("'{name}' is not aligned in the file"));
                }
                Weight::mapped(map, rec.data).map(|w| (r, Arc::new(w))).map_err(|e| e.to_string())
            })
            .collect::<std::result::Result<Vec<_>, String>>()
            .map(Some)
    }

    /// A params file holding `blob`'s weights and what this executor's weight-only operators derive
    /// from them (in the kernels' layouts), stamped with the graph, library and weights they were
    /// made from, every tensor aligned (see [`prepared_params`]): `load_params_from_file` maps it
    /// and uses the derived weights in place (nothing is computed at load, every process shares
    /// the pages); upstream still loads it (the extra records name no input). Folds this executor.
    pub fn prepared_params(&self, blob: &[u8]) -> Result<Vec<u8>> {
        let library = self.plan.library_digest().ok_or_else(|| {
            Error::value("prepared params need an operator library loaded from a file (to tie them to it)")
        })?;
        self.set_fold_weights(true)?;
        self.load_params(blob)?;
        let derived = {
            let mut st = self.lock();
            st.prepare()?;
            st.derived_weights()
        };
        let derived = derived.into_iter().map(|(r, w)| Ok((r, w.bytes()?.into_owned()))).collect::<Result<Vec<_>>>()?;
        prepared_params::write(blob, &derived, self.plan.graph_digest, library)
    }

    /// Binds each input named in `params` to its weight without copying where its slot can share,
    /// else copies, then lays out (folding from them): all of them, or none on failure. Used by
    /// factories, which keep the weights for all their executors. Names that are not inputs are
    /// skipped.
    pub fn bind_params(&self, params: &[Param]) -> Result<()> {
        let mut bind = Vec::new();
        for param in params {
            let name = param.name.as_str();
            let Some(index) = self.plan.input_index(name) else { continue };
            let eid = self.plan.input_entries[index];
            let e = &self.plan.graph.entries[eid];
            if param.dtype != e.dtype || param.weight.len() != self.plan.entry_bytes[eid] {
                return Err(Error::value(format!(
                    "parameter '{name}': {} {:?} does not fit {} {:?}",
                    param.dtype, param.shape, e.dtype, e.shape
                )));
            }
            bind.push((name, eid, &param.weight));
        }
        self.lock().transaction(|st| {
            for (name, eid, weight) in bind {
                st.set_param(name, eid, weight.clone())?;
            }
            st.prepare()
        })
    }

    /// `share_params`: binds every input named in `blob` to `other`'s memory for it. Matched by
    /// name; shapes and dtypes must agree. Afterwards this executor owns no memory for them.
    pub fn share_params(&self, other: &GraphExecutor, blob: &[u8]) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let names = params::parse_names(blob)?;
        let (mut mine, mut theirs) = self.lock_pair(other);
        let (mine, theirs) = (&mut *mine, &mut *theirs);
        let mut bindings = Vec::new();
        for name in names {
            let Some(index) = self.plan.input_index(name) else {
                continue;
            };
            let at = || format!("parameter '{name}'");
            let other_index = other
                .plan
                .input_index(name)
                .ok_or_else(|| Error::key(format!("{}: not an input of the executor shared from", at())))?;
            let eid = self.plan.input_entries[index];
            let oeid = other.plan.input_entries[other_index];
            let (e, oe) = (&self.plan.graph.entries[eid], &other.plan.graph.entries[oeid]);
            if e.dtype != oe.dtype || e.shape != oe.shape {
                return Err(Error::value(format!(
                    "{}: {} {:?} here but {} {:?} in the other executor",
                    at(),
                    e.dtype,
                    e.shape,
                    oe.dtype,
                    oe.shape
                )));
            }
            bindings.push((name, eid, e.storage_id, oeid, oe.storage_id));
        }
        Instance::transaction_pair(mine, theirs, |mine, theirs| {
            for (name, eid, sid, oeid, osid) in bindings {
                // Their memory becomes a weight both hold when both slots can share it (set_param
                // then binds it); else the bytes are copied.
                let fits = other.plan.storage.slots[osid].bytes >= self.plan.storage.slots[sid].bytes;
                if self.plan.is_shareable_slot(sid) && other.plan.is_shareable_slot(osid) && fits {
                    let weight = theirs.share_out(osid).map_err(|e| e.context(format!("parameter '{name}'")))?;
                    mine.set_param(name, eid, weight)?;
                } else {
                    mine.copy_entry_from(eid, theirs, oeid).map_err(|e| e.context(format!("parameter '{name}'")))?;
                    mine.param_names.insert(name.to_string());
                }
            }
            // Derived weights the other runs on from a prepared params file: this executor would
            // not derive them itself (mapped weights are not folded unless asked), so an executor
            // of the same model (graph and library, as the file's stamp) takes them as they are
            // and runs folded too.
            if theirs.runs_on_prepared()
                && self.plan.graph_digest == other.plan.graph_digest
                && self.plan.library_digest() == other.plan.library_digest()
            {
                mine.adopt(theirs.derived_weights())?;
            }
            mine.prepare_for_holders()?;
            theirs.prepare_for_holders()
        })
    }
}
