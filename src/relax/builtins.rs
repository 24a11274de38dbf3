//! The `vm.builtin.*` functions ordinary models call (storage and tensors, the shape heap, shape
//! matching and checks, tuples, closures, reshape, copies), run inside the machine: resolved by
//! name once when a VM is initialised, called without a packed call.
//!
//! The `relax.run.*` operators upstream leaves to its Python package are here too
//! ([`super::run_ops`]). The LLM builtins (KV caches, RNN state, sampling) are not here: an executable that names one
//! is refused when its VM is initialised, naming the function.

use super::value::{Callable, Value};
use crate::dlpack::{kDLBool, kDLCPU, kDLFloat, kDLInt, kDLUInt, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::tensor::{Buffer, NDArray};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    AllocShapeHeap,
    MatchPrimValue,
    MatchShape,
    MakePrimValue,
    MakeShape,
    CheckTensorInfo,
    CheckShapeInfo,
    CheckPrimValueInfo,
    CheckTupleInfo,
    CheckFuncInfo,
    AllocStorage,
    AllocTensor,
    MakeClosure,
    InvokeClosure,
    CallTirDyn,
    ShapeOf,
    Copy,
    Reshape,
    NullValue,
    ToDevice,
    ReadIfCond,
    TupleGetItem,
    TupleResetItem,
    MakeTuple,
    TensorToShape,
    EnsureZeroOffset,
    MemoryManagerClear,
    RunShapeToTensor,
    RunNonzero,
    RunUnique,
    RunAssert,
    RunPrint,
}

impl Builtin {
    pub fn by_name(name: &str) -> Option<Builtin> {
        use Builtin::*;
        if let Some(op) = name.strip_prefix("relax.run.") {
            return Some(match op {
                "shape_to_tensor" => RunShapeToTensor,
                "nonzero" => RunNonzero,
                "unique" => RunUnique,
                "assert_op" => RunAssert,
                "print" => RunPrint,
                _ => return None,
            });
        }
        Some(match name.strip_prefix("vm.builtin.")? {
            "alloc_shape_heap" => AllocShapeHeap,
            "match_prim_value" => MatchPrimValue,
            "match_shape" => MatchShape,
            "make_prim_value" => MakePrimValue,
            "make_shape" => MakeShape,
            "check_tensor_info" => CheckTensorInfo,
            "check_shape_info" => CheckShapeInfo,
            "check_prim_value_info" => CheckPrimValueInfo,
            "check_tuple_info" => CheckTupleInfo,
            "check_func_info" => CheckFuncInfo,
            "alloc_storage" => AllocStorage,
            "alloc_tensor" => AllocTensor,
            "make_closure" => MakeClosure,
            "invoke_closure" => InvokeClosure,
            "call_tir_dyn" => CallTirDyn,
            "shape_of" => ShapeOf,
            "copy" => Copy,
            "reshape" => Reshape,
            "null_value" => NullValue,
            "to_device" => ToDevice,
            "read_if_cond" => ReadIfCond,
            "tuple_getitem" => TupleGetItem,
            "tuple_reset_item" => TupleResetItem,
            "make_tuple" => MakeTuple,
            "tensor_to_shape" => TensorToShape,
            "ensure_zero_offset" => EnsureZeroOffset,
            "memory_manager.clear" => MemoryManagerClear,
            _ => return None,
        })
    }
}

/// One top-level call's scratch: the shape heaps it made (kept alive, so no other tensor can
/// take their address) and its depth of nested Relax calls.
#[derive(Default)]
pub struct CallCtx {
    pub heaps: Vec<ObjRef<NDArray>>,
    pub depth: usize,
    /// The profiler's record of this call's kernel and builtin calls, when it is profiled.
    pub recorder: Option<crate::vm::profiler::Recorder>,
}

/// What the builtins need of the machine running them.
pub trait Machine {
    /// A device by the index the code uses (-1: the host).
    fn device_at(&self, i: i64) -> Result<DLDevice>;
    /// Calls a function value (a closure or a packed function).
    fn call_value(&self, f: &Value, args: &[&Value], cx: &mut CallCtx) -> Result<Value>;
    /// A block of `bytes` on the device the code calls `device` (-1: the host), from its pool.
    fn storage(&self, device: i64, bytes: usize) -> Result<Arc<Buffer>>;
}

