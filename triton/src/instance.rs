//! An instance of a model: one runner per build over the model's shared weights, and the execute
//! call: the requests of one call gathered into runs of the builds that serve them fastest, and
//! each run's outputs scattered back by request.

use crate::batch::{self, Span};
use crate::engine::Runner;
use crate::model::TvmModel;
use crate::request::Checked;
use crate::signature::TensorSpec;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tvm_runtime::backend::thread_pool::with_threads;
use tvm_runtime::object::ObjRef;
use tvm_runtime::tensor::NDArray;
use tvm_runtime::{Error, Result};

/// An output of one request: its position among the model's outputs, shape and bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub index: usize,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// An error for each of several requests that shared a failed run.
fn dup(e: &Error) -> Error {
    Error::new(e.kind(), e.to_string())
}

pub struct Instance {
    pub model: Arc<TvmModel>,
    /// Per build, this instance's runners ("lanes"): the first runs every request; with a batch
    /// axis there is one per core, so the runs of one batch's plan can go side by side on cores
    /// no other execute call is using (Triton hands a batch to one instance, which would
    /// otherwise run it on one thread while the others' cores idle).
    runners: Vec<Vec<Runner>>,
}

/// Execute calls in progress in this process, over every model: how many cores are taken.
static EXECUTING: AtomicUsize = AtomicUsize::new(0);

/// A run shorter than this (seconds) is not worth a thread of its own.
const PARALLEL_RUN_FLOOR: f64 = 1e-3;

/// A run's inputs: each tensor's shape and bytes, in the build's input order.
type Feed = Vec<(Vec<i64>, Vec<u8>)>;

/// A run's outputs, copied out of the runner (whose next run writes the same memory).
struct RunOutput {
    dtype: tvm_runtime::dlpack::DLDataType,
    shape: Vec<i64>,
    bytes: Vec<u8>,
}

