//! The runtime objects Python and C++ callers meet besides arrays and modules: String, ShapeTuple,
//! Array and Map. String and ShapeTuple keep upstream's layout (data pointer, size).

use crate::object::{AnyObject, ObjRef};
use std::ffi::c_char;

#[repr(C)]
pub struct StringObj {
    data: *const c_char,
    size: u64,
    value: Box<str>,
}

crate::object::object_type!(StringObj, crate::object::type_index::STRING);

// SAFETY: `data` points into `value`, immutable after construction.
unsafe impl Send for StringObj {}
// SAFETY: as above.
unsafe impl Sync for StringObj {}

impl StringObj {
    pub fn new(s: &str) -> ObjRef<StringObj> {
        let value: Box<str> = s.into();
        ObjRef::new(StringObj { data: value.as_ptr().cast(), size: value.len() as u64, value })
    }

    pub fn as_str(&self) -> &str {
        &self.value
    }
}

#[repr(C)]
pub struct ShapeTupleObj {
    data: *const i64,
    size: u64,
    dims: Box<[i64]>,
}

crate::object::object_type!(ShapeTupleObj, crate::object::type_index::SHAPE_TUPLE);

// SAFETY: `data` points into `dims`, immutable after construction.
unsafe impl Send for ShapeTupleObj {}
// SAFETY: as above.
unsafe impl Sync for ShapeTupleObj {}

impl ShapeTupleObj {
    pub fn new(dims: &[i64]) -> ObjRef<ShapeTupleObj> {
        let dims: Box<[i64]> = dims.into();
        ObjRef::new(ShapeTupleObj { data: dims.as_ptr(), size: dims.len() as u64, dims })
    }

    pub fn dims(&self) -> &[i64] {
        &self.dims
    }
}

/// An Array in upstream's layout (`ArrayNode`): after the object header its size and capacity,
/// then the elements inline. Code compiled against upstream's headers (a BYOC module's
/// `__init_` function reading its constants, a plug-in) reads an Array of ours there.
#[repr(C)]
pub struct ArrayObj {
    size: i64,
    capacity: i64,
}

crate::object::object_type!(ArrayObj, crate::object::type_index::ARRAY, with_tail);

impl crate::object::WithTail for ArrayObj {
    type Item = AnyObject;
    fn tail_len(&self) -> usize {
        self.size as usize
    }
}

const _: () = assert!(std::mem::size_of::<ArrayObj>() == 16);

impl ArrayObj {
    pub fn new(items: Vec<AnyObject>) -> ObjRef<ArrayObj> {
        let n = items.len() as i64;
        ObjRef::new_with_tail(ArrayObj { size: n, capacity: n }, items)
    }
}

impl ObjRef<ArrayObj> {
    pub fn items(&self) -> &[AnyObject] {
        self.tail()
    }
}

/// A map with String keys compared by content and other keys by identity; insertion order is kept
/// (upstream's is unspecified).
pub struct MapObj {
    entries: Vec<(AnyObject, AnyObject)>,
}

crate::object::object_type!(MapObj, crate::object::type_index::MAP);

fn key_str(k: &AnyObject) -> Option<ObjRef<StringObj>> {
    k.downcast_ref::<StringObj>()
}

fn same_key(a: &AnyObject, b: &AnyObject) -> bool {
    match (key_str(a), key_str(b)) {
        (Some(x), Some(y)) => x.as_str() == y.as_str(),
        _ => a.as_ptr() == b.as_ptr(),
    }
}

impl MapObj {
    /// Builds a map; a later duplicate key replaces the earlier value.
    pub fn new(pairs: Vec<(AnyObject, AnyObject)>) -> ObjRef<MapObj> {
        let mut entries: Vec<(AnyObject, AnyObject)> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            match entries.iter_mut().find(|(ek, _)| same_key(ek, &k)) {
                Some(slot) => slot.1 = v,
                None => entries.push((k, v)),
            }
        }
        ObjRef::new(MapObj { entries })
    }

    pub fn from_str_pairs(pairs: Vec<(&str, AnyObject)>) -> ObjRef<MapObj> {
        MapObj::new(pairs.into_iter().map(|(k, v)| (StringObj::new(k).into_any(), v)).collect())
    }

    pub fn entries(&self) -> &[(AnyObject, AnyObject)] {
        &self.entries
    }

    pub fn get(&self, key: &AnyObject) -> Option<&AnyObject> {
        self.entries.iter().find(|(k, _)| same_key(k, key)).map(|(_, v)| v)
    }

    pub fn get_str(&self, key: &str) -> Option<&AnyObject> {
        self.entries.iter().find(|(k, _)| key_str(k).is_some_and(|s| s.as_str() == key)).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_holds_its_items_inline_and_lets_each_go_once() {
        let s = StringObj::new("x");
        let a = ArrayObj::new(vec![s.clone().into_any(), s.clone().into_any(), s.clone().into_any()]);
        assert_eq!(s.ref_count(), 4);
        assert_eq!(a.items().len(), 3);
        assert!(a.items().iter().all(|i| i.as_ptr() == s.as_ptr()));
        let b = a.clone();
        drop(a);
        assert_eq!(s.ref_count(), 4, "the array lives while a reference does");
        drop(b);
        assert_eq!(s.ref_count(), 1, "each item let go once");
        assert!(ArrayObj::new(vec![]).items().is_empty());
    }
}
