//! The debug executor's extra functions (`tvm.graph_executor_debug.create`, factory
//! `debug_create`): per-node timing, per-node outputs and incremental execution, with upstream
//! 0.16's names and argument conventions.

#![forbid(unsafe_code)]

use super::functions::wrap;
use super::GraphExecutor;
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::graph::NodeKind;
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::profiling::{self, device_name, Metric, Report, Timer};
use crate::tensor::NDArray;
use crate::time_evaluator::{repeat_timed, Settings};

/// A profile's row for one timed stretch: name, duration, one call, device.
use profiling::call_metrics as frame;

pub const NAMES: &[&str] = &[
    "run_individual",
    "run_individual_node",
    "debug_get_output",
    "execute_node",
    "get_node_output",
    "profile",
    "profile_rpc",
];

impl GraphExecutor {
    fn check_node(&self, node: i64) -> Result<usize> {
        usize::try_from(node).ok().filter(|&n| n < self.plan.graph.nodes.len()).ok_or_else(|| {
            Error::index(format!("node index {node} out of range ({} nodes)", self.plan.graph.nodes.len()))
        })
    }

    /// Operators of nodes `0..=node`, as a range of op indices.
    fn ops_through(&self, node: usize) -> std::ops::Range<usize> {
        0..self.plan.ops.partition_point(|op| op.node <= node)
    }

    /// Seconds per call of node `node`'s operator, `s.repeat` times (zeros for nodes without one).
    pub fn time_node(&self, node: usize, s: &Settings) -> Result<Vec<f64>> {
        let Some(op) = self.plan.ops.iter().position(|o| o.node == node) else {
            return Ok(vec![0.0; s.repeat as usize]);
        };
        let mut st = self.lock();
        repeat_timed(s, || Ok(()), || st.run_ops(op..op + 1), &|| self.plan.sync())
    }

    /// Upstream's `profile`: three warm-up runs, then one run with every operator timed on the
    /// device of its first output (`profiling::Timer`: the CPU's clock; on a device, the host's
    /// clock with the device synchronised around each operator) within a timed run per device
    /// ("Total"). Each call records its function's name, duration, device, argument shapes, the
    /// node's layout attributes and hash, and its share of the longest total.
    pub fn profile(&self) -> Result<Report> {
        for _ in 0..3 {
            self.run()?;
        }
        self.profiled_run().map(|(report, _)| report)
    }

    /// One profiled run: its report, and when each operator (by node) started, in nanoseconds
    /// from the run's start (a timeline, for traces).
    pub fn profiled_run(&self) -> Result<(Report, Vec<(usize, u64)>)> {
        let plan = &self.plan;
        let mut st = self.lock();
        let start = std::time::Instant::now();
        let totals = plan.devices.iter().map(|&d| Ok((d, Timer::start(d)?))).collect::<Result<Vec<_>>>()?;
        // Only the clock is read while the totals run; the calls' metrics are made afterwards.
        let mut timed = Vec::with_capacity(plan.ops.len());
        st.run_each(|i, run| {
            let device = plan.entry_device[plan.graph.entry_id(plan.ops[i].node, 0)];
            let timer = Timer::start(device)?;
            let at = start.elapsed().as_nanos() as u64;
            run()?;
            timed.push((i, device, at, timer.stop()?));
            Ok(())
        })?;
        drop(st);
        let ends = totals.iter().rev().map(|(_, t)| t.stop()).collect::<Result<Vec<_>>>()?;
        let timeline = timed.iter().map(|&(i, _, at, _)| (plan.ops[i].node, at)).collect();
        let mut calls: Vec<_> = timed.into_iter().map(|(i, device, _, ns)| self.call_metrics(i, device, ns)).collect();
        let device_metrics: Vec<_> = totals
            .iter()
            .zip(ends.iter().rev())
            .map(|((device, _), &ns)| (device_name(*device), frame("Total", ns as f64 / 1000.0, *device)))
            .collect();
        let longest = device_metrics
            .iter()
            .filter_map(|(_, m)| match profiling::metric(m, "Duration (us)") {
                Some(Metric::Duration(d)) => Some(*d),
                _ => None,
            })
            .fold(0.0, f64::max);
        for call in &mut calls {
            if let Some(Metric::Duration(d)) = profiling::metric(call, "Duration (us)") {
                let percent = if longest > 0.0 { d / longest * 100.0 } else { 0.0 };
                profiling::set(call, "Percent", Metric::Percent(percent));
            }
        }
        let configuration = vec![
            ("Number of threads".to_string(), Metric::Count(crate::backend::thread_pool::num_threads() as i64)),
            ("Executor".to_string(), Metric::Str("Graph".into())),
        ];
        Ok((Report { calls, device_metrics, configuration }, timeline))
    }

    /// What a profile records of operator `i`'s call.
    fn call_metrics(&self, i: usize, device: DLDevice, ns: u64) -> profiling::Metrics {
        let plan = &self.plan;
        let op = &plan.ops[i];
        let node = &plan.graph.nodes[op.node];
        let NodeKind::Op(attrs) = &node.kind else { unreachable!("operators are op nodes") };
        let mut m = frame(&attrs.func_name, ns as f64 / 1000.0, device);
        for (key, value) in &attrs.extra {
            if key.contains("layout") {
                profiling::set(&mut m, key, Metric::Str(value.clone()));
            } else if key == "hash" {
                profiling::set(&mut m, "Hash", Metric::Str(value.clone()));
            }
        }
        let shapes: Vec<String> = op
            .args
            .iter()
            .map(|&e| {
                let entry = &plan.graph.entries[e];
                let dims: Vec<String> = entry.shape.iter().map(i64::to_string).collect();
                format!("{}[{}]", entry.dtype, dims.join(", "))
            })
            .collect();
        profiling::set(&mut m, "Argument Shapes", Metric::Str(shapes.join(", ")));
        m
    }

