//! A model as Triton serves it: its builds, loaded once and shared by every instance, the spec
//! its config and its artefact agree on, and the pool of activation arenas its runs draw from.

use crate::config::{self, Spec};
use crate::engine::Build;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::pool::ArenaPool;
use tvm_runtime::{Error, Result};

pub struct TvmModel {
    pub name: String,
    pub builds: Vec<Build>,
    pub spec: Spec,
    pub device: DLDevice,
    /// The graph builds' activation arenas: as many as runs in flight (one per instance, and a
    /// batch's runs side by side on idle cores), each of the largest build's size.
    pub pool: Option<Arc<ArenaPool>>,
    /// Kernel threads per run (0: the process's pool, see `threads_for`).
    pub threads: usize,
    /// Rows a run of each build takes (fixed builds with a batch axis; else 1).
    pub batches: Vec<usize>,
    /// What a run of each build costs (seconds), measured by the first instance.
    pub costs: OnceLock<Vec<f64>>,
    /// Whether a batch's runs may go side by side on idle cores: `Some(true)` always,
    /// `Some(false)` never, `None` when they are long enough to pay a thread (the config's
    /// `parallel_batch_runs`: always, off, auto).
    pub parallel_runs: Option<bool>,
}

/// Kernel threads per run: the config's `num_threads` parameter, else 0: the process's pool,
/// which one run at a time launches on while the others run their kernels on their own threads
/// (so a run alone uses every core, and N runs in flight use N threads plus the pool's).
fn threads_for(config: &Value) -> Result<usize> {
    match config::parameter(config, "num_threads") {
        Some(t) => t
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::value(format!("parameter num_threads '{t}': a count of 1 or more"))),
        None => Ok(0),
    }
}

impl TvmModel {
    /// Loads the builds in `version_dir` and reconciles `config` with them, first filling in what
    /// it leaves out when `auto_complete` (the returned flag says whether it changed).
    pub fn load(name: &str, version_dir: &Path, config: &mut Value, auto_complete: bool) -> Result<(TvmModel, bool)> {
        let device = DLDevice::CPU;
        let prepare = match config::parameter(config, "prepare_weights").as_deref().map(str::trim) {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => return Err(Error::value(format!("parameter prepare_weights '{other}': true or false"))),
        };
        let mut builds: Vec<Build> = Vec::new();
        for (build_name, dir) in crate::artefact::builds(version_dir)? {
            let b = Build::load(&build_name, &dir, device, builds.first(), prepare)?;
            builds.push(b);
        }
        if builds.iter().any(|b| b.fixed) && builds.iter().any(|b| !b.fixed) {
            return Err(Error::value(format!(
                "{}: a Relay VM build beside graph or AOT builds; a VM model runs any batch on its own",
                version_dir.display()
            )));
        }
        if !builds[0].fixed && builds.len() > 1 {
            return Err(Error::value(format!(
                "{}: {} Relay VM builds; one executable serves every shape it accepts",
                version_dir.display(),
                builds.len()
            )));
        }
        let changed = auto_complete && config::auto_complete(config, &builds)?;
        let spec = config::reconcile(config, &builds)?;
        let batches = builds
            .iter()
            .map(|b| if spec.max_batch_size > 0 { config::build_batch(b).map_or(1, |n| n.max(1) as usize) } else { 1 })
            .collect();
        let pool = if builds.iter().any(Build::is_graph) {
            // A run in flight per instance, and a batch's runs side by side on the idle cores.
            let cores = tvm_runtime::backend::thread_pool::max_concurrency().max(1);
            Some(ArenaPool::new(device, config::instance_count(config) + cores - 1)?)
        } else {
            None
        };
        let threads = threads_for(config)?;
        let parallel_runs = match config::parameter(config, "parallel_batch_runs").as_deref().map(str::trim) {
            None | Some("auto") => None,
            Some("always") => Some(true),
            Some("off") => Some(false),
            Some(other) => {
                return Err(Error::value(format!("parameter parallel_batch_runs '{other}': auto, always or off")))
            }
        };
        let model = TvmModel {
            name: name.to_string(),
            builds,
            spec,
            device,
            pool,
            threads,
            batches,
            costs: OnceLock::new(),
            parallel_runs,
        };
        Ok((model, changed))
    }

    /// One line for the log: what was loaded and how it is shared.
    pub fn describe(&self) -> String {
        let builds: Vec<String> = self
            .builds
            .iter()
            .zip(&self.batches)
            .map(|(b, n)| {
                if self.spec.max_batch_size > 0 && b.fixed {
                    format!("{} (batch {n})", b.name)
                } else {
                    b.name.clone()
                }
            })
            .collect();
        format!(
            "model '{}' ({}): {} build(s) [{}], max_batch_size {}, kernel threads per run: {}; every instance \
             shares one copy of the weights",
            self.name,
            self.builds[0].kind(),
            self.builds.len(),
            builds.join(", "),
            self.spec.max_batch_size,
            if self.threads == 0 { "the process's pool".to_string() } else { self.threads.to_string() }
        )
    }
}
