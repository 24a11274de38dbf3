//! The objects the VM's code makes besides tensors: tuples and other algebraic data (`runtime.ADT`,
//! how a function returns several outputs) and closures (`vm.Closure`). Both are objects hosts may
//! receive: TVM's Python reads tuples through `runtime.GetADTSize` / `GetADTFields`, the C++ layer
//! rebuilds them with upstream's inline layout.

// No unsafe code of its own: `object_type!`'s deleter is the one exception, which it allows.
#![deny(unsafe_code)]

use crate::object::{AnyObject, ObjRef};

/// A tuple (tag 0) or a constructor's value: its tag and fields.
pub struct AdtObj {
    tag: i64,
    fields: Vec<AnyObject>,
}

crate::object::object_type!(AdtObj, crate::object::type_index::ADT);

impl AdtObj {
    pub fn new(tag: i64, fields: Vec<AnyObject>) -> ObjRef<AdtObj> {
        ObjRef::new(AdtObj { tag, fields })
    }

    pub fn tag(&self) -> i64 {
        self.tag
    }

    pub fn fields(&self) -> &[AnyObject] {
        &self.fields
    }
}

/// Tuples nest as deep as a model's code makes them (a loop consing a list: a chain as long as
/// its iterations). Dropping one would recurse once per level and overflow the thread's stack:
/// instead the last owner of a tuple or closure takes its children out into a list and drops
/// them one at a time, taking apart in turn each child it is the last owner of.
fn drop_iteratively(mut stack: Vec<AnyObject>) {
    while let Some(o) = stack.pop() {
        let o = match o.downcast::<AdtObj>() {
            Ok(mut adt) => {
                if let Some(a) = ObjRef::get_mut(&mut adt) {
                    stack.append(&mut a.fields);
                }
                continue;
            }
            Err(o) => o,
        };
        if let Ok(mut c) = o.downcast::<ClosureObj>() {
            if let Some(c) = ObjRef::get_mut(&mut c) {
                stack.append(&mut c.free_vars);
            }
        }
    }
}

impl Drop for AdtObj {
    fn drop(&mut self) {
        drop_iteratively(std::mem::take(&mut self.fields));
    }
}

impl Drop for ClosureObj {
    fn drop(&mut self) {
        drop_iteratively(std::mem::take(&mut self.free_vars));
    }
}

/// A function of the executable with the values it closed over.
pub struct ClosureObj {
    pub func: usize,
    pub free_vars: Vec<AnyObject>,
}

impl ClosureObj {
    pub fn new(func: usize, free_vars: Vec<AnyObject>) -> ObjRef<ClosureObj> {
        ObjRef::new(ClosureObj { func, free_vars })
    }
}

crate::object::object_type!(ClosureObj, crate::object::type_table::upstream_index("vm.Closure"));
