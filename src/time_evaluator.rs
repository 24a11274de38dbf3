//! `runtime.RPCTimeEvaluator`: times a function as TVM's `time_evaluator` and `benchmark` expect,
//! returning `repeat` doubles (seconds per call) as bytes.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::module::Module;
use crate::module::ModuleArg;
use crate::packed::{registry, Args, PackedFunc, RetValue};
use std::time::{Duration, Instant};

/// How to time: TVM's time-evaluator parameters.
#[derive(Clone, Debug)]
pub struct Settings {
    pub number: u64,
    pub repeat: u64,
    pub min_repeat_ms: f64,
    pub limit_zero_time_iterations: u64,
    pub cooldown_interval_ms: u64,
    pub repeats_to_cooldown: u64,
    pub cache_flush_bytes: usize,
}

fn non_negative(a: &Args<'_>, i: usize, what: &str) -> Result<u64> {
    u64::try_from(a.int(i)?).map_err(|_| Error::value(format!("{what} must not be negative")))
}

impl Settings {
    /// Reads `number, repeat, min_repeat_ms, limit_zero_time_iterations, cooldown_interval_ms,
    /// repeats_to_cooldown` from arguments `at..at + 6`.
    pub fn from_args(a: &Args<'_>, at: usize) -> Result<Settings> {
        Ok(Settings {
            number: non_negative(a, at, "number")?.max(1),
            repeat: non_negative(a, at + 1, "repeat")?.max(1),
            min_repeat_ms: non_negative(a, at + 2, "min_repeat_ms")? as f64,
            limit_zero_time_iterations: non_negative(a, at + 3, "limit_zero_time_iterations")?,
            cooldown_interval_ms: non_negative(a, at + 4, "cooldown_interval_ms")?,
            repeats_to_cooldown: non_negative(a, at + 5, "repeats_to_cooldown")?.max(1),
            cache_flush_bytes: 0,
        })
    }
}

/// `(module|None, func_name, dev_type, dev_id, number, repeat, min_repeat_ms,
/// limit_zero_time_iterations, cooldown_interval_ms, repeats_to_cooldown, [cache_flush_bytes,]
/// f_preproc_name)`.
pub fn create(a: &Args<'_>) -> Result<RetValue> {
    if a.len() != 11 && a.len() != 12 {
        return Err(Error::type_err(format!("expects 11 or 12 arguments, {} given", a.len())));
    }
    let name = a.str(1)?;
    let func = if a.code(0) == crate::dlpack::kTVMNullptr {
        registry::get(name)
    } else {
        Module::get_function(&a.module(0)?, name, true)?
    }
    .ok_or_else(|| Error::attribute(format!("no function '{name}' to time")))?;
    let device = crate::dlpack::DLDevice { device_type: a.int32(2)?, device_id: a.int32(3)? };
    // Device work is queued: each timed round ends when the device has finished it, as upstream's.
    let api = crate::device::api_of(device)?;
    let mut s = Settings::from_args(a, 4)?;
    if a.len() == 12 {
        s.cache_flush_bytes = non_negative(a, 10, "cache_flush_bytes")? as usize;
    }
    let preproc_name = a.str(a.len() - 1)?;
    let preproc = if preproc_name.is_empty() {
        None
    } else {
        Some(
            registry::get(preproc_name)
                .ok_or_else(|| Error::attribute(format!("no preprocessing function '{preproc_name}'")))?,
        )
    };
    let sync = move || api.sync(device.device_id);
    Ok(PackedFunc::native(move |args| measure(&func, preproc.as_ref(), &s, &sync, args)).into())
}

fn measure(
    func: &PackedFunc,
    preproc: Option<&crate::object::ObjRef<PackedFunc>>,
    s: &Settings,
    sync: &dyn Fn() -> Result<()>,
    args: &Args<'_>,
) -> Result<RetValue> {
    func.call(args)?;
    sync()?;
    let times = repeat_timed(
        s,
        || preproc.map_or(Ok(()), |p| p.call(args).map(|_| ())).and_then(|_| sync()),
        || func.call(args).map(|_| ()),
        sync,
    )?;
    Ok(RetValue::Bytes(times.iter().flat_map(|t| t.to_ne_bytes()).collect()))
}

/// TVM's timing loop: `repeat` rounds of `number` calls (grown until a round lasts
/// `min_repeat_ms`), each giving seconds per call. `before_round` runs untimed before each round;
/// `after_calls` ends each timed stretch (waiting for a device).
pub fn repeat_timed(
    s: &Settings,
    mut before_round: impl FnMut() -> Result<()>,
    mut call: impl FnMut() -> Result<()>,
    after_calls: &dyn Fn() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut flush = (vec![1u8; s.cache_flush_bytes], vec![0u8; s.cache_flush_bytes]);
    let mut number = s.number;
    let mut out = Vec::with_capacity(s.repeat as usize);
    for round in 0..s.repeat {
        before_round()?;
        let mut zero_times = 0;
        let per_call = loop {
            if s.cache_flush_bytes > 0 {
                flush.1.copy_from_slice(&flush.0);
                std::hint::black_box(&flush.1);
            }
            let start = Instant::now();
            for _ in 0..number {
                call()?;
            }
            after_calls()?;
            let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
            if elapsed_ms == 0.0 {
                zero_times += 1;
            }
            let enough =
                elapsed_ms >= s.min_repeat_ms || (elapsed_ms == 0.0 && zero_times >= s.limit_zero_time_iterations);
            if enough {
                break elapsed_ms / 1e3 / number as f64;
            }
            let per_call_ms = (elapsed_ms / number as f64).max(1e-9);
            number = ((s.min_repeat_ms / per_call_ms) as u64 + 1).max((number as f64 * 1.618) as u64);
        };
        out.push(per_call);
        if s.cooldown_interval_ms > 0 && (round + 1) % s.repeats_to_cooldown == 0 {
            std::thread::sleep(Duration::from_millis(s.cooldown_interval_ms));
        }
    }
    Ok(out)
}
