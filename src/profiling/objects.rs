//! The profiling objects, with upstream's type keys (registered as upstream's runtime registers
//! them, so their indices match) and field layouts after the object header (C++ hosts read fields
//! inline): a report's calls at +16, device metrics at +24, configuration at +32; a metric's value
//! at +16.

use crate::dlpack::DLDevice;
use crate::object::ObjRef;
use crate::packed::{ArrayObj, MapObj};

/// `runtime.profiling.Report`.
#[repr(C)]
pub struct ReportObj {
    calls: ObjRef<ArrayObj>,
    device_metrics: ObjRef<MapObj>,
    configuration: ObjRef<MapObj>,
}

crate::object::object_type!(ReportObj, crate::object::type_table::upstream_index("runtime.profiling.Report"));

impl ReportObj {
    pub fn new(calls: ObjRef<ArrayObj>, device_metrics: ObjRef<MapObj>, configuration: ObjRef<MapObj>) -> ReportObj {
        ReportObj { calls, device_metrics, configuration }
    }

    /// `Array<Map<String, ObjectRef>>`, one map per call.
    pub fn calls(&self) -> &ObjRef<ArrayObj> {
        &self.calls
    }

    /// `Map<String, Map<String, ObjectRef>>`, by device name.
    pub fn device_metrics(&self) -> &ObjRef<MapObj> {
        &self.device_metrics
    }

    /// `Map<String, ObjectRef>`.
    pub fn configuration(&self) -> &ObjRef<MapObj> {
        &self.configuration
    }
}

/// `runtime.profiling.Duration`: microseconds.
#[repr(C)]
pub struct DurationObj {
    pub microseconds: f64,
}

crate::object::object_type!(DurationObj, crate::object::type_table::upstream_index("runtime.profiling.Duration"));

/// `runtime.profiling.Percent`: out of 100.
#[repr(C)]
pub struct PercentObj {
    pub percent: f64,
}

crate::object::object_type!(PercentObj, crate::object::type_table::upstream_index("runtime.profiling.Percent"));

/// `runtime.profiling.Count`.
#[repr(C)]
pub struct CountObj {
    pub value: i64,
}

crate::object::object_type!(CountObj, crate::object::type_table::upstream_index("runtime.profiling.Count"));

/// `runtime.profiling.Ratio`.
#[repr(C)]
pub struct RatioObj {
    pub ratio: f64,
}

crate::object::object_type!(RatioObj, crate::object::type_table::upstream_index("runtime.profiling.Ratio"));

/// `runtime.profiling.DeviceWrapper`: a device as an object (a map key).
#[repr(C)]
pub struct DeviceWrapperObj {
    pub device: DLDevice,
}

crate::object::object_type!(
    DeviceWrapperObj,
    crate::object::type_table::upstream_index("runtime.profiling.DeviceWrapper")
);
