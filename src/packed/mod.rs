//! Packed functions: arguments, return values, the function object, containers, global registry.

pub(crate) mod args;
pub(crate) mod cells;
mod containers;
pub(crate) mod function;
pub mod registry;
mod value;

pub use args::{with_items, with_object_args, Args, ArgsBuilder, Item};
pub use containers::{ArrayObj, MapObj, ShapeTupleObj, StringObj};
pub use function::PackedFunc;
pub use value::RetValue;
