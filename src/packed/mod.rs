//! Packed functions: arguments, return values, the function object, containers, global registry.

pub mod args;
pub mod containers;
pub mod function;
pub mod registry;
pub mod value;

pub use args::{Args, ArgsBuilder};
pub use containers::{ArrayObj, MapObj, ShapeTupleObj, StringObj};
pub use function::PackedFunc;
pub use value::RetValue;
