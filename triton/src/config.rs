//! The model's `config.pbtxt` (as Triton's JSON) against its builds: filled in where it is silent
//! (auto-complete), refused where it disagrees, and turned into what requests are checked against.

use crate::engine::Build;
use crate::signature::{config_type, from_config_type, TensorSpec};
use serde_json::{json, Value};
use tvm_runtime::{Error, Result};

/// What the model serves, in the config's terms: requests are checked against it.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// 0: requests carry no batch axis; else the largest batch a request or a batch of them has.
    pub max_batch_size: usize,
    /// The inputs, in the config's order; shapes without the batch axis, -1 along open axes.
    pub inputs: Vec<TensorSpec>,
    /// The outputs by position (the k-th of the config is the model's k-th), any names.
    pub outputs: Vec<TensorSpec>,
    /// For each input a build takes (in its order), the config's input.
    pub feed: Vec<usize>,
}

/// A config's number as Triton writes it (int64s are JSON strings there).
fn number(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// `max_batch_size` of the config (0 when absent).
pub fn max_batch_size(config: &Value) -> Result<usize> {
    match config.get("max_batch_size") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => number(v)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::value(format!("max_batch_size {v}: a count of 0 or more"))),
    }
}

/// A string parameter of the config (`parameters { key: "num_threads" value: { string_value: "2" } }`).
pub fn parameter(config: &Value, key: &str) -> Option<String> {
    let v = config.get("parameters")?.get(key)?;
    v.get("string_value").and_then(Value::as_str).map(str::to_string)
}

/// The instances the config asks for in all: the sum of its groups' counts (1 when it has none).
pub fn instance_count(config: &Value) -> usize {
    let groups = config.get("instance_group").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    groups.iter().map(|g| g.get("count").and_then(number).map_or(1, |c| c.max(0) as usize)).sum::<usize>().max(1)
}

fn tensors(config: &Value, key: &str) -> Result<Vec<TensorSpec>> {
    let Some(list) = config.get(key) else { return Ok(Vec::new()) };
    let list = list.as_array().ok_or_else(|| Error::value(format!("{key}: not a list")))?;
    list.iter()
        .map(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let data_type = t.get("data_type").and_then(Value::as_str).unwrap_or("TYPE_INVALID");
            let dtype = from_config_type(data_type).map_err(|e| e.context(format!("{key} '{name}'")))?;
            // `reshape` is the shape the model takes and gives; `dims` the clients' view of it.
            let shown = t.get("reshape").and_then(|r| r.get("shape")).or_else(|| t.get("dims"));
            let dims = match shown {
                Some(Value::Array(d)) => d
                    .iter()
                    .map(number)
                    .collect::<Option<Vec<i64>>>()
                    .ok_or_else(|| Error::value(format!("{key} '{name}': dims must be numbers")))?,
                _ => Vec::new(),
            };
            Ok(TensorSpec::new(name, dtype, dims))
        })
        .collect()
}

/// The shape every build agrees on: a build's size along an axis, or -1 where builds differ (or
/// a build takes any size). `None` when the builds differ in rank.
fn common_shape<'a>(shapes: impl Iterator<Item = &'a [i64]>) -> Option<Vec<i64>> {
    let mut common: Option<Vec<i64>> = None;
    for s in shapes {
        common = Some(match common {
            None => s.to_vec(),
            Some(c) if c.len() == s.len() => c.iter().zip(s).map(|(a, b)| if a == b { *a } else { -1 }).collect(),
            Some(_) => return None,
        });
    }
    common
}

/// The artefact's inputs or outputs as one model: shapes agreed over the builds, the batch axis
/// dropped when the model batches.
fn artefact_view(builds: &[Build], outputs: bool, batched: bool) -> Result<Vec<TensorSpec>> {
    let first = &builds[0];
    fn list(b: &Build, outputs: bool) -> &Vec<TensorSpec> {
        if outputs {
            &b.outputs
        } else {
            &b.inputs
        }
    }
    let mut view = Vec::new();
    for (k, t) in list(first, outputs).iter().enumerate() {
        let shapes: Vec<&[i64]> =
            builds.iter().filter_map(|b| list(b, outputs).get(k).map(|t| t.shape.as_slice())).collect();
        let mut shape = common_shape(shapes.into_iter()).ok_or_else(|| {
            Error::value(format!(
                "{} '{}': the builds differ in rank",
                if outputs { "output" } else { "input" },
                t.name
            ))
        })?;
        if batched && !shape.is_empty() {
            shape.remove(0);
        }
        view.push(TensorSpec::new(t.name.clone(), t.dtype, shape));
    }
    Ok(view)
}

