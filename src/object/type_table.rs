//! The process-wide table of object types: the static indices of TVM 0.16, the types upstream's
//! runtime registers when it loads (so indices a host sees match upstream's), and the types hosts
//! declare (`Object::GetOrAllocRuntimeTypeIndex` in the C++ layer). Allocation follows upstream's
//! rules, because inline header code relies on them: a type declaring `num_child_slots` reserves
//! the indices after its own for its descendants, and `IsInstance<Base>()` on a non-final type is
//! the range check `base <= index < base + slots` before it asks `DerivedFrom`.

#![forbid(unsafe_code)]

use super::type_index;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The static types, in index order. `runtime.Object` is named but, as upstream, not found by key.
const STATIC_KEYS: [&str; type_index::STATIC_END as usize] = [
    "runtime.Object",
    "runtime.Module",
    "runtime.NDArray",
    "runtime.String",
    "Array",
    "Map",
    "runtime.ShapeTuple",
    "runtime.PackedFunc",
    "runtime.disco.DRef",
    "runtime.RPCObjectRef",
    "runtime.Closure",
    "runtime.ADT",
];

/// The types upstream v0.16's runtime (built with OpenCL) registers as it loads, in order, with
/// their parents: registering the same keys first puts a host's own types at the indices
/// upstream gives them (the first free one is 41).
const UPSTREAM_DYNAMIC: [(&str, &str); 29] = [
    ("runtime.disco.ShardLoader", "runtime.Object"),
    ("runtime.disco.Session", "runtime.Object"),
    ("runtime.disco.DiscoDebugObject", "runtime.disco.Session"),
    ("runtime.disco.ProcessSession", "runtime.disco.Session"),
    ("runtime.disco.ThreadedSession", "runtime.disco.Session"),
    ("metadata.MetadataBaseNode", "runtime.Object"),
    ("metadata.MetadataArrayNode", "metadata.MetadataBaseNode"),
    ("metadata.MetadataNode", "metadata.MetadataBaseNode"),
    ("metadata.TensorInfoNode", "metadata.MetadataBaseNode"),
    ("metadata.ConstantInfoNode", "metadata.MetadataBaseNode"),
    ("TimerNode", "runtime.Object"),
    ("DefaultTimerNode", "TimerNode"),
    ("CPUTimerNode", "TimerNode"),
    ("runtime.profiling.Duration", "runtime.Object"),
    ("runtime.profiling.Percent", "runtime.Object"),
    ("runtime.profiling.Count", "runtime.Object"),
    ("runtime.profiling.Ratio", "runtime.Object"),
    ("runtime.profiling.Report", "runtime.Object"),
    ("runtime.profiling.DeviceWrapper", "runtime.Object"),
    ("runtime.profiling.MetricCollector", "runtime.Object"),
    ("relax.vm.KVState", "runtime.Object"),
    ("relax.vm.AttentionKVCache", "relax.vm.KVState"),
    ("relax.vm.RNNState", "relax.vm.KVState"),
    ("relax.vm.AttentionKVCacheLegacy", "runtime.Object"),
    ("relax.vm.PagedAttentionKVCache", "relax.vm.AttentionKVCache"),
    ("relax.vm.RNNStateImp", "relax.vm.RNNState"),
    ("relax.vm.Closure", "runtime.Closure"),
    ("vm.Closure", "runtime.Closure"),
    ("OpenCLTimerNode", "TimerNode"),
];

/// The index upstream's runtime gives `key`, one of the types it registers as it loads: each
/// takes the next index after the static ones, in order (none reserves child slots).
pub const fn upstream_index(key: &str) -> u32 {
    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
    let mut i = 0;
    while i < UPSTREAM_DYNAMIC.len() {
        if same(UPSTREAM_DYNAMIC[i].0, key) {
            return type_index::STATIC_END + i as u32;
        }
        i += 1;
    }
    panic!("not a type upstream registers as it loads")
}

/// Asks for a dynamically allocated index (upstream's `TypeIndex::kDynamic`, the end of the
/// static range).
pub const DYNAMIC: u32 = type_index::STATIC_END;

#[derive(Clone, Debug, Default)]
struct TypeInfo {
    key: String,
    parent: u32,
    /// Indices this type reserves: itself and its children's.
    num_slots: u32,
    /// Of those, how many are taken (0: the index names no type).
    allocated_slots: u32,
    child_slots_can_overflow: bool,
}

