//! Tensors as a model takes and gives them, and Triton's names for their dtypes.

use tvm_runtime::dlpack::DLDataType;
use tvm_runtime::{Error, Result};

/// A tensor of a model: its name, dtype and shape (-1 along an axis of any size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
}

impl TensorSpec {
    pub fn new(name: impl Into<String>, dtype: DLDataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec { name: name.into(), dtype, shape }
    }

    /// `name: TYPE_FP32 [1, 784]`, as messages show it.
    pub fn show(&self) -> String {
        format!("{}: {} {:?}", self.name, config_type(self.dtype).unwrap_or("(no Triton type)"), self.shape)
    }
}

/// Triton's data types: `TRITONSERVER_DataType`'s value, the config's name, TVM's dtype.
const TYPES: [(u32, &str, &str); 13] = [
    (1, "TYPE_BOOL", "bool"),
    (2, "TYPE_UINT8", "uint8"),
    (3, "TYPE_UINT16", "uint16"),
    (4, "TYPE_UINT32", "uint32"),
    (5, "TYPE_UINT64", "uint64"),
    (6, "TYPE_INT8", "int8"),
    (7, "TYPE_INT16", "int16"),
    (8, "TYPE_INT32", "int32"),
    (9, "TYPE_INT64", "int64"),
    (10, "TYPE_FP16", "float16"),
    (11, "TYPE_FP32", "float32"),
    (12, "TYPE_FP64", "float64"),
    (14, "TYPE_BF16", "bfloat16"),
];

fn tvm_name(dtype: DLDataType) -> String {
    dtype.to_string()
}

/// The config's name of a dtype (`TYPE_FP32`), if Triton has one.
pub fn config_type(dtype: DLDataType) -> Option<&'static str> {
    let name = tvm_name(dtype);
    TYPES.iter().find(|t| t.2 == name).map(|t| t.1)
}

/// The dtype a config's `data_type` names.
pub fn from_config_type(name: &str) -> Result<DLDataType> {
    match TYPES.iter().find(|t| t.1 == name) {
        Some(t) => t.2.parse(),
        None if name == "TYPE_STRING" => Err(Error::value("TYPE_STRING: TVM models take numeric tensors only")),
        None => Err(Error::value(format!("unknown data_type '{name}'"))),
    }
}

/// `TRITONSERVER_DataType`'s value of a dtype.
pub fn wire_type(dtype: DLDataType) -> Option<u32> {
    let name = tvm_name(dtype);
    TYPES.iter().find(|t| t.2 == name).map(|t| t.0)
}

/// The dtype of a `TRITONSERVER_DataType` value; `None` for BYTES and unknown values.
pub fn from_wire_type(value: u32) -> Option<DLDataType> {
    TYPES.iter().find(|t| t.0 == value).and_then(|t| t.2.parse().ok())
}

/// The protocol's name of a `TRITONSERVER_DataType` value (`FP32`), for messages.
pub fn wire_name(value: u32) -> String {
    match TYPES.iter().find(|t| t.0 == value) {
        Some(t) => t.1.trim_start_matches("TYPE_").to_string(),
        None if value == 13 => "BYTES".to_string(),
        None => format!("type {value}"),
    }
}

/// Whether a shape with -1 along open axes admits `actual`.
pub fn admits(pattern: &[i64], actual: &[i64]) -> bool {
    pattern.len() == actual.len() && pattern.iter().zip(actual).all(|(p, a)| *p < 0 || p == a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (wire, config, tvm) in TYPES {
            let d: DLDataType = tvm.parse().unwrap();
            assert_eq!(config_type(d), Some(config));
            assert_eq!(from_config_type(config).unwrap(), d);
            assert_eq!(wire_type(d), Some(wire));
            assert_eq!(from_wire_type(wire), Some(d));
        }
        assert_eq!(from_wire_type(13), None);
        assert_eq!(wire_name(11), "FP32");
        assert_eq!(wire_name(13), "BYTES");
        assert!(from_config_type("TYPE_STRING").unwrap_err().to_string().contains("numeric"));
        assert!(config_type("int8x4".parse().unwrap()).is_none());
    }

    #[test]
    fn open_axes() {
        assert!(admits(&[-1, 4], &[7, 4]));
        assert!(!admits(&[-1, 4], &[7, 5]));
        assert!(!admits(&[4], &[4, 1]));
    }
}
