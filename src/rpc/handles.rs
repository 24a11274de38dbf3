//! The objects an RPC session has handed out (functions, modules, other objects, arrays), by the
//! handle the client knows each by: a client can only ever name what it was given, and each handle
//! it frees drops one of the references it was given.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::{AnyObject, ObjRef, ObjectType};
use crate::packed::PackedFunc;
use std::collections::HashMap;

#[derive(Default)]
pub struct Handles {
    /// Handle -> the object and how many references the client holds.
    given: HashMap<u64, (AnyObject, usize)>,
}

impl Handles {
    /// Hands `obj` out (once more); returns its handle.
    pub fn give(&mut self, obj: AnyObject) -> u64 {
        let handle = obj.as_ptr() as u64;
        self.given.entry(handle).or_insert((obj, 0)).1 += 1;
        handle
    }

    /// Drops one reference the client holds; returns the object when it was the last.
    pub fn free(&mut self, handle: u64) -> Result<Option<AnyObject>> {
        let entry = self.given.get_mut(&handle).ok_or_else(|| unknown(handle))?;
        entry.1 -= 1;
        Ok(if entry.1 == 0 { self.given.remove(&handle).map(|(o, _)| o) } else { None })
    }

    /// The object the client names by `handle`.
    pub fn get(&self, handle: u64) -> Result<&AnyObject> {
        self.given.get(&handle).map(|(o, _)| o).ok_or_else(|| unknown(handle))
    }

    /// The object named by `handle`, which must be a `T` (a `what`).
    pub fn typed<T: ObjectType>(&self, handle: u64, what: &str) -> Result<ObjRef<T>> {
        self.get(handle)?
            .downcast_ref::<T>()
            .ok_or_else(|| Error::type_err(format!("RPC: handle {handle:#x} is not a {what}")))
    }

    pub fn func(&self, handle: u64) -> Result<ObjRef<PackedFunc>> {
        self.typed(handle, "function")
    }

    pub fn module(&self, handle: u64) -> Result<ObjRef<Module>> {
        self.typed(handle, "module")
    }

    pub fn len(&self) -> usize {
        self.given.len()
    }

    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }
}

fn unknown(handle: u64) -> Error {
    Error::value(format!("RPC: handle {handle:#x} was never handed out by this session"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::StringObj;

    #[test]
    fn a_handle_lives_as_long_as_the_client_holds_one() {
        let mut h = Handles::default();
        let s = StringObj::new("x").into_any();
        let a = h.give(s.clone());
        assert_eq!(h.give(s.clone()), a, "the same object, the same handle");
        assert!(h.get(a).is_ok() && h.typed::<StringObj>(a, "string").is_ok());
        assert!(h.func(a).is_err(), "not a function");
        assert!(h.free(a).unwrap().is_none(), "one reference left");
        assert!(h.free(a).unwrap().is_some(), "the last");
        assert!(h.get(a).is_err() && h.free(a).is_err() && h.is_empty());
        assert!(h.get(0xdead).is_err());
    }
}