// The argument readers run several times a call: inlined, their errors made out of line.
#[inline]
fn arg<'a>(args: &[&'a Value], i: usize) -> Result<&'a Value> {
    match args.get(i) {
        Some(v) => Ok(v),
        None => Err(missing(args, i)),
    }
}

#[cold]
fn missing(args: &[&Value], i: usize) -> Error {
    Error::type_err(format!("argument {i} missing: {} given", args.len()))
}

#[inline]
fn int(args: &[&Value], i: usize) -> Result<i64> {
    match args.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        _ => Err(not_int(args, i)),
    }
}

#[cold]
fn not_int(args: &[&Value], i: usize) -> Error {
    match arg(args, i) {
        Err(missing) => missing,
        Ok(v) => v.int().expect_err("called for a value that is not an int").context(format!("argument {i}")),
    }
}

/// A check's error context (the compiler's `ErrorContext(...)` string argument), written before its
/// message: formatted only when a check fails (checks run on every call).
#[derive(Clone, Copy)]
struct Context<'a>(Option<&'a str>);

impl std::fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(s) => write!(f, "{s} "),
            None => Ok(()),
        }
    }
}

fn context<'a>(args: &[&'a Value], i: usize) -> Context<'a> {
    Context(args.get(i).copied().and_then(Value::opt_str))
}

/// How `match_shape` treats one dimension.
const ASSERT_EQUAL_TO_IMM: i64 = 0;
const STORE_TO_HEAP: i64 = 1;
const NO_OP: i64 = 2;
const ASSERT_EQUAL_TO_LOAD: i64 = 3;
/// How `make_shape` makes one dimension.
const USE_IMM: i64 = 0;
const LOAD_SHAPE: i64 = 1;

/// The shape heap: an int64 tensor this call allocated (`alloc_shape_heap`), which shape kernels
/// fill and the shape builtins read and write, in place.
struct Heap<'a> {
    tensor: Option<&'a ObjRef<NDArray>>,
}

