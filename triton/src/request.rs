//! One request as Triton hands it over, checked against what the model serves: every input named,
//! typed and shaped as the config says, one batch size for all of them, outputs the model has.
//! A request that fails its check is answered alone; the others of its execute call still run.

use crate::config::Spec;
use crate::signature::{admits, from_wire_type, wire_name};
use tvm_runtime::{Error, Result};

/// An input of a request: its bytes may come in several pieces.
pub struct Given<'a> {
    pub name: &'a str,
    pub wire_type: u32,
    pub shape: &'a [i64],
    pub pieces: Vec<&'a [u8]>,
}

/// A request's inputs and the outputs it asks for (none named: all of them).
pub struct Incoming<'a> {
    pub inputs: Vec<Given<'a>>,
    pub requested: Vec<&'a str>,
}

/// A request that passed its check.
pub struct Checked<'a> {
    /// Its batch size (1 when the model has no batch axis).
    pub rows: usize,
    /// Each input's shape past the batch axis (the whole shape without one), in the config's
    /// order: requests with equal keys can share a run.
    pub key: Vec<Vec<i64>>,
    /// Its inputs, in the config's order.
    pub inputs: Vec<Given<'a>>,
    /// The outputs to answer with, by position.
    pub outputs: Vec<usize>,
}

impl Checked<'_> {
    /// Bytes of one row of input `i` (its whole tensor without a batch axis).
    pub fn row_bytes(&self, i: usize, element_bytes: usize) -> usize {
        self.key[i].iter().product::<i64>().max(0) as usize * element_bytes
    }
}