    /// Runs nodes up to `node` (inclusive), resuming after the last one executed when possible.
    pub fn execute_node(&self, node: usize) -> Result<()> {
        let mut st = self.lock();
        let start = match st.last_executed {
            Some(last) if last < node => self.ops_through(last).end,
            Some(last) if last == node => return Ok(()),
            _ => 0,
        };
        st.last_executed = None;
        st.run_ops(start..self.ops_through(node).end)?;
        st.last_executed = Some(node);
        Ok(())
    }

    /// A copy of output `index` of `node`, which must be the node executed last.
    pub fn node_output(&self, node: usize, index: usize) -> Result<ObjRef<NDArray>> {
        let mut st = self.lock();
        if st.last_executed != Some(node) {
            return Err(Error::value(format!(
                "get_node_output: node {node} is not the last executed node ({:?}); call execute_node first",
                st.last_executed
            )));
        }
        let g = &self.plan.graph;
        if index >= g.num_node_outputs(node) {
            return Err(Error::index(format!(
                "node {node} has {} outputs, not {}",
                g.num_node_outputs(node),
                index + 1
            )));
        }
        st.entry_view(g.entry_id(node, index))?.deep_copy()
    }
}

fn node_arg(ex: &GraphExecutor, a: &Args<'_>, i: usize) -> Result<usize> {
    if a.is_name(i) {
        let name = a.str(i)?;
        return ex
            .plan
            .graph
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| Error::key(format!("no node named '{name}'")));
    }
    ex.check_node(a.int(i)?)
}

/// The debug function `name`, or `None`.
pub fn get(this: &ObjRef<Module>, name: &str) -> Option<ObjRef<PackedFunc>> {
    Some(match name {
        "run_individual" => wrap(
            this,
            |ex, a| {
                a.expect_count("run_individual", 6, 6)?;
                let s = Settings::from_args(a, 0)?;
                ex.run()?;
                let nodes = ex.plan.graph.nodes.len();
                let mut out = (nodes as i64).to_ne_bytes().to_vec();
                for n in 0..nodes {
                    for t in ex.time_node(n, &s)? {
                        out.extend_from_slice(&(if t.is_nan() { 0.0 } else { t }).to_ne_bytes());
                    }
                }
                Ok(RetValue::Bytes(out))
            },
            "run_individual",
        ),
        "run_individual_node" => wrap(
            this,
            |ex, a| {
                a.expect_count("run_individual_node", 7, 7)?;
                let node = ex.check_node(a.int(0)?)?;
                let s = Settings::from_args(a, 1)?;
                Ok(RetValue::Bytes(ex.time_node(node, &s)?.iter().flat_map(|t| t.to_ne_bytes()).collect()))
            },
            "run_individual_node",
        ),
        "debug_get_output" => wrap(
            this,
            |ex, a| {
                a.expect_count("debug_get_output", 1, 2)?;
                let node = node_arg(ex, a, 0)?;
                let mut st = ex.lock();
                st.run_ops(ex.ops_through(node))?;
                // As upstream, the node index doubles as the entry id (equal for graphs whose nodes
                // all have one output, as Relay's inputs and fused ops mostly do).
                let eid = node.min(ex.plan.graph.num_entries().saturating_sub(1));
                if a.len() == 2 && a.code(1) != crate::dlpack::kTVMNullptr {
                    st.copy_entry_to(eid, a.tensor(1)?)?;
                    Ok(RetValue::None)
                } else {
                    Ok(st.entry_view(eid)?.into())
                }
            },
            "debug_get_output",
        ),
        "execute_node" => {
            wrap(this, |ex, a| ex.execute_node(ex.check_node(a.int(0)?)?).map(Into::into), "execute_node")
        }
        "get_node_output" => wrap(
            this,
            |ex, a| {
                a.expect_count("get_node_output", 2, 2)?;
                let node = ex.check_node(a.int(0)?)?;
                let index = usize::try_from(a.int(1)?).map_err(|_| Error::index("negative output index"))?;
                ex.node_output(node, index).map(Into::into)
            },
            "get_node_output",
        ),
        "profile" => wrap(
            this,
            |ex, a| {
                a.expect_count("profile", 0, 1)?;
                // Metric collectors (PAPI) are a build option upstream; this runtime has none.
                if let Some(collectors) = a.object(0).ok().flatten() {
                    let list = collectors
                        .downcast_ref::<crate::packed::ArrayObj>()
                        .ok_or_else(|| Error::type_err("collectors must be an Array of MetricCollector"))?;
                    if let Some(c) = list.items().first() {
                        return Err(Error::value(format!(
                            "metric collector {} is not available in this runtime: it profiles durations only (no PAPI)",
                            crate::object::type_key_of(c.type_index())
                        )));
                    }
                }
                Ok(ex.profile()?.to_object().into())
            },
            "profile",
        ),
        // A report cannot cross RPC: its JSON does, and the host reads it with FromJSON.
        "profile_rpc" => wrap(this, |ex, _| Ok(RetValue::Str(profiling::json::to_json(&ex.profile()?))), "profile_rpc"),
        _ => return None,
    })
}
