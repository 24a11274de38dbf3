//! The `runtime.profiling.*` globals TVM's Python calls (report objects, their formats, metric
//! constructors, `ProfileFunction`), and the `node.*` globals through which Python reads objects'
//! fields and prints them (`report.calls`, `print(report)`).

use super::{def, Register};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::module::ModuleArg;
use crate::object::{type_key_of, AnyObject, ObjRef};
use crate::packed::{ArrayObj, MapObj, PackedFunc, RetValue, ShapeTupleObj};
use crate::profiling::objects::{CountObj, DeviceWrapperObj, DurationObj, PercentObj, RatioObj, ReportObj};
use crate::profiling::{format, json, Metric, Report};

pub fn register(reg: &mut Register<'_>) {
    def(reg, "runtime.profiling.Report", |a| {
        a.expect_count("Report", 3, 3)?;
        let calls = a.typed_object::<ArrayObj>(0, "Array")?;
        let devices = a.typed_object::<MapObj>(1, "Map")?;
        let configuration = a.typed_object::<MapObj>(2, "Map")?;
        let report = ReportObj::new(calls, devices, configuration);
        // Refused now rather than when printed: every metric must be one a report holds.
        Report::from_object(&report)?;
        Ok(ObjRef::new(report).into())
    });
    def(reg, "runtime.profiling.AsTable", |a| {
        a.expect_count("AsTable", 4, 4)?;
        let r = report_arg(a, 0)?;
        Ok(RetValue::Str(format::table(&r, a.int(1)? != 0, a.int(2)? != 0, a.int(3)? != 0)?))
    });
    def(reg, "runtime.profiling.AsCSV", |a| Ok(RetValue::Str(format::csv(&report_arg(a, 0)?))));
    def(reg, "runtime.profiling.AsJSON", |a| Ok(RetValue::Str(json::to_json(&report_arg(a, 0)?))));
    def(reg, "runtime.profiling.FromJSON", |a| Ok(json::from_json(a.str(0)?)?.to_object().into()));
    def(reg, "runtime.profiling.Count", |a| Ok(Metric::Count(a.int(0)?).to_object().into()));
    def(reg, "runtime.profiling.Duration", |a| Ok(Metric::Duration(number(a, 0)?).to_object().into()));
    def(reg, "runtime.profiling.Percent", |a| Ok(Metric::Percent(number(a, 0)?).to_object().into()));
    def(reg, "runtime.profiling.Ratio", |a| Ok(Metric::Ratio(number(a, 0)?).to_object().into()));
    def(reg, "runtime.profiling.DeviceWrapper", |a| Ok(ObjRef::new(DeviceWrapperObj { device: a.device(0)? }).into()));
    def(reg, "runtime.profiling.ProfileFunction", profile_function);
    def(reg, "node.AsRepr", |a| Ok(RetValue::Str(repr(&object_arg(a, 0)?)?)));
    def(reg, "node.NodeGetAttr", |a| {
        a.expect_count("NodeGetAttr", 2, 2)?;
        get_attr(&object_arg(a, 0)?, a.str(1)?)
    });
    def(reg, "node.NodeListAttrNames", |a| {
        let names = attr_names(&object_arg(a, 0)?);
        Ok(PackedFunc::native(move |a| {
            let i = a.int(0)?;
            if i < 0 {
                return Ok(RetValue::Int(names.len() as i64));
            }
            let name =
                names.get(i as usize).ok_or_else(|| Error::index(format!("attribute {i} of {}", names.len())))?;
            Ok(RetValue::Str(name.to_string()))
        })
        .into())
    });
}

/// A number argument, given as a float or an int.
fn number(a: &crate::packed::Args<'_>, i: usize) -> Result<f64> {
    a.float(i).or_else(|_| a.int(i).map(|v| v as f64))
}

fn object_arg(a: &crate::packed::Args<'_>, i: usize) -> Result<AnyObject> {
    a.object(i)?.ok_or_else(|| Error::value(format!("argument {i}: expected an object, got None")))
}

fn report_arg(a: &crate::packed::Args<'_>, i: usize) -> Result<Report> {
    Report::from_object(&*a.typed_object::<ReportObj>(i, "runtime.profiling.Report")?)
}

