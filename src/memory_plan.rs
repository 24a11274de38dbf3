//! Storage planning: one slot per storage id, sized for the largest entry planned into it (rounded
//! up to 4 bytes, as upstream's float32 pools), and what each slot holds. A slot that holds only a
//! graph input and `__nop` aliases of it can be bound to memory shared with other executors.

#![forbid(unsafe_code)]

use crate::device::texture::{Extent, Texture};
use crate::dlpack::DLDataType;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotRole {
    /// Holds graph input(s) only (and reshape aliases of them): weights live here.
    Input,
    /// Written by operators during `run`.
    Activation,
    /// Never referenced by any entry.
    Unused,
}

#[derive(Debug, Clone)]
pub struct Slot {
    pub bytes: usize,
    pub role: SlotRole,
    /// A slot in a texture scope is an image of its own (kernels address it in pixels), never a
    /// range of an arena: `None` for plain memory.
    pub texture: Option<SlotTexture>,
}

/// The image behind a texture slot: large enough for every entry planned into it (each from the
/// image's corner), as upstream's pool entries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTexture {
    pub texture: Texture,
    pub extent: Extent,
    pub dtype: DLDataType,
}

impl SlotTexture {
    /// The image's own shape, `[height, width, channels]` (what it is allocated as, in any scope).
    pub fn shape(&self) -> [i64; 3] {
        [self.extent.height as i64, self.extent.width as i64, self.extent.channels as i64]
    }
}

impl Slot {
    /// Whether the slot has memory of its own rather than a range of the activation arena: graph
    /// inputs and textures.
    pub fn has_own_memory(&self) -> bool {
        self.role == SlotRole::Input || self.texture.is_some()
    }
}

#[derive(Debug, Clone)]
pub struct StoragePlan {
    pub slots: Vec<Slot>,
}

impl StoragePlan {
    pub fn new(graph: &Graph) -> Result<StoragePlan> {
        let num_slots = graph.entries.iter().map(|e| e.storage_id + 1).max().unwrap_or(0);
        let mut slots = vec![Slot { bytes: 0, role: SlotRole::Unused, texture: None }; num_slots];
        let mut plain = vec![false; num_slots];
        let mut device = vec![None; num_slots];
        for (eid, e) in graph.entries.iter().enumerate() {
            // Bounded by MAX_TENSOR_BYTES, so the rounding cannot wrap.
            let bytes =
                crate::dtype::tensor_bytes(&e.shape, e.dtype).map_err(|err| err.context(format!("entry {eid}")))?;
            let slot = &mut slots[e.storage_id];
            slot.bytes = slot.bytes.max(bytes.next_multiple_of(4));
            let at = |err: Error| err.context(format!("entry {eid}"));
            match Texture::of_scope(&e.scope).map_err(at)? {
                None => plain[e.storage_id] = true,
                Some(texture) => {
                    let extent = texture.extent(&e.shape).map_err(at)?;
                    let mine = SlotTexture { texture, extent, dtype: e.dtype };
                    slot.texture = Some(match slot.texture {
                        None => mine,
                        // As upstream's pool entries: one dtype and channel count per storage id,
                        // the image large enough for each entry as its own scope folds it, the
                        // first scope naming the image (Relay gives a storage id one scope).
                        Some(t) if t.dtype == e.dtype && t.extent.channels == extent.channels => {
                            SlotTexture { extent: t.extent.union(extent), ..t }
                        }
                        Some(t) => {
                            return Err(at(Error::value(format!(
                                "storage id {} holds '{}' {} with {} channels and '{}' {} with {}: one image holds one pixel format",
                                e.storage_id,
                                t.texture.scope(),
                                t.dtype,
                                t.extent.channels,
                                texture.scope(),
                                e.dtype,
                                extent.channels
                            ))))
                        }
                    });
                }
            }
            // Which device types the executor serves is its plan's business (`Plan::new`).
            if let Some(d) = e.device_type {
                match device[e.storage_id] {
                    Some(prev) if prev != d => {
                        return Err(Error::value(format!("storage id {} is used by two device types", e.storage_id)))
                    }
                    _ => device[e.storage_id] = Some(d),
                }
            }
        }
        if let Some(sid) = (0..num_slots).find(|&sid| plain[sid] && slots[sid].texture.is_some()) {
            return Err(Error::value(format!("storage id {sid} mixes texture and plain memory scopes")));
        }
        // An entry is "input-like" if it is a graph input or a __nop alias of one.
        let mut input_like = vec![false; graph.num_entries()];
        for (nid, node) in graph.nodes.iter().enumerate() {
            let eid = graph.node_row_ptr[nid];
            input_like[eid] = match &node.kind {
                NodeKind::Input => true,
                NodeKind::Op(a) if a.func_name == "__nop" => {
                    node.inputs.first().is_some_and(|&(src, idx)| input_like[graph.entry_id(src, idx)])
                }
                NodeKind::Op(_) => false,
            };
        }
        for (eid, e) in graph.entries.iter().enumerate() {
            let slot = &mut slots[e.storage_id];
            slot.role = match (&slot.role, input_like[eid]) {
                (SlotRole::Unused, true) | (SlotRole::Input, true) => SlotRole::Input,
                _ => SlotRole::Activation,
            };
        }
        Ok(StoragePlan { slots })
    }

