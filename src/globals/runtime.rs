//! Threads and timing.

#![forbid(unsafe_code)]

use super::{def, Register};
use crate::packed::RetValue;

pub(super) fn register(reg: &mut Register<'_>) {
    def(reg, "runtime.RPCTimeEvaluator", crate::time_evaluator::create);

    // Threads.
    def(reg, "runtime.NumThreads", |_| Ok(RetValue::Int(crate::backend::thread_pool::num_threads() as i64)));
    def(reg, "runtime.config_threadpool", |a| {
        let n = a.int(1)?;
        crate::backend::thread_pool::configure(usize::try_from(n).unwrap_or(0));
        Ok(RetValue::None)
    });
}