/// The table. One per process ([`table`]); tests make their own.
#[derive(Debug)]
pub struct TypeTable {
    types: Vec<TypeInfo>,
    by_key: HashMap<String, u32>,
    /// The next index past every reserved range.
    next: u32,
}

impl Default for TypeTable {
    fn default() -> Self {
        TypeTable::new()
    }
}

impl TypeTable {
    /// The table as upstream's runtime has it once loaded.
    pub fn new() -> TypeTable {
        let end = type_index::STATIC_END;
        let mut table = TypeTable { types: vec![TypeInfo::default(); end as usize], by_key: HashMap::new(), next: end };
        // The root is named and may have any number of children after the static range.
        table.types[0] = TypeInfo { key: STATIC_KEYS[0].into(), child_slots_can_overflow: true, ..TypeInfo::default() };
        for (index, key) in (1..end).zip(&STATIC_KEYS[1..]) {
            table.alloc(key, index, type_index::OBJECT, 0, true).expect("static types are distinct");
        }
        for (key, parent) in UPSTREAM_DYNAMIC {
            let parent = match parent {
                "runtime.Object" => type_index::OBJECT,
                key => table.key_to_index(key).expect("parents come first"),
            };
            table.alloc(key, DYNAMIC, parent, 0, true).expect("upstream's types are distinct");
        }
        table
    }

    /// The index of `key`, allocating one if it is new: `static_index` when not [`DYNAMIC`], else
    /// the next free one in the parent's reserved range, or past every range when the parent's is
    /// full and may overflow.
    pub fn alloc(
        &mut self,
        key: &str,
        static_index: u32,
        parent: u32,
        num_child_slots: u32,
        child_slots_can_overflow: bool,
    ) -> Result<u32> {
        if let Some(&index) = self.by_key.get(key) {
            return Ok(index);
        }
        let pinfo = self
            .types
            .get(parent as usize)
            .filter(|p| parent == type_index::OBJECT || p.allocated_slots != 0)
            .ok_or_else(|| Error::internal(format!("type '{key}': unknown parent type index {parent}")))?
            .clone();
        // A child of a type whose range may not overflow cannot overflow either.
        let can_overflow = child_slots_can_overflow && pinfo.child_slots_can_overflow;
        let num_slots = num_child_slots
            .checked_add(1)
            .ok_or_else(|| Error::internal(format!("type '{key}': {num_child_slots} child slots")))?;
        let index = if static_index != DYNAMIC {
            let taken = self.types.get(static_index as usize).is_none_or(|t| t.allocated_slots != 0);
            if taken {
                return Err(Error::internal(format!("type '{key}': static index {static_index} is taken or unknown")));
            }
            static_index
        } else if pinfo.allocated_slots.checked_add(num_slots).is_some_and(|n| n <= pinfo.num_slots) {
            // Inside the parent's reserved range.
            let index = parent + pinfo.allocated_slots;
            self.types[parent as usize].allocated_slots += num_slots;
            index
        } else {
            if !pinfo.child_slots_can_overflow {
                return Err(Error::internal(format!(
                    "type '{key}': reached the maximum number of subclasses of '{}'",
                    pinfo.key
                )));
            }
            let index = self.next;
            self.next = index
                .checked_add(num_slots)
                .filter(|&n| n < u32::MAX)
                .ok_or_else(|| Error::internal(format!("type '{key}': no type index left")))?;
            self.types.resize(self.next as usize, TypeInfo::default());
            index
        };
        self.types[index as usize] = TypeInfo {
            key: key.to_string(),
            parent,
            num_slots,
            allocated_slots: 1,
            child_slots_can_overflow: can_overflow,
        };
        self.by_key.insert(key.to_string(), index);
        Ok(index)
    }

    pub fn key_to_index(&self, key: &str) -> Result<u32> {
        self.by_key.get(key).copied().ok_or_else(|| {
            Error::internal(format!(
                "Check failed: (it != type_key2index_.end()) is false: Cannot find type {key}. \
                 Did you forget to register the node by TVM_REGISTER_NODE_TYPE ?"
            ))
        })
    }

    pub fn index_to_key(&self, index: u32) -> Result<&str> {
        match self.types.get(index as usize) {
            Some(t) if index == type_index::OBJECT || t.allocated_slots != 0 => Ok(&t.key),
            _ => Err(Error::internal(format!(
                "Check failed: (tindex < type_table_.size() && type_table_[tindex].allocated_slots != 0) \
                 is false: Unknown type index {index}"
            ))),
        }
    }