impl<'a> Heap<'a> {
    fn of(cx: &CallCtx, v: &'a Value) -> Result<Heap<'a>> {
        let tensor = match v {
            Value::None => return Ok(Heap { tensor: None }),
            Value::Tensor(t) => t,
            other => return Err(Error::type_err(format!("the shape heap is a {}", other.kind()))),
        };
        // Only a heap of this call's making is read or written: never a caller's tensor.
        if !cx.heaps.iter().any(|h| ObjRef::ptr_eq(h, tensor)) {
            return Err(Error::value("the shape heap argument is not a heap alloc_shape_heap made"));
        }
        Ok(Heap { tensor: Some(tensor) })
    }

    /// The heap's slot `i`, bounds-checked.
    fn slot(&self, i: i64) -> Result<*mut i64> {
        let t = self.tensor.ok_or_else(|| Error::value(format!("shape heap slot {i} of an absent heap")))?;
        let n = t.shape().first().copied().unwrap_or(0);
        if !(0..n).contains(&i) {
            return Err(Error::value(format!("shape heap slot {i} of {n}")));
        }
        Ok(t.data_ptr().cast::<i64>().wrapping_add(i as usize))
    }

    fn get(&self, i: i64) -> Result<i64> {
        let p = self.slot(i)?;
        // SAFETY: a slot inside the heap, a host int64 tensor of `alloc_shape_heap` (64-byte
        // aligned) that only this call's builtins and the kernels it runs, one at a time on this
        // thread, touch (checked in `of`: a heap this call made, which it keeps alive).
        Ok(unsafe { p.read() })
    }

    fn set(&mut self, i: i64, v: i64) -> Result<()> {
        let p = self.slot(i)?;
        // SAFETY: as in `get`.
        unsafe { p.write(v) };
        Ok(())
    }
}

/// `match_shape`'s and `match_prim_value`'s treatment of one value.
fn match_one(heap: &mut Heap<'_>, code: i64, reg: i64, value: i64, what: &dyn Fn() -> String) -> Result<()> {
    match code {
        ASSERT_EQUAL_TO_IMM if value != reg => {
            Err(Error::value(format!("{} mismatch to specified constant: {value} != {reg}", what())))
        }
        STORE_TO_HEAP => heap.set(reg, value),
        ASSERT_EQUAL_TO_LOAD => {
            let want = heap.get(reg)?;
            if value != want {
                return Err(Error::value(format!(
                    "{} mismatch to a previous populated value: {value} != {want}",
                    what()
                )));
            }
            Ok(())
        }
        ASSERT_EQUAL_TO_IMM | NO_OP => Ok(()),
        code => Err(Error::value(format!("unknown match shape code {code}"))),
    }
}

fn shape_of(v: &Value) -> Result<&[i64]> {
    match v {
        Value::Tensor(t) => Ok(t.shape()),
        Value::Shape(s) => Ok(s),
        other => Err(Error::type_err(format!("expected a Tensor or a Shape, got {}", other.kind()))),
    }
}

/// The integer in a scalar tensor (`read_if_cond`, `tensor_to_shape`).
fn ints_of(t: &NDArray) -> Result<Vec<i64>> {
    let dt = t.dtype();
    if !matches!(dt.code, kDLInt | kDLUInt | kDLBool) || dt.lanes != 1 {
        return Err(Error::type_err(format!("expected an integer tensor, got {dt}")));
    }
    let host = if t.device().device_type == kDLCPU { None } else { Some(NDArray::copy_of(t.raw(), DLDevice::CPU)?) };
    let bytes = host.as_deref().unwrap_or(t).to_vec();
    let signed = dt.code == kDLInt;
    Ok(match dt.bits {
        1 | 8 => bytes.iter().map(|&b| if signed { b as i8 as i64 } else { b as i64 }).collect(),
        16 => bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as i64).collect(),
        32 => bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4")) as i64).collect(),
        64 => bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8"))).collect(),
        b => return Err(Error::type_err(format!("an integer tensor of {b} bits"))),
    })
}

