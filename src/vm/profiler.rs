//! What `runtime._VirtualMachineDebug`'s `profile` reports: upstream's `Report` of an invocation,
//! each kernel call (its name, device, duration, argument shapes, layout attributes and hash) and
//! each VM instruction that allocates, copies or loads a constant, with the invocation's total per
//! device.

#![forbid(unsafe_code)]

use crate::dlpack::DLDevice;
use crate::error::Result;
use crate::profiling::{self, call_metrics, device_name, Metric, Metrics, Report, Timer};
use crate::tensor::NDArray;

/// The calls of one profiled invocation.
#[derive(Default)]
pub struct Recorder {
    calls: Vec<Metrics>,
}

fn shapes(t: &NDArray) -> String {
    let dims: Vec<String> = t.shape().iter().map(i64::to_string).collect();
    format!("{}[{}]", t.dtype(), dims.join(", "))
}

impl Recorder {
    /// Starts timing a call on `device`.
    pub fn start(&mut self, device: DLDevice) -> Result<Timer> {
        Timer::start(device)
    }

    /// Ends a VM instruction's call begun at `started`.
    pub fn stop(&mut self, name: &str, device: DLDevice, started: Timer, extra: Option<(&str, String)>) -> Result<()> {
        let ns = started.stop()?;
        let mut m = call_metrics(name, ns as f64 / 1000.0, device);
        if let Some((key, value)) = extra {
            profiling::set(&mut m, key, Metric::Str(value));
        }
        self.calls.push(m);
        Ok(())
    }

    /// Ends a kernel's call begun at `started`: its argument shapes and the primitive's layout
    /// attributes and hash, as upstream records them.
    pub fn stop_call(
        &mut self,
        name: &str,
        device: DLDevice,
        started: Timer,
        args: &[crate::object::ObjRef<NDArray>],
        attrs: &[(String, String)],
    ) -> Result<()> {
        let ns = started.stop()?;
        let mut m = call_metrics(name, ns as f64 / 1000.0, device);
        for (k, v) in attrs {
            if k.contains("layout") {
                profiling::set(&mut m, k, Metric::Str(v.clone()));
            } else if k == "hash" {
                profiling::set(&mut m, "Hash", Metric::Str(v.clone()));
            }
        }
        let shapes: Vec<String> = args.iter().map(|t| shapes(t)).collect();
        profiling::set(&mut m, "Argument Shapes", Metric::Str(shapes.join(", ")));
        self.calls.push(m);
        Ok(())
    }

    /// The report: the calls with their share of the longest device total, the totals (`ns` per
    /// device), and the configuration.
    pub fn report(mut self, totals: &[(DLDevice, u64)]) -> Report {
        let longest = totals.iter().map(|&(_, ns)| ns).max().unwrap_or(0) as f64 / 1000.0;
        for call in &mut self.calls {
            if let Some(Metric::Duration(d)) = profiling::metric(call, "Duration (us)") {
                let percent = if longest > 0.0 { d / longest * 100.0 } else { 0.0 };
                profiling::set(call, "Percent", Metric::Percent(percent));
            }
        }
        let device_metrics =
            totals.iter().map(|&(d, ns)| (device_name(d), call_metrics("Total", ns as f64 / 1000.0, d))).collect();
        let configuration = vec![
            ("Number of threads".to_string(), Metric::Count(crate::backend::thread_pool::num_threads() as i64)),
            ("Executor".to_string(), Metric::Str("VM".into())),
        ];
        Report { calls: self.calls, device_metrics, configuration }
    }
}