/// The batch a fixed build runs (the leading size of its first input), if every input and
/// output leads with it.
pub fn build_batch(b: &Build) -> Option<i64> {
    let batch = *b.inputs.first()?.shape.first()?;
    let all = b.inputs.iter().chain(&b.outputs).all(|t| t.shape.first() == Some(&batch));
    (b.fixed && all).then_some(batch)
}

fn entry(t: &TensorSpec, batched: bool) -> Result<Value> {
    let data_type = config_type(t.dtype)
        .ok_or_else(|| Error::value(format!("'{}': dtype {} has no Triton type", t.name, t.dtype)))?;
    if t.shape.is_empty() {
        // Triton wants some dims. A scalar per row is shown as [1] and reshaped to [] for the model;
        // a model without a batch axis may not reshape to [] (Triton refuses scalars there), so its
        // 0-d tensor is [1] to clients and the backend reads and answers it so (`shown_as_one`).
        if batched {
            return Ok(json!({"name": t.name, "data_type": data_type, "dims": [1], "reshape": {"shape": []}}));
        }
        return Ok(json!({"name": t.name, "data_type": data_type, "dims": [1]}));
    }
    Ok(json!({"name": t.name, "data_type": data_type, "dims": t.shape}))
}

/// Whether config dims `given` show a 0-d tensor `have` of a model without a batch axis: as [1],
/// Triton's convention for a scalar (requests then give it as [1], and answers carry [1]).
fn shown_as_one(given: &[i64], have: &[i64], batched: bool) -> bool {
    !batched && have.is_empty() && given == [1]
}

/// Fills in what the config leaves out from the builds: `max_batch_size` when the builds are one
/// network at several batch sizes, then the inputs and outputs. Returns whether it changed anything.
pub fn auto_complete(config: &mut Value, builds: &[Build]) -> Result<bool> {
    let mut changed = false;
    let batches: Vec<Option<i64>> = builds.iter().map(build_batch).collect();
    let explicit = config.get("max_batch_size").and_then(number).is_some_and(|n| n > 0);
    if !explicit && builds.len() > 1 && batches.iter().all(Option::is_some) {
        let sizes: Vec<i64> = batches.iter().flatten().copied().collect();
        if sizes.iter().any(|&s| s != sizes[0]) {
            config["max_batch_size"] = json!(sizes.iter().max());
            changed = true;
        }
    }
    let batched = max_batch_size(config)? > 0;
    for (key, outputs) in [("input", false), ("output", true)] {
        let empty = config.get(key).and_then(Value::as_array).is_none_or(Vec::is_empty);
        let known = builds[0].fixed || builds[0].recorded;
        if empty && known {
            let view = artefact_view(builds, outputs, batched)?;
            config[key] = Value::Array(view.iter().map(|t| entry(t, batched)).collect::<Result<_>>()?);
            changed = true;
        }
    }
    Ok(changed)
}

/// Whether config dims `given` can describe an artefact shape `have` (-1: any size there).
fn dims_agree(given: &[i64], have: &[i64]) -> bool {
    given.len() == have.len() && given.iter().zip(have).all(|(g, h)| *g < 0 || *h < 0 || g == h)
}