impl Builtin {
    /// Runs the builtin on `args` for machine `m`.
    pub fn call(self, m: &impl Machine, args: &[&Value], cx: &mut CallCtx) -> Result<Value> {
        use Builtin::*;
        Ok(match self {
            AllocShapeHeap => {
                let n = usize::try_from(int(args, 1)?).map_err(|_| Error::value("negative shape heap size"))?;
                let t = NDArray::empty(&[n as i64], DLDataType::new(kDLInt, 64, 1), DLDevice::CPU)?;
                cx.heaps.push(t.clone());
                Value::Tensor(t)
            }
            MatchPrimValue => {
                let mut heap = Heap::of(cx, arg(args, 1)?)?;
                let ctx = context(args, 4);
                match_one(&mut heap, int(args, 2)?, int(args, 3)?, int(args, 0)?, &|| {
                    format!("{ctx}match_cast: PrimExpr")
                })?;
                Value::None
            }
            MatchShape => {
                let shape = shape_of(arg(args, 0)?)?;
                let mut heap = Heap::of(cx, arg(args, 1)?)?;
                let n = int(args, 2)?;
                let n_us = usize::try_from(n).map_err(|_| Error::value(format!("match_shape of {n} dims")))?;
                let ctx = context(args, 3 + 2 * n_us);
                if shape.len() != n_us {
                    return Err(Error::value(format!("{ctx}match_cast shape size mismatch: {} != {n}", shape.len())));
                }
                for (i, &dim) in shape.iter().enumerate() {
                    let (code, reg) = (int(args, 3 + 2 * i)?, int(args, 4 + 2 * i)?);
                    match_one(&mut heap, code, reg, dim, &|| format!("{ctx}match_cast shape[{i}]"))?;
                }
                Value::None
            }
            MakePrimValue => {
                let heap = Heap::of(cx, arg(args, 0)?)?;
                match int(args, 1)? {
                    USE_IMM => Value::Int(int(args, 2)?),
                    LOAD_SHAPE => Value::Int(heap.get(int(args, 2)?)?),
                    c => return Err(Error::value(format!("invalid shape code {c}"))),
                }
            }
            MakeShape => {
                let heap = Heap::of(cx, arg(args, 0)?)?;
                let n = usize::try_from(int(args, 1)?).map_err(|_| Error::value("negative make_shape size"))?;
                let dims = (0..n)
                    .map(|i| match int(args, 2 + 2 * i)? {
                        USE_IMM => int(args, 3 + 2 * i),
                        LOAD_SHAPE => heap.get(int(args, 3 + 2 * i)?),
                        c => Err(Error::value(format!("invalid shape code {c}"))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Value::Shape(dims.into())
            }
            CheckTensorInfo => {
                let (dtype, ctx) = match args.len() {
                    3 => (None, context(args, 2)),
                    _ => (
                        match arg(args, 2)? {
                            Value::None => None,
                            v => Some(v.dtype()?),
                        },
                        context(args, 3),
                    ),
                };
                let t = match arg(args, 0)? {
                    Value::Tensor(t) => t,
                    other => return Err(Error::type_err(format!("{ctx}expect a Tensor but get {}", other.kind()))),
                };
                let ndim = int(args, 1)?;
                if ndim != -1 && t.shape().len() as i64 != ndim {
                    return Err(Error::value(format!(
                        "{ctx}expect Tensor with ndim {ndim} but get {}",
                        t.shape().len()
                    )));
                }
                if let Some(want) = dtype {
                    if t.dtype() != want {
                        return Err(Error::value(format!(
                            "{ctx}expect Tensor with dtype {want} but get {}",
                            t.dtype()
                        )));
                    }
                }
                Value::None
            }
            CheckShapeInfo => {
                let ctx = context(args, 2);
                let s = match arg(args, 0)? {
                    Value::Shape(s) => s,
                    other => return Err(Error::type_err(format!("{ctx}expect a Shape but get {}", other.kind()))),
                };
                let ndim = int(args, 1)?;
                if ndim != -1 && s.len() as i64 != ndim {
                    return Err(Error::value(format!("{ctx}expect Shape with ndim {ndim} but get {}", s.len())));
                }
                Value::None
            }
            CheckPrimValueInfo => {
                let ctx = context(args, 2);
                let dtype = arg(args, 1)?.dtype()?;
                let ok = match arg(args, 0)? {
                    Value::Int(_) => matches!(dtype.code, kDLInt | kDLUInt | kDLBool) || dtype.code == kDLFloat,
                    Value::Float(_) => dtype.code == kDLFloat,
                    _ => false,
                };
                if !ok {
                    return Err(Error::type_err(format!(
                        "{ctx}expected dtype {dtype}, but received {}",
                        arg(args, 0)?.kind()
                    )));
                }
                Value::None
            }
            CheckTupleInfo => {
                let ctx = context(args, 2);
                let t = match arg(args, 0)? {
                    Value::Tuple(t) => t,
                    other => return Err(Error::type_err(format!("{ctx}expect a Tuple but get {}", other.kind()))),
                };
                let n = int(args, 1)?;
                if t.len() as i64 != n {
                    return Err(Error::value(format!(
                        "{ctx}expect a Tuple with {n} elements, but get a Tuple with {} elements",
                        t.len()
                    )));
                }
                Value::None
            }
            CheckFuncInfo => {
                if !matches!(arg(args, 0)?, Value::Func(_)) {
                    let ctx = context(args, 1);
                    return Err(Error::type_err(format!("{ctx}expect a Function but get {}", arg(args, 0)?.kind())));
                }
                Value::None
            }
            AllocStorage => {
                let shape = arg(args, 1)?.shape()?;
                let device = int(args, 2)?;
                let dtype = arg(args, 3)?.dtype()?;
                let mut bytes: usize = dtype.element_bytes();
                for &d in shape {
                    let d = usize::try_from(d).map_err(|_| Error::value(format!("storage of shape {shape:?}")))?;
                    bytes = bytes.checked_mul(d).ok_or_else(|| Error::value(format!("storage of shape {shape:?}")))?;
                }
                crate::host_memory::check_size(bytes)?;
                Value::Storage(m.storage(device, bytes)?)
            }
            AllocTensor => {
                let storage = match arg(args, 0)? {
                    Value::Storage(s) => s,
                    other => return Err(Error::type_err(format!("alloc_tensor in a {}, not a Storage", other.kind()))),
                };
                let offset = usize::try_from(int(args, 1)?).map_err(|_| Error::value("negative tensor offset"))?;
                Value::Tensor(NDArray::view_of(storage, offset, arg(args, 2)?.shape()?, arg(args, 3)?.dtype()?)?)
            }
            MakeClosure => match arg(args, 0)? {
                Value::Func(Callable::Closure { func, bound }) => {
                    let mut all: Vec<Value> = args[1..].iter().map(|&v| v.clone()).collect();
                    all.extend(bound.iter().cloned());
                    Value::Func(Callable::Closure { func: *func, bound: all.into() })
                }
                other => return Err(Error::type_err(format!("make_closure of a {}", other.kind()))),
            },
            InvokeClosure => m.call_value(arg(args, 1)?, &args[2..], cx)?,
            CallTirDyn => {
                let f = arg(args, 0)?;
                let (last, middle) =
                    args[1..].split_last().ok_or_else(|| Error::type_err("call_tir_dyn without a shape"))?;
                let dims: Vec<Value> = last.shape()?.iter().map(|&d| Value::Int(d)).collect();
                let mut all = middle.to_vec();
                all.extend(&dims);
                m.call_value(f, &all, cx)?
            }
            ShapeOf => Value::Shape(arg(args, 0)?.tensor()?.shape().into()),
            Copy => arg(args, 0)?.clone(),
            Reshape => {
                let t = arg(args, 0)?.tensor()?;
                Value::Tensor(NDArray::create_view(t, arg(args, 1)?.shape()?, t.dtype())?)
            }
            NullValue => Value::None,
            ToDevice => {
                let t = arg(args, 0)?.tensor()?;
                let device = DLDevice { device_type: int(args, 1)? as i32, device_id: int(args, 2)? as i32 };
                Value::Tensor(NDArray::copy_of(t.raw(), device)?)
            }
            ReadIfCond => match arg(args, 0)? {
                Value::Int(i) => Value::Int((*i != 0) as i64),
                Value::Tensor(t) => {
                    let first =
                        ints_of(t)?.first().copied().ok_or_else(|| Error::value("an empty condition tensor"))?;
                    Value::Int((first != 0) as i64)
                }
                other => return Err(Error::type_err(format!("a condition of {}", other.kind()))),
            },
            TupleGetItem => {
                let t = arg(args, 0)?.tuple()?;
                let i = int(args, 1)?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| t.get(i))
                    .cloned()
                    .ok_or_else(|| Error::index(format!("tuple item {i} of {}", t.len())))?
            }
            // Resetting frees an item early; tuples are shared values here, so the item goes
            // with the tuple instead.
            TupleResetItem => Value::None,
            MakeTuple => Value::Tuple(args.iter().map(|&v| v.clone()).collect()),
            TensorToShape => {
                let t = arg(args, 0)?.tensor()?;
                if t.shape().len() != 1 {
                    return Err(Error::value(format!("tensor_to_shape of a {}-d tensor", t.shape().len())));
                }
                Value::Shape(ints_of(t)?.into())
            }
            EnsureZeroOffset => arg(args, 0)?.clone(),
            MemoryManagerClear => Value::None,
            RunShapeToTensor => super::run_ops::shape_to_tensor(args)?,
            RunNonzero => super::run_ops::nonzero(args)?,
            RunUnique => super::run_ops::unique(args)?,
            RunAssert => super::run_ops::assert_op(args)?,
            RunPrint => super::run_ops::print(args)?,
        })
    }
}