impl Instance {
    pub fn new(model: Arc<TvmModel>) -> Result<Instance> {
        let lanes = if model.spec.max_batch_size > 0 && model.builds.iter().all(|b| b.fixed) {
            tvm_runtime::backend::thread_pool::max_concurrency().max(1)
        } else {
            1
        };
        let runners = model
            .builds
            .iter()
            .map(|b| (0..lanes).map(|_| b.runner(model.device, model.pool.as_ref())).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        let instance = Instance { model, runners };
        instance.measure()?;
        Ok(instance)
    }

    /// What a run of each build costs, measured once for the model (the least of a few runs on
    /// zeros): the plan picks builds by it. A lone build, or one without fixed shapes, has nothing
    /// to be compared with.
    fn measure(&self) -> Result<()> {
        if self.model.costs.get().is_some() {
            return Ok(());
        }
        if self.model.builds.len() == 1 {
            let _ = self.model.costs.set(vec![1.0]);
            return Ok(());
        }
        let mut costs = Vec::new();
        for (b, lanes) in self.model.builds.iter().zip(&self.runners) {
            let r = &lanes[0];
            if !b.fixed {
                costs.push(1.0);
                continue;
            }
            let feed: Feed = b
                .inputs
                .iter()
                .map(|t| Ok((t.shape.clone(), vec![0u8; tvm_runtime::dtype::tensor_bytes(&t.shape, t.dtype)?])))
                .collect::<Result<_>>()?;
            let mut best = f64::INFINITY;
            for _ in 0..4 {
                let start = std::time::Instant::now();
                self.run(r, b.inputs.as_slice(), &feed)?;
                best = best.min(start.elapsed().as_secs_f64());
            }
            costs.push(best);
        }
        if self.model.costs.set(costs).is_ok() && self.model.builds.len() > 1 {
            let shown: Vec<String> = self
                .model
                .builds
                .iter()
                .zip(self.model.costs.get().expect("just set"))
                .map(|(b, c)| format!("{} {:.3} ms", b.name, c * 1e3))
                .collect();
            crate::api::log(
                crate::api::LOG_INFO,
                &format!(
                    "model '{}': a run of each build costs {} (the batch plans follow these)",
                    self.model.name,
                    shown.join(", ")
                ),
            );
        }
        Ok(())
    }

    fn run(&self, r: &Runner, specs: &[TensorSpec], feed: &Feed) -> Result<Vec<ObjRef<NDArray>>> {
        let arrays = feed
            .iter()
            .zip(specs)
            .map(|((shape, bytes), t)| NDArray::from_bytes(shape, t.dtype, bytes))
            .collect::<Result<Vec<_>>>()?;
        with_threads(self.model.threads, || r.run(&arrays))
    }

    /// Answers `requests` (those that failed their check are `Err` already); the runs' span is
    /// timed into `compute` (start, end).
    pub fn execute(&self, requests: &[Result<Checked<'_>>], compute: &mut (u64, u64)) -> Vec<Result<Vec<Outgoing>>> {
        let mut answers: Vec<Result<Vec<Outgoing>>> =
            requests.iter().map(|r| r.as_ref().map(|_| Vec::new()).map_err(dup)).collect();
        // Requests whose inputs have the same shapes past the batch axis can share runs.
        let mut buckets: BTreeMap<&[Vec<i64>], Vec<usize>> = BTreeMap::new();
        for (i, r) in requests.iter().enumerate() {
            if let Ok(c) = r {
                buckets.entry(c.key.as_slice()).or_default().push(i);
            }
        }
        struct Executing;
        impl Drop for Executing {
            fn drop(&mut self) {
                EXECUTING.fetch_sub(1, Ordering::Relaxed);
            }
        }
        EXECUTING.fetch_add(1, Ordering::Relaxed);
        let _executing = Executing;
        compute.0 = crate::clock::now_ns();
        for members in buckets.values() {
            let groups: Vec<Vec<usize>> = if self.model.spec.max_batch_size > 0 {
                vec![members.clone()]
            } else {
                members.iter().map(|&i| vec![i]).collect()
            };
            for group in groups {
                let checked: Vec<&Checked<'_>> =
                    group.iter().map(|&i| requests[i].as_ref().expect("checked")).collect();
                match self.serve(&checked) {
                    Ok(outs) => {
                        for (&i, o) in group.iter().zip(outs) {
                            answers[i] = Ok(o);
                        }
                    }
                    Err(e) => {
                        for &i in &group {
                            answers[i] = Err(dup(&e));
                        }
                    }
                }
            }
        }
        compute.1 = crate::clock::now_ns();
        answers
    }

    /// Serves requests of one bucket (one shape past the batch axis): on the builds that take it.
    fn serve(&self, reqs: &[&Checked<'_>]) -> Result<Vec<Vec<Outgoing>>> {
        let m = &self.model;
        let batched = m.spec.max_batch_size > 0;
        let key = &reqs[0].key;
        // The builds that take these shapes: each input's shape past the batch axis matches.
        let fits = |b: &crate::engine::Build| {
            !b.fixed
                || b.inputs.iter().zip(&m.spec.feed).all(|(t, &i)| {
                    let shape = if batched { &t.shape[1..] } else { &t.shape[..] };
                    shape == key[i].as_slice()
                })
        };
        let candidates: Vec<usize> = (0..m.builds.len()).filter(|&k| fits(&m.builds[k])).collect();
        if candidates.is_empty() {
            let takes: Vec<String> = m
                .builds
                .iter()
                .map(|b| {
                    format!(
                        "{}: {}",
                        b.name,
                        b.inputs.iter().map(|t| format!("{:?}", t.shape)).collect::<Vec<_>>().join(" ")
                    )
                })
                .collect();
            return Err(Error::value(format!(
                "inputs of shapes {key:?}{} fit no build of the model ({})",
                if batched { " past the batch axis" } else { "" },
                takes.join("; ")
            )));
        }
        let rows: Vec<usize> = reqs.iter().map(|r| r.rows).collect();
        let total: usize = rows.iter().sum();
        let runs: Vec<(usize, usize)> = if m.builds[candidates[0]].fixed {
            let costs = m.costs.get().expect("measured when the instance was made");
            let batches: Vec<usize> = candidates.iter().map(|&k| m.batches[k]).collect();
            let picked: Vec<f64> = candidates.iter().map(|&k| costs[k]).collect();
            batch::plan(&batches, &picked, total).into_iter().map(|c| (candidates[c], batches[c])).collect()
        } else {
            // A VM takes the whole group at its own size.
            vec![(candidates[0], total)]
        };
        let layout = batch::spans(&rows, &runs.iter().map(|r| r.1).collect::<Vec<_>>());
        let mut outs: Vec<Vec<(Vec<i64>, Vec<u8>)>> = reqs.iter().map(|_| Vec::new()).collect();
        let one = |k: usize, lane: usize| -> Result<Vec<RunOutput>> {
            let (build, size) = runs[k];
            let feed = self.gather(reqs, build, size, &layout[k])?;
            let outputs = self.run(&self.runners[build][lane], &m.builds[build].inputs, &feed)?;
            Ok(outputs
                .iter()
                .map(|t| RunOutput { dtype: t.dtype(), shape: t.shape().to_vec(), bytes: t.to_vec() })
                .collect())
        };
        let lanes = self.free_lanes(&runs);
        let results: Vec<Result<Vec<RunOutput>>> = if lanes <= 1 {
            (0..runs.len()).map(|k| one(k, 0)).collect()
        } else {
            // Lane g takes runs g, g + lanes, ...: each on its own runner of the build.
            let count = runs.len();
            std::thread::scope(|scope| {
                let one = &one;
                let handles: Vec<_> = (0..lanes)
                    .map(|g| scope.spawn(move || (g..count).step_by(lanes).map(|k| (k, one(k, g))).collect::<Vec<_>>()))
                    .collect();
                let mut results: Vec<Option<Result<Vec<RunOutput>>>> = (0..count).map(|_| None).collect();
                for h in handles {
                    for (k, r) in h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
                        results[k] = Some(r);
                    }
                }
                results.into_iter().map(|r| r.expect("every run has a lane")).collect()
            })
        };
        for ((result, (_, size)), spans) in results.into_iter().zip(&runs).zip(&layout) {
            self.scatter(reqs, &result?, *size, spans, &mut outs)?;
        }
        Ok(reqs
            .iter()
            .zip(outs)
            .map(|(r, o)| {
                r.outputs
                    .iter()
                    .map(|&k| {
                        // A 0-d output (only a model without a batch axis has one) is [1] to
                        // Triton, as its config shows it: Triton has no scalars.
                        let shape = if o[k].0.is_empty() { vec![1] } else { o[k].0.clone() };
                        Outgoing { index: k, shape, bytes: o[k].1.clone() }
                    })
                    .collect()
            })
            .collect())
    }

    /// How many of a plan's runs to put side by side: one per core that no other execute call of
    /// the process is using, at most one per lane, and only for runs long enough to pay a thread.
    fn free_lanes(&self, runs: &[(usize, usize)]) -> usize {
        let lanes = self.runners.first().map_or(1, Vec::len);
        let costs = self.model.costs.get();
        let long = runs.iter().any(|(b, _)| costs.is_some_and(|c| c[*b] >= PARALLEL_RUN_FLOOR));
        if runs.len() < 2 || lanes < 2 || !self.model.parallel_runs.unwrap_or(long) {
            return 1;
        }
        let others = EXECUTING.load(Ordering::Relaxed).saturating_sub(1);
        let free = tvm_runtime::backend::thread_pool::max_concurrency().saturating_sub(others);
        free.min(lanes).min(runs.len()).max(1)
    }

    /// A run's inputs: the rows of `spans` laid into tensors of `size` rows (padding zeros).
    fn gather(&self, reqs: &[&Checked<'_>], build: usize, size: usize, spans: &[Span]) -> Result<Feed> {
        let m = &self.model;
        let b = &m.builds[build];
        let batched = m.spec.max_batch_size > 0;
        b.inputs
            .iter()
            .zip(&m.spec.feed)
            .map(|(t, &i)| {
                let first = reqs[spans[0].request];
                let mut shape = if batched { vec![size as i64] } else { Vec::new() };
                shape.extend(&first.key[i]);
                let row = first.row_bytes(i, t.dtype.element_bytes());
                let mut bytes = vec![0u8; row * if batched { size } else { 1 }];
                for s in spans {
                    let g = &reqs[s.request].inputs[i];
                    let dst = &mut bytes[s.at * row..(s.at + s.take) * row];
                    if !batch::copy_from_pieces(&g.pieces, s.first * row, dst) {
                        return Err(Error::internal(format!("input '{}': fewer bytes than checked", g.name)));
                    }
                }
                Ok((shape, bytes))
            })
            .collect()
    }

    /// A run's outputs, appended by rows to the requests' answers.
    fn scatter(
        &self,
        reqs: &[&Checked<'_>],
        results: &[RunOutput],
        size: usize,
        spans: &[Span],
        outs: &mut [Vec<(Vec<i64>, Vec<u8>)>],
    ) -> Result<()> {
        let m = &self.model;
        let batched = m.spec.max_batch_size > 0;
        if results.len() != m.spec.outputs.len() {
            return Err(Error::value(format!(
                "the model gave {} output(s), the config lists {}",
                results.len(),
                m.spec.outputs.len()
            )));
        }
        for (k, (t, want)) in results.iter().zip(&m.spec.outputs).enumerate() {
            if t.dtype != want.dtype {
                return Err(Error::type_err(format!(
                    "output {k} ('{}'): the model gave {}, the config declares {}",
                    want.name, t.dtype, want.dtype
                )));
            }
            let shape = &t.shape;
            if batched && shape.first() != Some(&(size as i64)) {
                return Err(Error::value(format!(
                    "output {k} ('{}'): shape {shape:?} does not lead with the run's batch of {size}",
                    want.name
                )));
            }
            let bytes = &t.bytes;
            let row = if batched { bytes.len() / size.max(1) } else { bytes.len() };
            for s in spans {
                let out = &mut outs[s.request];
                if out.len() <= k {
                    let mut full = shape.to_vec();
                    if batched {
                        full[0] = reqs[s.request].rows as i64;
                    }
                    out.push((full, Vec::with_capacity(row * reqs[s.request].rows)));
                }
                out[k].1.extend_from_slice(&bytes[s.at * row..(s.at + s.take) * row]);
            }
        }
        Ok(())
    }
}