/// The config checked against the builds: every difference is an error naming it.
pub fn reconcile(config: &Value, builds: &[Build]) -> Result<Spec> {
    let max_batch_size = max_batch_size(config)?;
    let batched = max_batch_size > 0;
    let mut inputs = tensors(config, "input")?;
    let mut outputs = tensors(config, "output")?;
    let first = &builds[0];
    if inputs.is_empty() {
        return Err(Error::value(if first.fixed || first.recorded {
            "the config lists no inputs and auto-complete is off (--disable-auto-complete-config): list them"
                .to_string()
        } else {
            format!(
                "a Relay VM executable records no dtypes or shapes: declare its inputs ({}) and outputs in \
                 config.pbtxt, or put the compile route's .meta beside it",
                first.inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            )
        }));
    }
    if batched {
        for b in builds.iter().filter(|b| b.fixed) {
            if build_batch(b).is_none() {
                return Err(Error::value(format!(
                    "max_batch_size {max_batch_size}: build '{}' has inputs or outputs that do not lead with one \
                     batch size, so it has no batch axis (set max_batch_size: 0)",
                    b.name
                )));
            }
        }
    }
    let known = first.fixed || first.recorded;
    let art_in = if known { artefact_view(builds, false, batched)? } else { first.inputs.clone() };
    let names: Vec<&str> = first.inputs.iter().map(|t| t.name.as_str()).collect();
    for b in &builds[1..] {
        let theirs: Vec<&str> = b.inputs.iter().map(|t| t.name.as_str()).collect();
        if theirs != names {
            return Err(Error::value(format!(
                "build '{}' takes inputs {theirs:?} but build '{}' takes {names:?}: builds of one model take the same inputs",
                b.name, first.name
            )));
        }
    }
    for t in &mut inputs {
        let Some(have) = art_in.iter().find(|a| a.name == t.name) else {
            return Err(Error::value(format!(
                "the config's input '{}' is not an input of the model (its inputs: {})",
                t.name,
                names.join(", ")
            )));
        };
        if known {
            if have.dtype != t.dtype {
                return Err(Error::value(format!(
                    "input '{}': the config says {} but the model takes {}",
                    t.name,
                    config_type(t.dtype).unwrap_or("?"),
                    have.dtype
                )));
            }
            if shown_as_one(&t.shape, &have.shape, batched) {
                // What requests are checked against is the model's own shape.
                t.shape.clear();
            } else if !dims_agree(&t.shape, &have.shape) {
                return Err(Error::value(format!(
                    "input '{}': the config's dims {:?} but the model takes {:?}{}",
                    t.name,
                    t.shape,
                    have.shape,
                    if batched { " after the batch axis" } else { "" }
                )));
            }
        }
    }
    let feed = names
        .iter()
        .map(|n| {
            inputs
                .iter()
                .position(|t| t.name == *n)
                .ok_or_else(|| Error::value(format!("the model's input '{n}' is missing from the config's inputs")))
        })
        .collect::<Result<Vec<_>>>()?;
    if known || !outputs.is_empty() {
        let art_out = if known { artefact_view(builds, true, batched)? } else { Vec::new() };
        if outputs.is_empty() {
            return Err(Error::value("the config lists no outputs"));
        }
        if known && outputs.len() != art_out.len() {
            return Err(Error::value(format!(
                "the config lists {} output(s), the model gives {} ({}): outputs are matched by position",
                outputs.len(),
                art_out.len(),
                art_out.iter().map(TensorSpec::show).collect::<Vec<_>>().join(", ")
            )));
        }
        for (k, (t, have)) in outputs.iter_mut().zip(&art_out).enumerate() {
            if have.dtype == t.dtype && shown_as_one(&t.shape, &have.shape, batched) {
                t.shape.clear();
            } else if have.dtype != t.dtype || !dims_agree(&t.shape, &have.shape) {
                return Err(Error::value(format!(
                    "output {k} ('{}'): the config says {} {:?}, the model gives {} {:?}",
                    t.name,
                    config_type(t.dtype).unwrap_or("?"),
                    t.shape,
                    have.dtype,
                    have.shape
                )));
            }
        }
    } else {
        return Err(Error::value("a Relay VM executable records no outputs: declare them in config.pbtxt"));
    }
    Ok(Spec { max_batch_size, inputs, outputs, feed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_triton_writes_them() {
        let c = json!({"max_batch_size": 8, "instance_group": [{"count": 2, "kind": "KIND_CPU"}, {"count": "3"}],
                       "parameters": {"num_threads": {"string_value": "2"}}});
        assert_eq!(max_batch_size(&c).unwrap(), 8);
        assert_eq!(instance_count(&c), 5);
        assert_eq!(parameter(&c, "num_threads").as_deref(), Some("2"));
        assert_eq!(parameter(&c, "other"), None);
        assert_eq!(instance_count(&json!({})), 1);
        assert!(max_batch_size(&json!({"max_batch_size": -1})).is_err());
    }

    #[test]
    fn a_0d_tensor_is_shown_as_1_only_without_a_batch_axis() {
        assert!(shown_as_one(&[1], &[], false));
        // With a batch axis it is reshaped instead; a [1] of the model's is a [1]; [2] is no scalar.
        assert!(!shown_as_one(&[1], &[], true));
        assert!(!shown_as_one(&[1], &[1], false));
        assert!(!shown_as_one(&[2], &[], false));
    }

    #[test]
    fn shapes_agreed_over_builds() {
        let shapes: [&[i64]; 2] = [&[1, 16, 4], &[8, 16, 4]];
        assert_eq!(common_shape(shapes.into_iter()), Some(vec![-1, 16, 4]));
        let ranks: [&[i64]; 2] = [&[1, 16], &[8, 16, 4]];
        assert_eq!(common_shape(ranks.into_iter()), None);
        assert!(dims_agree(&[-1, 4], &[3, 4]));
        assert!(dims_agree(&[3, 4], &[-1, 4]));
        assert!(!dims_agree(&[3, 5], &[3, 4]));
        assert!(!dims_agree(&[3], &[3, 4]));
        // A size of 0 is a size, not "any".
        assert!(!dims_agree(&[0, 4], &[3, 4]));
        assert!(!dims_agree(&[3, 4], &[3, 0]));
    }
}