/// Checks `req` against `spec`.
pub fn check<'a>(spec: &Spec, req: Incoming<'a>) -> Result<Checked<'a>> {
    let batched = spec.max_batch_size > 0;
    let names = || spec.inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
    let mut slots: Vec<Option<Given<'a>>> = spec.inputs.iter().map(|_| None).collect();
    let mut rows: Option<(usize, &str)> = None;
    for mut g in req.inputs {
        let Some(i) = spec.inputs.iter().position(|t| t.name == g.name) else {
            return Err(Error::key(format!("unknown input '{}' (the model's inputs: {})", g.name, names())));
        };
        let want = &spec.inputs[i];
        // A 0-d input of a model without a batch axis comes as [1] (the config shows it so).
        if !batched && want.shape.is_empty() && g.shape == [1] {
            g.shape = &[];
        }
        if slots[i].is_some() {
            return Err(Error::value(format!("input '{}' given twice", g.name)));
        }
        if from_wire_type(g.wire_type) != Some(want.dtype) {
            return Err(Error::type_err(format!(
                "input '{}': {} given, the model takes {}",
                g.name,
                wire_name(g.wire_type),
                crate::signature::config_type(want.dtype).map_or("?", |t| t.trim_start_matches("TYPE_"))
            )));
        }
        let shape_msg = |why: &str| {
            let mut full = want.shape.clone();
            if batched {
                full.insert(0, -1);
            }
            Error::value(format!("input '{}': shape {:?} given, the model takes {full:?} ({why})", g.name, g.shape))
        };
        let row = if batched {
            let Some((&n, row)) = g.shape.split_first() else { return Err(shape_msg("no batch axis")) };
            if n < 1 || n as usize > spec.max_batch_size {
                return Err(shape_msg(&format!("a batch of 1 to {}", spec.max_batch_size)));
            }
            match rows {
                Some((r, other)) if r != n as usize => {
                    return Err(Error::value(format!(
                        "input '{}' has a batch of {n} but '{other}' one of {r}: one batch size for all inputs",
                        g.name
                    )))
                }
                _ => rows = Some((n as usize, g.name)),
            }
            row
        } else {
            g.shape
        };
        if !admits(&want.shape, row) {
            return Err(shape_msg("-1: any size"));
        }
        let bytes = tvm_runtime::dtype::tensor_bytes(g.shape, want.dtype)?;
        let given: usize = g.pieces.iter().map(|p| p.len()).sum();
        if given != bytes {
            return Err(Error::value(format!(
                "input '{}': {given} bytes given for {} {:?} ({bytes} bytes)",
                g.name, want.dtype, g.shape
            )));
        }
        slots[i] = Some(g);
    }
    let missing: Vec<&str> =
        spec.inputs.iter().zip(&slots).filter(|(_, s)| s.is_none()).map(|(t, _)| t.name.as_str()).collect();
    if !missing.is_empty() {
        return Err(Error::value(format!(
            "missing input(s): {} (the model's inputs: {})",
            missing.join(", "),
            names()
        )));
    }
    let inputs: Vec<Given<'a>> = slots.into_iter().flatten().collect();
    let key = inputs.iter().map(|g| if batched { g.shape[1..].to_vec() } else { g.shape.to_vec() }).collect();
    let outputs = if req.requested.is_empty() {
        (0..spec.outputs.len()).collect()
    } else {
        req.requested
            .iter()
            .map(|n| {
                spec.outputs.iter().position(|t| t.name == *n).ok_or_else(|| {
                    let outs: Vec<&str> = spec.outputs.iter().map(|t| t.name.as_str()).collect();
                    Error::key(format!("unknown output '{n}' (the model's outputs: {})", outs.join(", ")))
                })
            })
            .collect::<Result<_>>()?
    };
    Ok(Checked { rows: rows.map_or(1, |r| r.0), key, inputs, outputs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;

    fn spec(max_batch_size: usize) -> Spec {
        let f32 = "float32".parse().unwrap();
        Spec {
            max_batch_size,
            inputs: vec![TensorSpec::new("x", f32, vec![-1, 4]), TensorSpec::new("y", f32, vec![2])],
            outputs: vec![TensorSpec::new("out", f32, vec![4])],
            feed: vec![0, 1],
        }
    }

    fn given<'a>(name: &'a str, shape: &'a [i64], data: &'a [u8]) -> Given<'a> {
        Given { name, wire_type: 11, shape, pieces: vec![data] }
    }

    #[test]
    fn a_good_request_and_its_key() {
        let (xs, ys) = ([2i64, 3, 4], [2i64, 2]);
        let (x, y) = (vec![0u8; 96], vec![0u8; 16]);
        let req = Incoming { inputs: vec![given("y", &ys, &y), given("x", &xs, &x)], requested: vec![] };
        let c = check(&spec(8), req).unwrap();
        assert_eq!(c.rows, 2);
        assert_eq!(c.key, vec![vec![3, 4], vec![2]]);
        assert_eq!(c.inputs[0].name, "x");
        assert_eq!(c.outputs, vec![0]);
        assert_eq!(c.row_bytes(0, 4), 48);
    }

    #[test]
    fn each_fault_named() {
        let s = spec(8);
        let (xs, ys) = ([2i64, 3, 4], [2i64, 2]);
        let (x, y) = (vec![0u8; 96], vec![0u8; 16]);
        let err = |inputs: Vec<Given<'_>>, requested: Vec<&str>| {
            check(&s, Incoming { inputs, requested }).err().unwrap().to_string()
        };
        assert!(err(vec![given("z", &xs, &x)], vec![]).contains("unknown input 'z' (the model's inputs: x, y)"));
        assert!(err(vec![given("x", &xs, &x)], vec![]).contains("missing input(s): y"));
        let mut wrong = given("x", &xs, &x);
        wrong.wire_type = 8;
        assert!(err(vec![wrong], vec![]).contains("INT32 given, the model takes FP32"));
        let bad_row = [2i64, 3, 5];
        assert!(
            err(vec![given("x", &bad_row, &x)], vec![]).contains("shape [2, 3, 5] given, the model takes [-1, -1, 4]")
        );
        let big = [9i64, 3, 4];
        assert!(err(vec![given("x", &big, &x)], vec![]).contains("a batch of 1 to 8"));
        let other = [3i64, 2];
        let y3 = vec![0u8; 24];
        assert!(err(vec![given("x", &xs, &x), given("y", &other, &y3)], vec![]).contains("one batch size"));
        assert!(err(vec![given("x", &xs, &x[..95]), given("y", &ys, &y)], vec![]).contains("95 bytes given"));
        assert!(err(vec![given("x", &xs, &x), given("y", &ys, &y)], vec!["nope"]).contains("unknown output 'nope'"));
        assert!(err(vec![given("x", &xs, &x), given("x", &xs, &x)], vec![]).contains("given twice"));
    }

    #[test]
    fn without_a_batch_axis() {
        let s = spec(0);
        let (xs, ys) = ([3i64, 4], [2i64]);
        let (x, y) = (vec![0u8; 48], vec![0u8; 8]);
        let c = check(&s, Incoming { inputs: vec![given("x", &xs, &x), given("y", &ys, &y)], requested: vec!["out"] })
            .unwrap();
        assert_eq!((c.rows, c.outputs.clone()), (1, vec![0]));
        assert_eq!(c.key, vec![vec![3, 4], vec![2]]);
    }

    #[test]
    fn a_0d_input_comes_as_1_only_without_a_batch_axis() {
        let f32 = "float32".parse().unwrap();
        let scalar = |max_batch_size| Spec {
            max_batch_size,
            inputs: vec![TensorSpec::new("n", f32, vec![])],
            outputs: vec![TensorSpec::new("out", f32, vec![])],
            feed: vec![0],
        };
        let (one, four) = ([1i64], vec![0u8; 4]);
        // No batch axis: [1] is the model's [].
        let c = check(&scalar(0), Incoming { inputs: vec![given("n", &one, &four)], requested: vec![] }).unwrap();
        assert_eq!(c.key, vec![Vec::<i64>::new()]);
        // A batch axis: [1] is one row of a scalar per row, as it was.
        let c = check(&scalar(4), Incoming { inputs: vec![given("n", &one, &four)], requested: vec![] }).unwrap();
        assert_eq!((c.rows, c.key.clone()), (1, vec![Vec::<i64>::new()]));
        assert_eq!(c.inputs[0].shape, [1]);
        // Not 0-d: [1] stays [1].
        let c = check(
            &spec(0),
            Incoming { inputs: vec![given("x", &[1, 4], &[0; 16]), given("y", &[2], &[0; 8])], requested: vec![] },
        );
        assert!(c.is_ok());
    }
}