    /// Where each activation slot lives inside one shared arena (64-byte aligned offsets), and the
    /// arena size this graph needs.
    pub fn arena_layout(&self, align: usize) -> Result<(Vec<Option<usize>>, usize)> {
        let mut end = 0usize;
        let mut offsets = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            offsets.push(if s.role == SlotRole::Activation && s.texture.is_none() {
                let at = end;
                end = s.bytes.checked_next_multiple_of(align).and_then(|b| end.checked_add(b)).ok_or_else(|| {
                    Error::value("the activations of this graph add up to more memory than can be addressed")
                })?;
                Some(at)
            } else {
                None
            });
        }
        Ok((offsets, end))
    }

    pub fn bytes_of(&self, role: SlotRole) -> usize {
        self.slots.iter().filter(|s| s.role == role).map(|s| s.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x (int8 [3]) -> nop -> y; x -> f -> z; storage ids and extras per test.
    fn graph(sids: [u32; 4], extra: &str) -> Result<StoragePlan> {
        let json = format!(
            r#"{{"nodes":[{{"op":"null","name":"x","inputs":[]}},
              {{"op":"tvm_op","name":"y","attrs":{{"func_name":"__nop","num_inputs":"1","num_outputs":"1","flatten_data":"0"}},"inputs":[[0,0,0]]}},
              {{"op":"tvm_op","name":"z","attrs":{{"func_name":"f","num_inputs":"1","num_outputs":"1","flatten_data":"0"}},"inputs":[[0,0,0]]}}],
              "arg_nodes":[0],"node_row_ptr":[0,1,2,3],"heads":[[1,0,0],[2,0,0]],
              "attrs":{{"dltype":["list_str",["int8","int8","float32"]],"storage_id":["list_int",[{},{},{}]],
              "shape":["list_shape",[[3],[3],[5]]]{extra}}}}}"#,
            sids[0], sids[1], sids[2]
        );
        StoragePlan::new(&Graph::parse(&json)?)
    }

    #[test]
    fn slots_are_sized_rounded_and_given_their_role() {
        let p = graph([0, 0, 2, 0], "").unwrap();
        let got: Vec<(usize, SlotRole)> = p.slots.iter().map(|s| (s.bytes, s.role.clone())).collect();
        // x and its __nop share slot 0 (an input: shareable); slot 1 is never used.
        assert_eq!(got, vec![(4, SlotRole::Input), (0, SlotRole::Unused), (20, SlotRole::Activation)]);
        assert_eq!(p.bytes_of(SlotRole::Activation), 20);
        // An operator writing into an input's slot makes it an activation slot.
        let p = graph([0, 0, 0, 0], "").unwrap();
        assert_eq!((p.slots.len(), p.slots[0].bytes, &p.slots[0].role), (1, 20, &SlotRole::Activation));
    }

    #[test]
    fn texture_slots_are_images_large_enough_for_each_entry() {
        let json = r#"{"nodes":[{"op":"null","name":"x","inputs":[]},
              {"op":"tvm_op","name":"f","attrs":{"func_name":"f","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]},
              {"op":"tvm_op","name":"g","attrs":{"func_name":"g","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[1,0,0]]},
              {"op":"tvm_op","name":"h","attrs":{"func_name":"h","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[2,0,0]]}],
              "arg_nodes":[0],"node_row_ptr":[0,1,2,3,4],"heads":[[3,0,0]],
              "attrs":{"dltype":["list_str",["float32","float32","float32","float32"]],
              "storage_id":["list_int",[0,1,2,1]],
              "storage_scope":["list_str",["","global.texture","global.texture","global.texture-weight"]],
              "shape":["list_shape",[[4],[1,2,8,3,4],[1,1,2,5,4],[2,3,5,4]]]}}"#;
        let p = StoragePlan::new(&Graph::parse(json).unwrap()).unwrap();
        assert!(p.slots[0].texture.is_none() && p.slots[0].has_own_memory());
        // Slot 1: [1,2,8,3,4] as an activation is 16 rows of 3 pixels; [2,3,5,4] as a weight is 2
        // rows of 15: one image of 15 x 16 holds both.
        let t = p.slots[1].texture.unwrap();
        assert_eq!((t.texture, t.extent), (Texture::Activation, Extent { width: 15, height: 16, channels: 4 }));
        assert_eq!(t.shape(), [16, 15, 4]);
        assert!(p.slots[2].texture.is_some() && p.slots[2].has_own_memory() && p.slots[2].role == SlotRole::Activation);
        // An activation slot of plain memory goes to the arena; texture slots do not.
        let (offsets, _) = p.arena_layout(64).unwrap();
        assert_eq!(offsets, vec![None, None, None]);
        // One pixel format per image.
        let mixed = json
            .replace(r#"["float32","float32","float32","float32"]"#, r#"["float32","float32","float32","float16"]"#);
        let e = StoragePlan::new(&Graph::parse(&mixed).unwrap()).unwrap_err().to_string();
        assert!(e.contains("one image holds one pixel format"), "{e}");
        let plain = json.replace(r#""global.texture-weight"]"#, r#""global"]"#);
        let e = StoragePlan::new(&Graph::parse(&plain).unwrap()).unwrap_err().to_string();
        assert!(e.contains("storage id 1 mixes texture and plain memory scopes"), "{e}");
    }

    #[test]
    fn other_scopes_and_devices_are_refused() {
        let e = graph([0, 0, 1, 0], r#","storage_scope":["list_str",["global","global","shared"]]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("entry 2: memory scope 'shared' is not supported"), "{e}");
        // A texture needs rank 3 or more; one slot holds one kind of memory.
        let e = graph([0, 0, 1, 0], r#","storage_scope":["list_str",["global","global","global.texture"]]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("entry 2: a tensor in memory scope 'global.texture' must have rank 3"), "{e}");
        let e = graph([0, 0, 0, 0], r#","device_index":["list_int",[1,1,4]]"#).unwrap_err().to_string();
        assert!(e.contains("storage id 0 is used by two device types"), "{e}");
        assert!(graph(
            [0, 0, 1, 0],
            r#","device_index":["list_int",[1,1,1]],"storage_scope":["list_str",["","global",""]]"#
        )
        .is_ok());
    }
}
