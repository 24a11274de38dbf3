//! Weights linked into a library: link-params builds of TVM 0.8 and older carry their constants
//! in the library and hand them out through `_lookup_linked_param(storage_id)`.

use crate::error::{Error, Result};
use crate::memory_plan::{SlotRole, StoragePlan};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::{ArgsBuilder, RetValue};
use crate::tensor::Weight;
use std::sync::Arc;

/// Asks the library's `_lookup_linked_param(storage_id)` (present in link-params builds of TVM 0.8
/// and older) for constant data of each input slot: a pointer into the library, or nothing. Each
/// weight holds the library, so the data stays mapped for as long as any executor uses it.
pub fn linked_params(library: &ObjRef<Module>, storage: &StoragePlan) -> Result<Vec<Option<Arc<Weight>>>> {
    let Some(lookup) = Module::get_function(library, "_lookup_linked_param", true)? else {
        return Ok(vec![None; storage.slots.len()]);
    };
    // Its pointers become weights: only a function that vouches for them (compiled code, a C host,
    // or Rust code that said so with `unsafe`) may provide them.
    if !lookup.trusted_pointers() {
        return Err(Error::type_err(
            "_lookup_linked_param must be compiled code or a function made with PackedFunc::native_trusted",
        ));
    }
    (0..storage.slots.len())
        .map(|sid| {
            // Operators write activation slots: those can never be constants.
            if storage.slots[sid].role != SlotRole::Input {
                return Ok(None);
            }
            let mut args = ArgsBuilder::new();
            args.int(sid as i64);
            match lookup.call(&args.args()).map_err(|e| e.context("_lookup_linked_param"))? {
                RetValue::None => Ok(None),
                RetValue::Handle(p) if p.is_null() => Ok(None),
                // SAFETY: a trusted function's pointer (checked above): the library's constant for
                // this slot, at least as big as the slot's largest entry (what the compiler
                // linked), read-only; the weight keeps the library loaded.
                RetValue::Handle(p) => Ok(Some(Arc::new(unsafe {
                    Weight::linked(p.cast(), storage.slots[sid].bytes, Box::new(library.clone()))
                }?))),
                other => Err(Error::type_err(format!("_lookup_linked_param({sid}) returned {other:?}, not a pointer"))),
            }
        })
        .collect()
}