    /// Whether `child` is `parent` or one of its descendants. An index past the table is an error
    /// unless it is below `parent` (upstream answers that without looking).
    pub fn derived_from(&self, mut child: u32, parent: u32) -> Result<bool> {
        if child <= parent {
            return Ok(child == parent);
        }
        if child as usize >= self.types.len() {
            return Err(Error::internal(format!(
                "Check failed: child_tindex < type_table_.size() ({child} vs. {}) : ",
                self.types.len()
            )));
        }
        while child > parent {
            child = self.types[child as usize].parent;
        }
        Ok(child == parent)
    }
}

fn cell() -> &'static Mutex<TypeTable> {
    static TABLE: OnceLock<Mutex<TypeTable>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(TypeTable::new()))
}

/// The process's table.
pub fn table() -> MutexGuard<'static, TypeTable> {
    // Every update is one `alloc`, which validates before it writes: a poisoned lock still holds a
    // consistent table.
    cell().lock().unwrap_or_else(|e| e.into_inner())
}

/// Has forks take the table.
pub fn handle_forks() {
    crate::backend::fork::guard_static(cell());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_indices_at_load() {
        let t = TypeTable::new();
        assert_eq!(t.key_to_index("runtime.NDArray").unwrap(), 2);
        assert_eq!(t.key_to_index("runtime.disco.ShardLoader").unwrap(), 12);
        assert_eq!(t.key_to_index("OpenCLTimerNode").unwrap(), 40);
        assert!(t.derived_from(36, 32).unwrap() && t.derived_from(36, 33).unwrap() && !t.derived_from(35, 32).unwrap());
        assert!(t.key_to_index("runtime.Object").is_err());
        assert_eq!(t.index_to_key(0).unwrap(), "runtime.Object");
        assert!(t.index_to_key(41).is_err());
        for (key, _) in UPSTREAM_DYNAMIC {
            assert_eq!(t.key_to_index(key).unwrap(), upstream_index(key), "{key}");
        }
    }

    #[test]
    fn children_fill_their_parent_range_first() {
        let mut t = TypeTable::new();
        let base = t.alloc("test.Base", DYNAMIC, 0, 4, true).unwrap();
        let other = t.alloc("test.Other", DYNAMIC, 0, 0, true).unwrap();
        let child = t.alloc("test.Child", DYNAMIC, base, 0, true).unwrap();
        assert_eq!((base, child, other), (41, 42, 46));
        // Again by key: the same index, nothing allocated.
        assert_eq!(t.alloc("test.Child", DYNAMIC, base, 0, true).unwrap(), 42);
        assert!(t.derived_from(child, base).unwrap() && !t.derived_from(other, base).unwrap());
        // Reserved but unallocated indices name no type.
        assert!(t.index_to_key(base + 3).is_err());
        assert!(!t.derived_from(base + 3, base).unwrap());
        // A child with slots of its own takes them inside the parent's range, then the range is
        // full and children overflow past every range.
        let grand = t.alloc("test.Mid", DYNAMIC, base, 2, true).unwrap();
        assert_eq!(grand, 43);
        assert_eq!(t.alloc("test.Late", DYNAMIC, base, 0, true).unwrap(), 47);
    }

    #[test]
    fn a_full_range_that_may_not_overflow_refuses() {
        let mut t = TypeTable::new();
        let base = t.alloc("test.Closed", DYNAMIC, 0, 1, false).unwrap();
        t.alloc("test.A", DYNAMIC, base, 0, true).unwrap();
        let err = t.alloc("test.B", DYNAMIC, base, 0, true).unwrap_err();
        assert!(err.to_string().contains("maximum number of subclasses"), "{err}");
        assert!(t.alloc("test.C", DYNAMIC, 999, 0, true).is_err());
        assert!(t.alloc("test.D", 5, 0, 0, true).is_err(), "static index 5 is Map's");
        assert!(t.alloc("test.E", 200, 0, 0, true).is_err(), "not a static index");
    }

    #[test]
    fn out_of_range_child() {
        let t = TypeTable::new();
        assert!(t.derived_from(100, 0).is_err());
        assert!(!t.derived_from(3, 5).unwrap());
        assert!(t.derived_from(0, 0).unwrap());
    }
}