/// `ProfileFunction(mod, name, dev_type, dev_id, warmup_iters, collectors)`: a function that runs
/// `name` of the module `warmup_iters` times, then once under the metric collectors, and returns
/// their metrics merged. This runtime has no collectors (upstream's PAPI one is a build option):
/// they are refused by name, and with none the metrics are empty, as upstream's.
fn profile_function(a: &crate::packed::Args<'_>) -> Result<RetValue> {
    a.expect_count("ProfileFunction", 6, 6)?;
    let module = a.module(0)?;
    if module.type_key() == "rpc" {
        return Err(Error::value("Profiling a module over RPC is not yet supported"));
    }
    let name = a.str(1)?.to_string();
    let warmup = usize::try_from(a.int(4)?).map_err(|_| Error::value("warmup_iters must not be negative"))?;
    if let Some(collectors) = a.object(5)? {
        let list = collectors
            .downcast_ref::<ArrayObj>()
            .ok_or_else(|| Error::type_err("collectors must be an Array of MetricCollector"))?;
        if let Some(c) = list.items().first() {
            return Err(Error::value(format!(
                "metric collector {} is not available in this runtime: it profiles durations only (no PAPI)",
                type_key_of(c.type_index())
            )));
        }
    }
    let func = Module::get_function(&module, &name, false)?
        .ok_or_else(|| Error::value(format!("There is no function called \"{name}\" in the module")))?;
    Ok(PackedFunc::native(move |args| {
        for _ in 0..=warmup {
            func.call(args)?;
        }
        Ok(MapObj::new(Vec::new()).into())
    })
    .into())
}

/// What Python prints for an object: a report as its table, a metric as `<type key>(<value>)`,
/// containers with their contents.
fn repr(obj: &AnyObject) -> Result<String> {
    if let Some(r) = obj.downcast_ref::<ReportObj>() {
        return format::table(&Report::from_object(&r)?, true, true, true);
    }
    if let Ok(m) = Metric::from_object(obj) {
        let key = type_key_of(obj.type_index());
        return Ok(match m {
            Metric::Str(s) => format!("{s:?}"),
            Metric::Count(c) => format!("{key}({c})"),
            Metric::Duration(v) | Metric::Percent(v) | Metric::Ratio(v) => format!("{key}({})", format::general(v, 6)),
        });
    }
    if let Some(a) = obj.downcast_ref::<ArrayObj>() {
        let items = a.items().iter().map(repr).collect::<Result<Vec<_>>>()?;
        return Ok(format!("[{}]", items.join(", ")));
    }
    if let Some(m) = obj.downcast_ref::<MapObj>() {
        let items =
            m.entries().iter().map(|(k, v)| Ok(format!("{}: {}", repr(k)?, repr(v)?))).collect::<Result<Vec<_>>>()?;
        return Ok(format!("{{{}}}", items.join(", ")));
    }
    if let Some(s) = obj.downcast_ref::<ShapeTupleObj>() {
        return Ok(format!("{:?}", s.dims()));
    }
    if let Some(d) = obj.downcast_ref::<DeviceWrapperObj>() {
        return Ok(format!("{}({})", crate::device::type_name(d.device.device_type), d.device.device_id));
    }
    Ok(format!("{}({:p})", type_key_of(obj.type_index()), obj.as_ptr()))
}

/// The fields Python reads by name.
fn attr_names(obj: &AnyObject) -> Vec<&'static str> {
    if obj.downcast_ref::<ReportObj>().is_some() {
        vec!["calls", "device_metrics", "configuration"]
    } else if obj.downcast_ref::<DurationObj>().is_some() {
        vec!["microseconds"]
    } else if obj.downcast_ref::<PercentObj>().is_some() {
        vec!["percent"]
    } else if obj.downcast_ref::<CountObj>().is_some() {
        vec!["value"]
    } else if obj.downcast_ref::<RatioObj>().is_some() {
        vec!["ratio"]
    } else if obj.downcast_ref::<DeviceWrapperObj>().is_some() {
        vec!["device"]
    } else {
        Vec::new()
    }
}

fn get_attr(obj: &AnyObject, name: &str) -> Result<RetValue> {
    // Upstream's words, in the class Python's `__getattr__` turns into AttributeError.
    let missing = || {
        Error::classed(
            crate::error::ErrorKind::AttributeError,
            format!("{} object has no attributed {name}", type_key_of(obj.type_index())),
        )
    };
    if let Some(r) = obj.downcast_ref::<ReportObj>() {
        return Ok(match name {
            "calls" => r.calls().clone().into(),
            "device_metrics" => r.device_metrics().clone().into(),
            "configuration" => r.configuration().clone().into(),
            _ => return Err(missing()),
        });
    }
    if let Some(d) = obj.downcast_ref::<DeviceWrapperObj>() {
        return if name == "device" { Ok(RetValue::Device(d.device)) } else { Err(missing()) };
    }
    match (Metric::from_object(obj), name) {
        (Ok(Metric::Duration(v)), "microseconds")
        | (Ok(Metric::Percent(v)), "percent")
        | (Ok(Metric::Ratio(v)), "ratio") => Ok(RetValue::Float(v)),
        (Ok(Metric::Count(c)), "value") => Ok(RetValue::Int(c)),
        _ => Err(missing()),
    }
}
