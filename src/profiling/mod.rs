//! Profiles as upstream reports them: a [`Report`] is data (per-call metrics, per-device metrics,
//! the configuration), with its formats beside it (`format`: upstream's table and CSV; `json`:
//! upstream's JSON both ways), and the objects TVM's Python and C++ see (`objects`:
//! `runtime.profiling.Report`, `Duration`, `Percent`, `Count`, `Ratio`, `DeviceWrapper`, with
//! upstream's type keys and field layouts). The debug executor (`executor::debug`, a layer above) fills one.

// No unsafe code of its own: `object_type!`'s deleter (in `objects`) is the one exception, which it allows.
#![deny(unsafe_code)]

pub mod format;
pub mod json;
pub mod objects;

use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef};
use crate::packed::{ArrayObj, MapObj, StringObj};
use objects::{CountObj, DurationObj, PercentObj, RatioObj, ReportObj};

/// One metric's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    /// Microseconds.
    Duration(f64),
    /// Out of 100.
    Percent(f64),
    Count(i64),
    Ratio(f64),
    Str(String),
}

/// Named metrics, in order (a call, a device's totals, the configuration).
pub type Metrics = Vec<(String, Metric)>;

/// What a profile found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Per call, in execution order.
    pub calls: Vec<Metrics>,
    /// Per device ("cpu0", "opencl0"): the whole run.
    pub device_metrics: Vec<(String, Metrics)>,
    pub configuration: Metrics,
}

/// A metric by name.
pub fn metric<'a>(metrics: &'a Metrics, name: &str) -> Option<&'a Metric> {
    metrics.iter().find(|(n, _)| n == name).map(|(_, m)| m)
}

/// Sets `name` in `metrics`, replacing an earlier value (a later metric overwrites, as upstream).
pub fn set(metrics: &mut Metrics, name: &str, value: Metric) {
    match metrics.iter_mut().find(|(n, _)| n == name) {
        Some((_, m)) => *m = value,
        None => metrics.push((name.to_string(), value)),
    }
}

/// A call's first metrics, as upstream's profiler records every call: its name, duration in
/// microseconds, count (1) and device.
pub fn call_metrics(name: &str, us: f64, device: DLDevice) -> Metrics {
    vec![
        ("Name".to_string(), Metric::Str(name.to_string())),
        ("Duration (us)".to_string(), Metric::Duration(us)),
        ("Count".to_string(), Metric::Count(1)),
        ("Device".to_string(), Metric::Str(device_name(device))),
    ]
}

/// How a report names a device: `cpu0`, `opencl1`.
pub fn device_name(device: DLDevice) -> String {
    format!("{}{}", crate::device::type_name(device.device_type), device.device_id)
}

impl Metric {
    /// The object upstream's report holds for this value.
    pub fn to_object(&self) -> AnyObject {
        match self {
            Metric::Duration(v) => ObjRef::new(DurationObj { microseconds: *v }).into_any(),
            Metric::Percent(v) => ObjRef::new(PercentObj { percent: *v }).into_any(),
            Metric::Count(v) => ObjRef::new(CountObj { value: *v }).into_any(),
            Metric::Ratio(v) => ObjRef::new(RatioObj { ratio: *v }).into_any(),
            Metric::Str(s) => StringObj::new(s).into_any(),
        }
    }

    /// A metric from one of the objects a report may hold.
    pub fn from_object(obj: &AnyObject) -> Result<Metric> {
        if let Some(d) = obj.downcast_ref::<DurationObj>() {
            return Ok(Metric::Duration(d.microseconds));
        }
        if let Some(p) = obj.downcast_ref::<PercentObj>() {
            return Ok(Metric::Percent(p.percent));
        }
        if let Some(c) = obj.downcast_ref::<CountObj>() {
            return Ok(Metric::Count(c.value));
        }
        if let Some(r) = obj.downcast_ref::<RatioObj>() {
            return Ok(Metric::Ratio(r.ratio));
        }
        if let Some(s) = obj.downcast_ref::<StringObj>() {
            return Ok(Metric::Str(s.as_str().to_string()));
        }
        Err(Error::type_err(format!(
            "a report metric must be a Duration, Percent, Count, Ratio or String, not {}",
            crate::object::type_key_of(obj.type_index())
        )))
    }
}

fn metrics_to_map(metrics: &Metrics) -> ObjRef<MapObj> {
    MapObj::from_str_pairs(metrics.iter().map(|(n, m)| (n.as_str(), m.to_object())).collect())
}

fn metrics_from_map(map: &AnyObject) -> Result<Metrics> {
    let map = map.downcast_ref::<MapObj>().ok_or_else(|| Error::type_err("report metrics must be a Map"))?;
    map.entries()
        .iter()
        .map(|(k, v)| {
            let key = k.downcast_ref::<StringObj>().ok_or_else(|| Error::type_err("metric names must be strings"))?;
            Ok((key.as_str().to_string(), Metric::from_object(v)?))
        })
        .collect()
}

impl Report {
    /// The `runtime.profiling.Report` object of this report.
    pub fn to_object(&self) -> ObjRef<ReportObj> {
        let calls = ArrayObj::new(self.calls.iter().map(|c| metrics_to_map(c).into_any()).collect());
        let devices = MapObj::from_str_pairs(
            self.device_metrics.iter().map(|(d, m)| (d.as_str(), metrics_to_map(m).into_any())).collect(),
        );
        ObjRef::new(ReportObj::new(calls, devices, metrics_to_map(&self.configuration)))
    }

    /// The report an object holds (made here, or by a host from Arrays and Maps).
    pub fn from_object(r: &ReportObj) -> Result<Report> {
        let calls = r.calls().items().iter().map(metrics_from_map).collect::<Result<_>>()?;
        let device_metrics = r
            .device_metrics()
            .entries()
            .iter()
            .map(|(k, v)| {
                let key =
                    k.downcast_ref::<StringObj>().ok_or_else(|| Error::type_err("device names must be strings"))?;
                Ok((key.as_str().to_string(), metrics_from_map(v)?))
            })
            .collect::<Result<_>>()?;
        let configuration = metrics_from_map(&r.configuration().clone().into_any())?;
        Ok(Report { calls, device_metrics, configuration })
    }
}

/// Times one stretch of work on a device, as upstream's timers do: the CPU's clock; on another
/// device, the host's clock with the device synchronised at both ends (everything queued before
/// the start has finished, everything queued before the stop has finished), which is what the
/// work cost the device, launch included.
pub struct Timer {
    device: DLDevice,
    start: std::time::Instant,
}

impl Timer {
    pub fn start(device: DLDevice) -> Result<Timer> {
        sync(device)?;
        Ok(Timer { device, start: std::time::Instant::now() })
    }

    /// Nanoseconds since the start, once the device has finished.
    pub fn stop(&self) -> Result<u64> {
        sync(self.device)?;
        Ok(self.start.elapsed().as_nanos() as u64)
    }
}

fn sync(device: DLDevice) -> Result<()> {
    if crate::device::is_host(device) {
        return Ok(());
    }
    crate::device::api_of(device)?.sync(device.device_id)
}
