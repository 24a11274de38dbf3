//! The debug executor's extra functions (`tvm.graph_executor_debug.create`, factory
//! `debug_create`): per-node timing, per-node outputs and incremental execution, with upstream
//! 0.16's names and argument conventions.

#![forbid(unsafe_code)]

use super::functions::wrap;
use super::GraphExecutor;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::tensor::NDArray;
use crate::time_evaluator::{repeat_timed, Settings};

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

    /// Runs every operator once, in order, timing each: `(node, start since the first, duration)`.
    pub fn timed_run(&self) -> Result<Vec<(usize, std::time::Duration, std::time::Duration)>> {
        let mut st = self.lock();
        let t0 = std::time::Instant::now();
        let mut out = Vec::with_capacity(self.plan.ops.len());
        for (i, op) in self.plan.ops.iter().enumerate() {
            let start = std::time::Instant::now();
            st.run_ops(i..i + 1)?;
            // An operator's time on a device is until the device has done it.
            self.plan.sync()?;
            out.push((op.node, start - t0, start.elapsed()));
        }
        Ok(out)
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
        "profile" | "profile_rpc" => wrap(
            this,
            |_, _| {
                Err(Error::tvm(
                    "profile is not supported by this runtime: use run_individual, or `tvmrt profile` for a report and a trace",
                ))
            },
            "profile",
        ),
        _ => return None,
    })
}
