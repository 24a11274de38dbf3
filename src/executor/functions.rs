//! The executor's packed-function table, as upstream 0.16 names and calls it.

use super::{GraphExecutor, Key};
use crate::dlpack::DLDevice;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::module::ModuleArg;
use crate::object::ObjRef;
use crate::packed::{Args, ArrayObj, MapObj, PackedFunc, RetValue, ShapeTupleObj, StringObj};

pub const NAMES: &[&str] = &[
    "set_input",
    "set_input_zero_copy",
    "set_output_zero_copy",
    "get_output",
    "get_input",
    "get_num_outputs",
    "get_num_inputs",
    "get_input_index",
    "get_output_index",
    "get_input_info",
    "get_output_info",
    "run",
    "run_from_inputs",
    "load_params",
    "share_params",
    "get_memory_usage",
    "share_activations",
    "join_arena_pool",
    "load_params_from_file",
    "set_fold_weights",
    "set_strict_inputs",
    "prepare_params",
    "set_num_threads",
    "tvmrt.run_into",
];

/// Argument `i` as an input's or output's key: an index (the common case, decoded first) or a name.
#[inline]
fn key<'a>(args: &Args<'a>, i: usize) -> Result<Key<'a>> {
    match args.int_if_int(i).map(usize::try_from) {
        Some(Ok(index)) => Ok(Key::Index(index)),
        _ => other_key(args, i),
    }
}

/// A name, or the error an argument that is neither a name nor an index gets.
#[inline(never)]
fn other_key<'a>(args: &Args<'a>, i: usize) -> Result<Key<'a>> {
    if args.is_name(i) {
        return Ok(Key::Name(args.str(i)?));
    }
    let v = args.int(i)?;
    usize::try_from(v).map(Key::Index).map_err(|_| Error::index(format!("negative index {v}")))
}

