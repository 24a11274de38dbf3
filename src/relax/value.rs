//! What a Relax register holds, and its crossings: from a host's packed arguments, to a kernel's
//! or a global's arguments, back to a host as a return value.

#![forbid(unsafe_code)]

use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef};
use crate::packed::{Args, ArgsBuilder, ArrayObj, PackedFunc, RetValue, ShapeTupleObj, StringObj};
use crate::tensor::{Buffer, NDArray};
use std::sync::Arc;

/// A Relax function value: bytecode with some trailing arguments bound (`make_closure`), or a
/// packed function.
#[derive(Clone)]
pub enum Callable {
    Closure { func: usize, bound: Arc<[Value]> },
    Packed(ObjRef<PackedFunc>),
}

#[derive(Clone, Default)]
pub enum Value {
    #[default]
    None,
    Int(i64),
    Float(f64),
    DataType(DLDataType),
    Str(Arc<str>),
    Shape(Arc<[i64]>),
    Tensor(ObjRef<NDArray>),
    Tuple(Arc<[Value]>),
    /// A block tensors are placed in (`alloc_storage`).
    Storage(Arc<Buffer>),
    Func(Callable),
    /// Anything else a host passed (a module, an object of a plug-in's): carried, not read.
    Object(AnyObject),
    /// The `%vm` register: the machine, as builtins that allocate take it.
    Vm,
}

impl Value {
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::DataType(_) => "DataType",
            Value::Str(_) => "str",
            Value::Shape(_) => "Shape",
            Value::Tensor(_) => "Tensor",
            Value::Tuple(_) => "Tuple",
            Value::Storage(_) => "Storage",
            Value::Func(_) => "Function",
            Value::Object(_) => "Object",
            Value::Vm => "VirtualMachine",
        }
    }

    fn want(&self, what: &str) -> Error {
        Error::type_err(format!("expected {what}, got {}", self.kind()))
    }

    pub fn int(&self) -> Result<i64> {
        match self {
            Value::Int(i) => Ok(*i),
            _ => Err(self.want("an int")),
        }
    }

    pub fn tensor(&self) -> Result<&ObjRef<NDArray>> {
        match self {
            Value::Tensor(t) => Ok(t),
            _ => Err(self.want("a Tensor")),
        }
    }

    pub fn shape(&self) -> Result<&[i64]> {
        match self {
            Value::Shape(s) => Ok(s),
            _ => Err(self.want("a Shape")),
        }
    }

    /// Whether this value is, or a tuple in it holds, a tensor of `dtype`.
    #[inline]
    fn holds_dtype(&self, dtype: DLDataType) -> bool {
        match self {
            Value::Tensor(t) => t.dtype() == dtype,
            Value::Tuple(items) => items.iter().any(|v| v.holds_dtype(dtype)),
            _ => false,
        }
    }

    /// Appends the tensors of this value to `out`, tuples flattened in order: false (with `out`
    /// partly filled) when a leaf is anything but a tensor.
    pub fn flatten_tensors<'a>(&'a self, out: &mut Vec<&'a ObjRef<NDArray>>) -> bool {
        match self {
            Value::Tensor(t) => {
                out.push(t);
                true
            }
            Value::Tuple(items) => items.iter().all(|v| v.flatten_tensors(out)),
            _ => false,
        }
    }

    pub fn tuple(&self) -> Result<&Arc<[Value]>> {
        match self {
            Value::Tuple(t) => Ok(t),
            _ => Err(self.want("a Tuple")),
        }
    }

    pub fn dtype(&self) -> Result<DLDataType> {
        match self {
            Value::DataType(d) => Ok(*d),
            Value::Str(s) => s.parse(),
            _ => Err(self.want("a DataType")),
        }
    }

    /// A string argument, or None (the optional error contexts of the checking builtins).
    pub fn opt_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Argument `i` of a host's call: tensors, numbers, strings and containers are read; plain
    /// DLTensors (no NDArray behind them) are copied, as the VM keeps what it is given.
    pub fn from_arg(a: &Args<'_>, i: usize, device: DLDevice) -> Result<Value> {
        Ok(match a.code(i) {
            kTVMArgInt | 1 => Value::Int(a.int_bits(i)?),
            kTVMArgFloat => Value::Float(a.float(i)?),
            kTVMNullptr => Value::None,
            kTVMDataType => Value::DataType(a.data_type(i)?),
            kTVMStr | kTVMBytes => Value::Str(a.str(i)?.into()),
            kTVMDLTensorHandle => Value::Tensor(NDArray::copy_of(a.tensor(i)?, device)?),
            kTVMObjectHandle | kTVMModuleHandle | kTVMPackedFuncHandle | kTVMNDArrayHandle => match a.object(i)? {
                // A tensor on another device is copied to the VM's, as upstream's VM does.
                Some(o) => match Value::from_object(o) {
                    Value::Tensor(t) if t.device() != device => Value::Tensor(NDArray::copy_of(t.raw(), device)?),
                    v => v,
                },
                None => Value::None,
            },
            code => {
                return Err(Error::type_err(format!(
                    "argument {i}: a {} cannot be a Relax value",
                    crate::packed::args::type_code_name(code)
                )))
            }
        })
    }

    /// An object as a value: tensors, shapes, strings, arrays and functions are the VM's own.
    pub fn from_object(o: AnyObject) -> Value {
        let o = match o.downcast::<NDArray>() {
            Ok(t) => return Value::Tensor(t),
            Err(o) => o,
        };
        if let Some(s) = o.payload::<ShapeTupleObj>() {
            return Value::Shape(s.dims().into());
        }
        if let Some(s) = o.payload::<StringObj>() {
            return Value::Str(s.as_str().into());
        }
        let o = match o.downcast::<ArrayObj>() {
            Ok(a) => return Value::Tuple(a.items().iter().cloned().map(Value::from_object).collect()),
            Err(o) => o,
        };
        match o.downcast::<PackedFunc>() {
            Ok(f) => Value::Func(Callable::Packed(f)),
            Err(o) => Value::Object(o),
        }
    }

    /// The value as an object (inside a tuple returned to a host).
    pub fn to_object(&self) -> Result<Option<AnyObject>> {
        Ok(Some(match self {
            Value::None => return Ok(None),
            Value::Tensor(t) => t.clone().into_any(),
            Value::Shape(s) => ShapeTupleObj::new(s).into_any(),
            Value::Str(s) => StringObj::new(s).into_any(),
            Value::Tuple(items) => {
                let objects = items.iter().map(|v| {
                    v.to_object()?.ok_or_else(|| Error::type_err("a tuple holding None cannot be returned to a host"))
                });
                ArrayObj::new(objects.collect::<Result<_>>()?).into_any()
            }
            Value::Func(Callable::Packed(f)) => f.clone().into_any(),
            Value::Object(o) => o.clone(),
            other => {
                return Err(Error::type_err(format!(
                    "a {} inside a tuple cannot be returned to a host of the classic ABI",
                    other.kind()
                )))
            }
        }))
    }

    /// The value returned to a host.
    pub fn to_ret(&self) -> Result<RetValue> {
        Ok(match self {
            Value::None => RetValue::None,
            Value::Int(i) => RetValue::Int(*i),
            Value::Float(f) => RetValue::Float(*f),
            Value::DataType(d) => RetValue::DataType(*d),
            Value::Str(s) => RetValue::Str(s.to_string()),
            other => match other.to_object()? {
                Some(o) => RetValue::Object(o),
                None => RetValue::None,
            },
        })
    }

    /// A value the VM reads back from a packed function's return.
    pub fn from_ret(r: RetValue) -> Result<Value> {
        Ok(match r {
            RetValue::None => Value::None,
            RetValue::Int(i) => Value::Int(i),
            RetValue::Float(f) => Value::Float(f),
            RetValue::Str(s) => Value::Str(s.into()),
            RetValue::DataType(d) => Value::DataType(d),
            RetValue::Object(o) => Value::from_object(o),
            other => return Err(Error::type_err(format!("a function returned {other:?}, which Relax does not hold"))),
        })
    }

    /// The value as a borrowed argument, when it is one of the kinds kernels take (else None:
    /// the caller builds owned arguments instead).
    pub fn item(&self) -> Option<crate::packed::Item<'_>> {
        use crate::packed::Item;
        Some(match self {
            Value::None => Item::Null,
            Value::Int(i) => Item::Int(*i),
            Value::Float(f) => Item::Float(*f),
            Value::DataType(d) => Item::DataType(*d),
            Value::Tensor(t) => Item::Tensor(t),
            Value::Object(o) => Item::Object(o),
            _ => return None,
        })
    }

    /// Appends the value to a packed call's arguments (a kernel's or a global's).
    pub fn push_arg(&self, b: &mut ArgsBuilder) -> Result<()> {
        match self {
            Value::None => b.null(),
            Value::Int(i) => b.int(*i),
            Value::Float(f) => b.float(*f),
            Value::DataType(d) => b.dtype(*d),
            Value::Str(s) => b.str(s),
            Value::Tensor(t) => b.object(t.clone().into_any()),
            Value::Func(Callable::Packed(f)) => b.object(f.clone().into_any()),
            Value::Object(o) => b.object(o.clone()),
            other => match other.to_object()? {
                Some(o) => b.object(o),
                None => b.null(),
            },
        };
        Ok(())
    }
}

