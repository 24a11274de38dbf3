//! Every object payload type of the runtime, declared in one place (type indices must stay unique),
//! and the list of their deleters, by which [`is_native`] tells this runtime's cells from a host's.
//! Apart from `object` itself so that the object model does not depend on the types built on it.

use super::{Deleter, ModulePrefix, ObjectHeader, ObjectType};

object_types!(
    (crate::module::Module, super::type_index::MODULE, ModulePrefix, ModulePrefix::new()),
    (crate::tensor::NDArray, super::type_index::NDARRAY),
    (crate::packed::StringObj, super::type_index::STRING),
    (crate::packed::ArrayObj, super::type_index::ARRAY),
    (crate::packed::MapObj, super::type_index::MAP),
    (crate::packed::ShapeTupleObj, super::type_index::SHAPE_TUPLE),
    (crate::packed::PackedFunc, super::type_index::PACKED_FUNC),
    (crate::rpc::client::RpcObjectRef, super::type_index::RPC_OBJECT_REF),
    (crate::profiling::objects::ReportObj, super::type_table::upstream_index("runtime.profiling.Report")),
    (crate::profiling::objects::DurationObj, super::type_table::upstream_index("runtime.profiling.Duration")),
    (crate::profiling::objects::PercentObj, super::type_table::upstream_index("runtime.profiling.Percent")),
    (crate::profiling::objects::CountObj, super::type_table::upstream_index("runtime.profiling.Count")),
    (crate::profiling::objects::RatioObj, super::type_table::upstream_index("runtime.profiling.Ratio")),
    (crate::profiling::objects::DeviceWrapperObj, super::type_table::upstream_index("runtime.profiling.DeviceWrapper")),
);

/// Whether the object at `obj` is a cell of this runtime (its deleter is one of ours), as opposed
/// to one a host made with upstream's layouts.
///
/// # Safety
/// `obj` must be null or a live object header.
pub unsafe fn is_native(obj: *const ObjectHeader) -> bool {
    // SAFETY: per the contract.
    let Some(header) = (unsafe { obj.as_ref() }) else { return false };
    header.deleter.is_some_and(|deleter| NATIVE_DELETERS.iter().any(|&d| d as usize == deleter as usize))
}