/// Makes executor function `name` from `body`; the body is inlined, so a call costs one
/// indirect jump. The function shares the executor (and its module, which a body may hand out).
pub(crate) fn wrap<F>(this: &ObjRef<Module>, body: F, name: &'static str) -> ObjRef<PackedFunc>
where
    F: Fn(&GraphExecutor, &Args<'_>) -> Result<RetValue> + Send + Sync + 'static,
{
    let executor = this.shared_node::<GraphExecutor>().expect("functions are only made for executors");
    PackedFunc::native(move |args| body(&executor, args).map_err(|e| e.context(name)))
}

/// The executor function `name`, or `None` when there is no such function.
pub fn get(this: &ObjRef<Module>, name: &str) -> Option<ObjRef<PackedFunc>> {
    Some(match name {
        "set_input" => wrap(this, set_input, "set_input"),
        "set_input_zero_copy" => wrap(
            this,
            |ex, a| {
                a.expect_count("set_input_zero_copy", 2, 2)?;
                let Some(i) = target(ex, a, 0, false)? else {
                    return Ok(RetValue::None);
                };
                ex.set_input_zero_copy(i, a.zero_copy(1)?).map(Into::into)
            },
            "set_input_zero_copy",
        ),
        "set_output_zero_copy" => wrap(
            this,
            |ex, a| {
                a.expect_count("set_output_zero_copy", 2, 2)?;
                let Some(i) = target(ex, a, 0, true)? else {
                    return Ok(RetValue::None);
                };
                ex.set_output_zero_copy(i, a.zero_copy(1)?).map(Into::into)
            },
            "set_output_zero_copy",
        ),
        "get_output" => wrap(
            this,
            |ex, a| {
                a.expect_count("get_output", 1, 2)?;
                let i = ex.output_index(key(a, 0)?)?;
                if a.len() == 2 {
                    ex.copy_output_to(i, a.tensor(1)?).map(Into::into)
                } else {
                    ex.output(i).map(Into::into)
                }
            },
            "get_output",
        ),
        "get_input" => wrap(
            this,
            |ex, a| {
                a.expect_count("get_input", 1, 2)?;
                if a.len() == 2 {
                    // This runtime's form: a copy into the caller's tensor, which leaves a shared
                    // weight shared (the one-argument form hands out the memory to write through).
                    let i = ex.input_index(key(a, 0)?)?;
                    return ex.copy_input_to(i, a.tensor(1)?).map(Into::into);
                }
                // Upstream answers None for a negative index, as for an unknown name.
                if !a.is_name(0) && a.int(0)? < 0 {
                    return Ok(RetValue::None);
                }
                match key(a, 0)? {
                    // Upstream answers None for an unknown name; Python relies on it.
                    Key::Name(n) => match ex.plan.input_index(n) {
                        Some(i) => ex.input(i).map(Into::into),
                        None => Ok(RetValue::None),
                    },
                    Key::Index(i) => ex.input(i).map(Into::into),
                }
            },
            "get_input",
        ),
        "get_num_outputs" => wrap(this, |ex, _| Ok(RetValue::Int(ex.plan.num_outputs() as i64)), "get_num_outputs"),
        "get_num_inputs" => wrap(this, |ex, _| Ok(RetValue::Int(ex.plan.num_inputs() as i64)), "get_num_inputs"),
        "get_input_index" => wrap(
            this,
            |ex, a| {
                if !a.is_name(0) {
                    return Err(Error::type_err("Input key is not a string"));
                }
                Ok(RetValue::Int(ex.plan.input_index(a.str(0)?).map_or(-1, |i| i as i64)))
            },
            "get_input_index",
        ),
        "get_output_index" => wrap(
            this,
            |ex, a| {
                if !a.is_name(0) {
                    return Err(Error::type_err("Output key is not a string"));
                }
                Ok(RetValue::Int(ex.plan.output_index(a.str(0)?).map_or(-1, |i| i as i64)))
            },
            "get_output_index",
        ),
        "get_input_info" => wrap(this, |ex, _| Ok(input_info(ex).into()), "get_input_info"),
        "get_output_info" => wrap(this, |ex, _| Ok(output_info(ex).into()), "get_output_info"),
        "run" => wrap(this, |ex, _| ex.run().map(Into::into), "run"),
        "run_from_inputs" => wrap(this, run_from_inputs, "run_from_inputs"),
        "tvmrt.run_into" => wrap(this, run_into, "tvmrt.run_into"),
        "load_params" => wrap(this, |ex, a| ex.load_params(a.bytes(0)?).map(Into::into), "load_params"),
        "load_params_from_file" => wrap(
            this,
            |ex, a| {
                a.expect_count("load_params_from_file", 1, 1)?;
                // Mapped, the caller keeping the file unchanged: this function's contract.
                let (mapped, _) = ex.load_params_mapped(&a.mapped_file(0)?)?;
                Ok(RetValue::Int(mapped as i64))
            },
            "load_params_from_file",
        ),
        "prepare_params" => wrap(
            this,
            |ex, a| {
                a.expect_count("prepare_params", 1, 1)?;
                ex.prepared_params(a.bytes(0)?).map(RetValue::Bytes)
            },
            "prepare_params",
        ),
        "share_params" => wrap(
            this,
            |ex, a| {
                a.expect_count("share_params", 2, 2)?;
                let other = a.module(0)?;
                ex.share_params(executor_of(&other)?, a.bytes(1)?).map(Into::into)
            },
            "share_params",
        ),
        "get_memory_usage" => wrap(
            this,
            |ex, _| {
                let m = ex.memory_usage();
                let ws = crate::backend::workspace::pooled_bytes();
                // Only after a prepared params file was mapped: what became of its derived weights.
                let prepared = ex
                    .prepared_params_use()
                    .map(|s| format!(", \"prepared_params\": {}", serde_json::Value::String(s)))
                    .unwrap_or_default();
                let pool = m.pool.map(|p| format!(", \"pool\": {}", p.to_json())).unwrap_or_default();
                Ok(RetValue::Str(format!(
                    "{{\"device\": \"{}({})\", \"weights_owned\": {}, \"weights_shared\": {}, \"weights_mapped\": {}, \"weights_mirrored\": {}, \"weights_derived\": {}, \"activations\": {}, \"activations_shared\": {}, \"activation_arena\": {}, \"activation_bound\": {}, \"ops_folded\": {}, \"ops_total\": {}, \"workspace\": {}{prepared}{pool}}}",
                    crate::device::type_name(m.device.device_type), m.device.device_id,
                    m.weights_owned, m.weights_shared, m.weights_mapped, m.weights_mirrored, m.weights_derived, m.activations,
                    m.activations_shared, m.activation_arena, m.activation_bound, m.ops_folded, m.ops_total, ws
                )))
            },
            "get_memory_usage",
        ),
        "set_strict_inputs" => wrap(
            this,
            |ex, a| {
                a.expect_count("set_strict_inputs", 1, 1)?;
                ex.set_strict_inputs(a.int(0)? != 0);
                Ok(RetValue::None)
            },
            "set_strict_inputs",
        ),
        "set_num_threads" => wrap(
            this,
            |ex, a| {
                a.expect_count("set_num_threads", 1, 1)?;
                let n = a.int(0)?;
                let n = usize::try_from(n).map_err(|_| Error::value(format!("set_num_threads({n}): 0 or more")))?;
                ex.lock().num_threads = n;
                Ok(RetValue::None)
            },
            "set_num_threads",
        ),
        "set_fold_weights" => wrap(
            this,
            |ex, a| {
                a.expect_count("set_fold_weights", 1, 1)?;
                ex.set_fold_weights(a.int(0)? != 0).map(Into::into)
            },
            "set_fold_weights",
        ),
        "share_activations" => wrap(
            this,
            |ex, a| {
                a.expect_count("share_activations", 1, 1)?;
                let other = a.module(0)?;
                ex.share_activations(executor_of(&other)?).map(Into::into)
            },
            "share_activations",
        ),
        "join_arena_pool" => wrap(
            this,
            |ex, a| {
                a.expect_count("join_arena_pool", 1, 1)?;
                ex.join_pool(&super::pool::PoolModule::of(&a.module(0)?)?).map(Into::into)
            },
            "join_arena_pool",
        ),
        _ => return None,
    })
}

/// The executor of a module argument (the function's name is added by `wrap`).
fn executor_of(m: &ObjRef<Module>) -> Result<&GraphExecutor> {
    m.node::<GraphExecutor>()
        .ok_or_else(|| Error::type_err(format!("the module is a {}, not a GraphExecutor", m.type_key())))
}

/// The input (or output) argument `k` names, as upstream's setters resolve it: `None` for a name
/// that names none, which they skip (an error in strict mode). Outputs are named
/// `"<node>:<output index>"`, as upstream's output map names them.
fn target(ex: &GraphExecutor, a: &Args<'_>, k: usize, output: bool) -> Result<Option<usize>> {
    let key = match key(a, k)? {
        Key::Name(n) => {
            let found = if output { ex.plan.output_keys.get(n).copied() } else { ex.plan.input_index(n) };
            match found {
                Some(i) => Key::Index(i),
                None if !ex.strict_inputs() => return Ok(None),
                None if output => {
                    return Err(Error::key(format!("no output named '{n}' (use \"<node>:<output index>\")")))
                }
                // The lookup below reports it.
                None => Key::Name(n),
            }
        }
        key => key,
    };
    if output { ex.output_index(key) } else { ex.input_index(key) }.map(Some)
}

fn set_input(ex: &GraphExecutor, a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("set_input", 2, 2)?;
    let Some(i) = target(ex, a, 0, false)? else {
        return Ok(RetValue::None);
    };
    if a.code(1) == crate::dlpack::kTVMBytes {
        return ex.set_input_bytes(i, a.bytes(1)?).map(Into::into);
    }
    ex.set_input(i, a.tensor(1)?).map(Into::into)
}

/// This runtime's request in one call, for hosts whose every call costs (Python's ctypes):
/// `(n, [input key, tensor] * n, output tensors...)` sets the n inputs as `set_input` does, runs,
/// and copies output k into the k-th output tensor given (as `get_output(k, tensor)`; fewer
/// tensors than outputs copy the first ones). The same checks as those calls, in that order.
fn run_into(ex: &GraphExecutor, a: &Args<'_>) -> Result<RetValue> {
    let n = a.int(0)?;
    let n = usize::try_from(n).ok().filter(|&n| n.checked_mul(2).is_some_and(|m| m < a.len())).ok_or_else(|| {
        Error::type_err(format!(
            "takes (n, [input key, tensor] * n, output tensors...): n = {n} with {} arguments",
            a.len()
        ))
    })?;
    let outputs = a.len() - (1 + 2 * n);
    if outputs > ex.plan.num_outputs() {
        return Err(Error::index(format!("{outputs} output tensors given: the graph has {}", ex.plan.num_outputs())));
    }
    for k in 0..n {
        let i = ex.input_index(key(a, 1 + 2 * k)?)?;
        ex.set_input(i, a.tensor(2 + 2 * k)?)?;
    }
    ex.run()?;
    for k in 0..outputs {
        ex.copy_output_to(k, a.tensor(1 + 2 * n + k)?)?;
    }
    Ok(RetValue::None)
}

fn run_from_inputs(ex: &GraphExecutor, a: &Args<'_>) -> Result<RetValue> {
    if a.len() < 2 || a.len() % 2 != 0 {
        return Err(Error::type_err(
            "run_from_inputs takes (dev_type, dev_id, [name or index, tensor]...): an even count",
        ));
    }
    let device = DLDevice { device_type: a.int32(0)?, device_id: a.int32(1)? };
    for k in (2..a.len()).step_by(2) {
        // Upstream fails on an unknown name here, unlike `set_input`.
        let i = ex.input_index(key(a, k)?)?;
        ex.set_input(i, a.tensor(k + 1)?)?;
    }
    ex.run()?;
    let outputs = (0..ex.plan.num_outputs())
        .map(|i| {
            let view = ex.output(i)?;
            Ok(crate::tensor::NDArray::copy_of(view.raw(), device)?.into_any())
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ArrayObj::new(outputs).into())
}

fn info(items: impl Iterator<Item = (String, crate::dlpack::DLDataType, Vec<i64>)>) -> ObjRef<MapObj> {
    let (mut shapes, mut dtypes) = (Vec::new(), Vec::new());
    for (name, dtype, shape) in items {
        shapes.push((StringObj::new(&name).into_any(), ShapeTupleObj::new(&shape).into_any()));
        dtypes.push((StringObj::new(&name).into_any(), StringObj::new(&dtype.to_string()).into_any()));
    }
    MapObj::from_str_pairs(vec![("shape", MapObj::new(shapes).into_any()), ("dtype", MapObj::new(dtypes).into_any())])
}

fn input_info(ex: &GraphExecutor) -> ObjRef<MapObj> {
    let params = ex.lock().param_names.clone();
    let plan = &ex.plan;
    info((0..plan.num_inputs()).filter(|&i| !params.contains(plan.input_name(i))).map(|i| {
        let e = &plan.graph.entries[plan.input_entries[i]];
        (plan.input_name(i).to_string(), e.dtype, e.shape.to_vec())
    }))
}

fn output_info(ex: &GraphExecutor) -> ObjRef<MapObj> {
    let plan = &ex.plan;
    info((0..plan.num_outputs()).map(|i| {
        let e = &plan.graph.entries[plan.output_entries[i]];
        (plan.output_name(i).to_string(), e.dtype, e.shape.to_vec())
    }))
}