/// Booleans are `uint1` to classic hosts and DLPack's `bool` (code 6, 8 bits) to tvm-ffi kernels:
/// one byte an element in both, so a tensor crossing is relabelled, not copied.
pub(crate) const CLASSIC_BOOL: DLDataType = DLDataType { code: kDLUInt, bits: 1, lanes: 1 };
pub(crate) const FFI_BOOL: DLDataType = DLDataType { code: kDLBool, bits: 8, lanes: 1 };

impl Value {
    /// The value with its boolean tensors (at any depth) relabelled from `from` to `to`.
    #[inline]
    pub fn relabel_bools(self, from: DLDataType, to: DLDataType) -> Result<Value> {
        // Most values hold no tensor of `from`: given back as they are, without a rebuild.
        if self.holds_dtype(from) {
            self.relabelled(from, to)
        } else {
            Ok(self)
        }
    }

    fn relabelled(self, from: DLDataType, to: DLDataType) -> Result<Value> {
        Ok(match self {
            Value::Tensor(t) if t.dtype() == from => {
                let view = NDArray::create_view(&t, t.shape(), to).or_else(|_| {
                    let copy = NDArray::copy_of(t.raw(), t.device())?;
                    NDArray::create_view(&copy, t.shape(), to)
                })?;
                Value::Tensor(view)
            }
            Value::Tuple(items) => Value::Tuple(
                items.iter().map(|v| v.clone().relabel_bools(from, to)).collect::<Result<Vec<_>>>()?.into(),
            ),
            other => other,
        })
    }
}
