//! The graph JSON, parsed into typed, validated form. Every index is checked here so the planner
//! and executor can index freely; errors name the node or entry at fault.

#![forbid(unsafe_code)]

use crate::dlpack::DLDataType;
use crate::dtype;
use crate::error::{Error, Result};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A graph input or parameter.
    Input,
    Op(OpAttrs),
}

#[derive(Debug, Clone, PartialEq)]
pub struct OpAttrs {
    pub func_name: String,
    pub num_inputs: usize,
    pub num_outputs: usize,
    pub flatten_data: bool,
    /// Every attribute as written (layouts, hash, ...), for profiling reports.
    pub extra: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// `(node, output index)` pairs.
    pub inputs: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub dtype: DLDataType,
    pub shape: Box<[i64]>,
    pub storage_id: usize,
    pub device_type: Option<i32>,
    pub scope: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub arg_nodes: Vec<usize>,
    pub node_row_ptr: Vec<usize>,
    /// Output entries as `(node, index)`.
    pub heads: Vec<(usize, usize)>,
    pub entries: Vec<Entry>,
}

const MAX_NDIM: usize = 32;

fn err(msg: impl Into<String>) -> Error {
    Error::value(format!("graph JSON: {}", msg.into()))
}

fn as_array<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>> {
    v.as_array().ok_or_else(|| err(format!("{what} must be an array")))
}

fn as_index(v: &Value, what: &str) -> Result<usize> {
    v.as_u64()
        .and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| err(format!("{what} must be a non-negative integer, got {v}")))
}

fn index_list(v: &Value, what: &str) -> Result<Vec<usize>> {
    as_array(v, what)?.iter().enumerate().map(|(i, x)| as_index(x, &format!("{what}[{i}]"))).collect()
}

/// The text of the first JSON value in `bytes`; what follows it is ignored, as upstream's reader
/// ignores it. Hosts hand over whole buffers, tails included: upstream's `rtvm` reads a package's
/// `mod.json` into a string longer than the file, whose last bytes are whatever the heap held.
pub fn first_json_value(bytes: &[u8]) -> Result<&str> {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
    match values.next() {
        Some(Ok(_)) => {
            let end = values.byte_offset();
            std::str::from_utf8(&bytes[..end]).map_err(|_| err("the graph JSON is not UTF-8"))
        }
        Some(Err(e)) => Err(err(format!("not valid JSON: {e}"))),
        None => Err(err("not valid JSON: no value (empty or blank)")),
    }
}

