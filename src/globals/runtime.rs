//! Threads and timing.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::backend::affinity::Mode;
use crate::backend::thread_pool;
use crate::error::Error;
use crate::packed::{ArrayObj, RetValue, StringObj};

pub(super) fn register(reg: &mut Register<'_>) {
    // The calling thread's last error's finer kind (ValueError, TypeError, KeyError, ...): the C
    // message names upstream's class, InternalError for the runtime's own failures.
    def(reg, "tvmrt.LastErrorKind", |_| Ok(RetValue::Str(crate::last_error::kind().to_string())));
    // Threads.
    def(reg, "runtime.NumThreads", |_| Ok(RetValue::Int(crate::backend::thread_pool::num_threads() as i64)));
    // (mode, threads[, cores as strings]), as upstream's.
    def(reg, "runtime.config_threadpool", |a| {
        let mode = Mode::from_code(a.int(0)?);
        let threads = usize::try_from(a.int(1)?).unwrap_or(0);
        let mut cores = Vec::new();
        if a.len() >= 3 {
            let listed = a.typed_object::<ArrayObj>(2, "Array of core numbers")?;
            for item in listed.items() {
                let text =
                    item.clone().downcast::<StringObj>().map_err(|_| Error::type_err("core numbers are strings"))?;
                let core = text.as_str().trim().parse::<usize>().map_err(|_| {
                    Error::value(format!("The CPU core information '{}' is not a number.", text.as_str()))
                })?;
                cores.push(core);
            }
        }
        thread_pool::configure(mode, threads, &cores)?;
        Ok(RetValue::None)
    });
}