impl Graph {
    pub fn parse(json: &str) -> Result<Graph> {
        let root: Value = serde_json::from_str(json).map_err(|e| err(format!("not valid JSON: {e}")))?;
        let obj = root.as_object().ok_or_else(|| err("the top level must be an object"))?;
        for key in obj.keys() {
            if !matches!(key.as_str(), "nodes" | "arg_nodes" | "node_row_ptr" | "heads" | "attrs" | "metadata") {
                return Err(err(format!("unknown top-level key '{key}'")));
            }
        }
        let field = |k: &str| obj.get(k).ok_or_else(|| err(format!("missing required key '{k}'")));
        let nodes = as_array(field("nodes")?, "nodes")?
            .iter()
            .enumerate()
            .map(|(i, n)| parse_node(n).map_err(|e| e.context(format!("node {i}"))))
            .collect::<Result<Vec<_>>>()?;
        let arg_nodes = index_list(field("arg_nodes")?, "arg_nodes")?;
        let node_row_ptr = index_list(field("node_row_ptr")?, "node_row_ptr")?;
        let heads = as_array(field("heads")?, "heads")?
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let h = as_array(h, &format!("heads[{i}]"))?;
                if h.len() < 2 || h.len() > 3 {
                    return Err(err(format!("heads[{i}] must be [node, index, version]")));
                }
                Ok((as_index(&h[0], "head node")?, as_index(&h[1], "head index")?))
            })
            .collect::<Result<Vec<_>>>()?;
        let attrs = field("attrs")?.as_object().ok_or_else(|| err("attrs must be an object"))?;
        let mut g = Graph { nodes, arg_nodes, node_row_ptr, heads, entries: Vec::new() };
        g.check_structure()?;
        g.entries = parse_entries(attrs, g.num_entries())?;
        g.check_entries()?;
        Ok(g)
    }

    pub fn num_entries(&self) -> usize {
        *self.node_row_ptr.last().unwrap_or(&0)
    }

    pub fn entry_id(&self, node: usize, index: usize) -> usize {
        self.node_row_ptr[node] + index
    }

    pub fn num_node_outputs(&self, node: usize) -> usize {
        self.node_row_ptr[node + 1] - self.node_row_ptr[node]
    }

    fn check_structure(&self) -> Result<()> {
        let n = self.nodes.len();
        if self.node_row_ptr.len() != n + 1 {
            return Err(err(format!(
                "node_row_ptr has {} elements for {n} nodes (needs {})",
                self.node_row_ptr.len(),
                n + 1
            )));
        }
        if self.node_row_ptr[0] != 0 || self.node_row_ptr.windows(2).any(|w| w[1] < w[0]) {
            return Err(err("node_row_ptr must start at 0 and never decrease"));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let owned = self.num_node_outputs(i);
            let expected = match &node.kind {
                NodeKind::Input => 1,
                NodeKind::Op(a) => a.num_outputs,
            };
            if let NodeKind::Op(a) = &node.kind {
                if a.num_inputs != node.inputs.len() {
                    return Err(err(format!(
                        "node {i} ('{}') says num_inputs {} but lists {} inputs",
                        node.name,
                        a.num_inputs,
                        node.inputs.len()
                    )));
                }
            }
            if owned != expected {
                return Err(err(format!(
                    "node {i} ('{}') owns {owned} entries in node_row_ptr but has {expected} outputs",
                    node.name
                )));
            }
            for &(src, idx) in &node.inputs {
                if src >= i {
                    return Err(err(format!(
                        "node {i} ('{}') reads node {src}, which does not come before it",
                        node.name
                    )));
                }
                if idx >= self.num_node_outputs(src) {
                    return Err(err(format!(
                        "node {i} ('{}') reads output {idx} of node {src}, which has {}",
                        node.name,
                        self.num_node_outputs(src)
                    )));
                }
            }
        }
        for (k, &a) in self.arg_nodes.iter().enumerate() {
            match self.nodes.get(a) {
                Some(Node { kind: NodeKind::Input, .. }) => {}
                Some(node) => {
                    return Err(err(format!("arg_nodes[{k}] = {a} ('{}') is an operator, not an input", node.name)))
                }
                None => return Err(err(format!("arg_nodes[{k}] = {a} is out of range ({n} nodes)"))),
            }
        }
        for (k, &(node, idx)) in self.heads.iter().enumerate() {
            if node >= n || idx >= self.num_node_outputs(node) {
                return Err(err(format!("heads[{k}] = [{node}, {idx}] does not name an existing output")));
            }
        }
        Ok(())
    }

    fn check_entries(&self) -> Result<()> {
        for (i, node) in self.nodes.iter().enumerate() {
            if let NodeKind::Op(a) = &node.kind {
                if a.func_name == "__nop" || a.func_name == "__copy" {
                    let Some(&(src, idx)) = node.inputs.first() else {
                        return Err(err(format!("node {i} ('{}') is {} without an input", node.name, a.func_name)));
                    };
                    let out = self.entry_id(i, 0);
                    let input = self.entry_id(src, idx);
                    if a.func_name == "__nop" && self.entries[out].storage_id != self.entries[input].storage_id {
                        return Err(err(format!(
                            "node {i} ('{}'): a __nop must write the storage it reads",
                            node.name
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

fn parse_node(v: &Value) -> Result<Node> {
    let obj = v.as_object().ok_or_else(|| err("a node must be an object"))?;
    for key in obj.keys() {
        if !matches!(key.as_str(), "op" | "name" | "inputs" | "attrs" | "attr" | "control_deps") {
            return Err(err(format!("unknown node key '{key}'")));
        }
    }
    let op = obj.get("op").and_then(Value::as_str).ok_or_else(|| err("missing string 'op'"))?;
    let name = obj.get("name").and_then(Value::as_str).ok_or_else(|| err("missing string 'name'"))?.to_string();
    let inputs = match obj.get("inputs") {
        None => Vec::new(),
        Some(v) => as_array(v, "inputs")?
            .iter()
            .map(|e| {
                let e = as_array(e, "an input")?;
                if e.len() < 2 || e.len() > 3 {
                    return Err(err("an input must be [node, index] or [node, index, version]"));
                }
                Ok((as_index(&e[0], "input node")?, as_index(&e[1], "input index")?))
            })
            .collect::<Result<Vec<_>>>()?,
    };
    let attrs = obj.get("attrs").or_else(|| obj.get("attr"));
    let kind = match op {
        "null" => NodeKind::Input,
        "tvm_op" => {
            let attrs =
                attrs.and_then(Value::as_object).ok_or_else(|| err(format!("operator '{name}' has no attrs")))?;
            NodeKind::Op(parse_op_attrs(attrs).map_err(|e| e.context(format!("operator '{name}'")))?)
        }
        other => return Err(err(format!("node '{name}': unsupported op '{other}' (only null and tvm_op)"))),
    };
    Ok(Node { name, kind, inputs })
}

fn parse_op_attrs(attrs: &Map<String, Value>) -> Result<OpAttrs> {
    let text = |k: &str| -> Result<&str> {
        attrs.get(k).and_then(Value::as_str).ok_or_else(|| err(format!("missing string attribute '{k}'")))
    };
    let number = |k: &str| -> Result<usize> {
        let s = text(k)?;
        s.parse().map_err(|_| err(format!("attribute '{k}' must be a non-negative number, got '{s}'")))
    };
    let num_outputs = number("num_outputs")?;
    let num_inputs = number("num_inputs")?;
    if num_outputs == 0 {
        return Err(err("num_outputs must be at least 1"));
    }
    let extra = attrs
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "func_name" | "num_outputs" | "num_inputs" | "flatten_data"))
        .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect();
    Ok(OpAttrs {
        func_name: text("func_name")?.to_string(),
        num_inputs,
        num_outputs,
        flatten_data: number("flatten_data")? != 0,
        extra,
    })
}

fn tagged<'a>(attrs: &'a Map<String, Value>, key: &str, tag: &str) -> Result<Option<&'a Vec<Value>>> {
    let Some(v) = attrs.get(key) else {
        return Ok(None);
    };
    let pair = as_array(v, &format!("attrs.{key}"))?;
    if pair.len() != 2 || pair[0].as_str() != Some(tag) {
        return Err(err(format!("attrs.{key} must be [\"{tag}\", [...]]")));
    }
    as_array(&pair[1], &format!("attrs.{key}")).map(Some)
}

fn parse_entries(attrs: &Map<String, Value>, n: usize) -> Result<Vec<Entry>> {
    for (k, v) in attrs {
        if matches!(k.as_str(), "dltype" | "storage_id" | "shape" | "device_index" | "storage_scope") {
            continue;
        }
        let tag = v.as_array().and_then(|a| a.first()).and_then(Value::as_str);
        if !matches!(tag, Some("list_int") | Some("size_t")) {
            return Err(err(format!("cannot skip graph attr '{k}' of unknown type")));
        }
    }
    let need = |key: &str, tag: &str| -> Result<&Vec<Value>> {
        let list = tagged(attrs, key, tag)?.ok_or_else(|| err(format!("missing attrs.{key}")))?;
        if list.len() != n {
            return Err(err(format!("attrs.{key} has {} elements for {n} entries", list.len())));
        }
        Ok(list)
    };
    let dltypes = need("dltype", "list_str")?;
    let sids = need("storage_id", "list_int")?;
    let shapes = need("shape", "list_shape")?;
    let optional = |key: &str, tag: &str| -> Result<Option<&Vec<Value>>> {
        match tagged(attrs, key, tag)? {
            Some(l) if l.len() != n => Err(err(format!("attrs.{key} has {} elements for {n} entries", l.len()))),
            other => Ok(other),
        }
    };
    let devices = optional("device_index", "list_int")?;
    let scopes = optional("storage_scope", "list_str")?;
    (0..n)
        .map(|i| {
            let at = |e: Error| e.context(format!("entry {i}"));
            let dt = dltypes[i].as_str().ok_or_else(|| at(err("dltype must be a string")))?;
            let dtype = dtype::parse(dt).map_err(at)?;
            let sid = sids[i]
                .as_u64()
                .ok_or_else(|| at(err(format!("storage_id must be a non-negative integer, got {}", sids[i]))))?;
            if sid >= n as u64 {
                return Err(at(err(format!("storage_id {sid} out of range (at most {} storage slots)", n))));
            }
            let dims = as_array(&shapes[i], "shape").map_err(at)?;
            if dims.len() > MAX_NDIM {
                return Err(at(err(format!("{} dimensions is more than {MAX_NDIM}", dims.len()))));
            }
            let shape = dims
                .iter()
                .map(|d| {
                    d.as_i64()
                        .filter(|&d| d >= 0)
                        .ok_or_else(|| at(err(format!("shape dimension must be a non-negative integer, got {d}"))))
                })
                .collect::<Result<Box<[i64]>>>()?;
            dtype::tensor_bytes(&shape, dtype).map_err(at)?;
            let device_type = match devices {
                Some(l) => Some(
                    l[i].as_i64()
                        .and_then(|d| i32::try_from(d).ok())
                        .ok_or_else(|| at(err("device_index must be an int")))?,
                ),
                None => None,
            };
            let scope = match scopes {
                Some(l) => l[i].as_str().ok_or_else(|| at(err("storage_scope must be a string")))?.to_string(),
                None => String::new(),
            };
            Ok(Entry { dtype, shape, storage_id: sid as usize, device_type, scope })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"nodes":[{"op":"null","name":"x","inputs":[]},
      {"op":"tvm_op","name":"f","attrs":{"func_name":"f","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]}],
      "arg_nodes":[0],"node_row_ptr":[0,1,2],"heads":[[1,0,0]],
      "attrs":{"dltype":["list_str",["float32","float32"]],"storage_id":["list_int",[0,1]],"shape":["list_shape",[[2],[2]]]}}"#;

    #[test]
    fn the_first_value_is_the_graph_and_its_tail_is_ignored() {
        let mut buf = TINY.as_bytes().to_vec();
        buf.extend_from_slice(b"\xff\x00garbage}{");
        assert_eq!(first_json_value(&buf).unwrap(), TINY);
        assert_eq!(first_json_value(b"  {} x").unwrap(), "  {}");
        assert!(first_json_value(b"").unwrap_err().to_string().contains("no value"));
        assert!(first_json_value(b"{\"nodes\": [").unwrap_err().to_string().contains("not valid JSON"));
        assert!(first_json_value(b"\xff{}").unwrap_err().to_string().contains("not valid JSON"));
    }

    #[test]
    fn parses_tiny_graph() {
        let g = Graph::parse(TINY).unwrap();
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(g.entries[1].storage_id, 1);
        assert_eq!(g.heads, vec![(1, 0)]);
    }

    #[test]
    fn rejects_bad_graphs() {
        let cases = [
            (TINY.replace("[[1,0,0]]", "[[5,0,0]]"), "heads[0]"),
            (TINY.replace("[0,1,2]", "[0,1]"), "node_row_ptr"),
            (TINY.replace("[[0,0,0]]", "[[1,0,0]]"), "does not come before"),
            (TINY.replace("[0,1]]", "[0,7]]"), "storage_id 7 out of range"),
            (TINY.replace("[[2],[2]]", "[[2],[-2]]"), "non-negative"),
            (TINY.replace("\"float32\",\"float32\"", "\"float32\",\"cplx\""), "unknown dtype"),
            (TINY.replace("\"arg_nodes\"", "\"extra\":1,\"arg_nodes\""), "unknown top-level key"),
            (TINY[..40].to_string(), "not valid JSON"),
            (TINY.replace("\"num_outputs\":\"1\"", "\"num_outputs\":\"x\""), "num_outputs"),
            (
                TINY.replace("\"num_inputs\":\"1\"", "\"num_inputs\":\"2\""),
                "node 1 ('f') says num_inputs 2 but lists 1",
            ),
            (
                TINY.replace("\"num_outputs\":\"1\"", "\"num_outputs\":\"2\""),
                "node 1 ('f') owns 1 entries in node_row_ptr but has 2 outputs",
            ),
        ];
        for (json, want) in cases {
            let e = Graph::parse(&json).unwrap_err().to_string();
            assert!(e.contains(want), "expected '{want}' in '{e}'");
        }
    }

    /// The edges of every length check: what is just inside is accepted, what is just outside is
    /// refused with its place named.
    #[test]
    fn accepts_and_refuses_at_the_limits() {
        let ok = |json: String| Graph::parse(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        let bad = |json: String, want: &str| {
            let e = Graph::parse(&json).unwrap_err().to_string();
            assert!(e.contains(want), "expected '{want}' in '{e}'");
        };
        // heads and inputs: [node, index] or [node, index, version].
        ok(TINY.replace("\"heads\":[[1,0,0]]", "\"heads\":[[1,0]]"));
        bad(TINY.replace("\"heads\":[[1,0,0]]", "\"heads\":[[1]]"), "heads[0] must be [node, index, version]");
        bad(TINY.replace("\"heads\":[[1,0,0]]", "\"heads\":[[1,0,0,0]]"), "heads[0] must be [node, index, version]");
        ok(TINY.replace("\"inputs\":[[0,0,0]]", "\"inputs\":[[0,0]]"));
        for input in ["[[0]]", "[[0,0,0,0]]"] {
            bad(TINY.replace("\"inputs\":[[0,0,0]]", &format!("\"inputs\":{input}")), "an input must be [node, index]");
        }
        // node_row_ptr starts at 0 and never decreases.
        for ptr in ["[1,1,2]", "[0,2,1]"] {
            bad(TINY.replace("[0,1,2]", ptr), "node_row_ptr must start at 0 and never decrease");
        }
        // Tagged lists: ["tag", [...]] exactly.
        bad(
            TINY.replace("\"dltype\":[\"list_str\",", "\"dltype\":[\"list_int\","),
            "attrs.dltype must be [\"list_str\", [...]]",
        );
        bad(TINY.replace("\"shape\":[\"list_shape\",[[2],[2]]]", "\"shape\":[\"list_shape\"]"), "attrs.shape must be");
        // Graph attributes nobody reads are skipped when their type is known.
        let with_attr = |a: &str| TINY.replace("\"storage_id\":", &format!("{a},\"storage_id\":"));
        ok(with_attr(r#""extra_int":["list_int",[1,2]],"count":["size_t",3]"#));
        bad(with_attr(r#""extra_str":["list_str",["a","b"]]"#), "cannot skip graph attr 'extra_str' of unknown type");
        // Up to 32 dimensions.
        let dims = |k: usize| format!("[{}]", vec!["1"; k].join(","));
        ok(TINY.replace("[[2],[2]]", &format!("[{},[2]]", dims(32))));
        bad(TINY.replace("[[2],[2]]", &format!("[{},[2]]", dims(33))), "33 dimensions is more than 32");
        // Operator attributes other than the four it reads are kept, as given.
        let g = ok(TINY.replace("\"flatten_data\":\"0\"", "\"flatten_data\":\"0\",\"hash\":\"ab12\",\"n\":7"));
        let NodeKind::Op(a) = &g.nodes[1].kind else { panic!("node 1 is an operator") };
        assert_eq!(a.extra, vec![("hash".to_string(), "ab12".to_string()), ("n".to_string(), "7".to_string())]);
    }

    /// The optional per-entry lists must cover every entry (a short one would index past its end).
    #[test]
    fn rejects_short_optional_lists() {
        let with = |extra: &str| TINY.replace("\"storage_id\":", &format!("{extra},\"storage_id\":"));
        for (json, want) in [
            (with(r#""device_index":["list_int",[1]]"#), "attrs.device_index has 1 elements for 2 entries"),
            (with(r#""storage_scope":["list_str",["global"]]"#), "attrs.storage_scope has 1 elements for 2 entries"),
        ] {
            let e = Graph::parse(&json).unwrap_err().to_string();
            assert!(e.contains(want), "expected '{want}' in '{e}'");
        }
        let g = Graph::parse(&with(r#""device_index":["list_int",[1,1]],"storage_scope":["list_str",["global",""]]"#))
            .unwrap();
        assert_eq!((g.entries[1].device_type, g.entries[0].scope.as_str()), (Some(1), "global"));
    }

    /// `__nop` and `__copy` read exactly one input; a `__nop` writes the storage it reads.
    #[test]
    fn rejects_aliases_that_do_not_alias() {
        let nop = TINY.replace("\"func_name\":\"f\"", "\"func_name\":\"__nop\"");
        let e = Graph::parse(&nop).unwrap_err().to_string();
        assert!(e.contains("node 1 ('f'): a __nop must write the storage it reads"), "{e}");
        assert!(Graph::parse(&nop.replace("[0,1]]", "[0,0]]")).is_ok());
        for func in ["__nop", "__copy"] {
            let bare = TINY
                .replace("\"func_name\":\"f\"", &format!("\"func_name\":\"{func}\""))
                .replace("\"num_inputs\":\"1\"", "\"num_inputs\":\"0\"")
                .replace("\"inputs\":[[0,0,0]]", "\"inputs\":[]")
                .replace("[0,1]]", "[0,0]]");
            let e = Graph::parse(&bare).unwrap_err().to_string();
            assert!(e.contains(&format!("node 1 ('f') is {func} without an input")), "{e}");
        }
    }
}
