//! Packed-call arguments: a borrowed view of the caller's value and type-code arrays, converted
//! on demand (no copy per call), and a builder for calls made from Rust.

use super::containers::StringObj;
use super::value::object_to_value;
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef, ObjectHeader, ObjectType};
use crate::tensor::ndarray::NDARRAY_TENSOR_OFFSET;
use crate::tensor::raw::ZeroCopy;
use crate::tensor::{FileMap, NDArray, RawTensor};
use std::ffi::{c_void, CStr, CString};
use std::sync::Arc;

/// `from_raw`'s error: a negative count, or arguments announced in arrays that are not there.
#[cold]
fn bad_arrays(n: i32) -> Error {
    if n < 0 {
        return Error::value(format!("negative argument count {n}"));
    }
    Error::value(format!("{n} arguments announced but the value or code array is null"))
}

/// `expect_count`'s error, out of the callers' way.
#[cold]
fn count_error(func: &str, lo: usize, hi: usize, n: usize) -> Error {
    let want = if lo == hi { lo.to_string() } else { format!("{lo} to {hi}") };
    Error::type_err(format!("{func} takes {want} arguments, {n} given"))
}

pub fn type_code_name(code: i32) -> &'static str {
    match code {
        kTVMArgInt => "int",
        kTVMArgFloat => "float",
        kTVMOpaqueHandle => "handle",
        kTVMNullptr => "NULL",
        kTVMDataType => "DataType",
        kDLDevice => "Device",
        kTVMDLTensorHandle => "ArrayHandle",
        kTVMObjectHandle => "Object",
        kTVMModuleHandle => "Module",
        kTVMPackedFuncHandle => "PackedFunc",
        kTVMStr => "str",
        kTVMBytes => "bytes",
        kTVMNDArrayHandle => "NDArray",
        kTVMObjectRValueRefArg => "ObjectRValueRef",
        _ => "unknown",
    }
}

/// The arguments of one call, borrowed for its duration.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    values: &'a [TVMValue],
    codes: &'a [i32],
}

impl<'a> Args<'a> {
    pub const EMPTY: Args<'static> = Args { values: &[], codes: &[] };

    /// # Safety
    /// `values` and `codes` must hold `n` elements, and each value must be what its code says
    /// (live handles, NUL-terminated strings) for `'a`: the packed-call contract.
    #[inline]
    pub unsafe fn from_raw(values: *const TVMValue, codes: *const i32, n: i32) -> Result<Args<'a>> {
        if n == 0 {
            return Ok(Args { values: &[], codes: &[] });
        }
        if n < 0 || values.is_null() || codes.is_null() {
            return Err(bad_arrays(n));
        }
        // SAFETY: per the contract.
        unsafe {
            Ok(Args {
                values: std::slice::from_raw_parts(values, n as usize),
                codes: std::slice::from_raw_parts(codes, n as usize),
            })
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn raw_values(&self) -> &'a [TVMValue] {
        self.values
    }

    pub fn raw_codes(&self) -> &'a [i32] {
        self.codes
    }

    /// The type code of argument `i` (14, an object by rvalue reference, reads as 8 or 4).
    #[inline]
    pub fn code(&self, i: usize) -> i32 {
        self.get(i).map_or(-1, |(_, c)| c)
    }

    /// Fails unless there are exactly `n` arguments (or within `lo..=hi`).
    #[inline]
    pub fn expect_count(&self, func: &str, lo: usize, hi: usize) -> Result<()> {
        let n = self.len();
        if n < lo || n > hi {
            return Err(count_error(func, lo, hi, n));
        }
        Ok(())
    }

    /// Argument `i` and its code. An object passed by rvalue reference (code 14: the address of
    /// the caller's object slot, how C++ hosts pass temporaries) reads as the object it refers to
    /// (code 8), so every accessor takes it where it takes an object, as upstream's do.
    ///
    /// Every accessor starts here, several per executor call: inlined, with the rvalue reference
    /// and the missing argument out of line.
    #[inline]
    fn get(&self, i: usize) -> Result<(TVMValue, i32)> {
        match (self.values.get(i), self.codes.get(i)) {
            (Some(v), Some(&c)) if c != kTVMObjectRValueRefArg => Ok((*v, c)),
            _ => self.get_unusual(i),
        }
    }

    #[cold]
    fn get_unusual(&self, i: usize) -> Result<(TVMValue, i32)> {
        match (self.values.get(i), self.codes.get(i)) {
            (Some(v), Some(&kTVMObjectRValueRefArg)) => {
                // SAFETY: code 14 carries the address of the caller's object slot, live for the call.
                let obj = unsafe { v.v_handle.cast::<*mut c_void>().as_ref() }.copied().unwrap_or(std::ptr::null_mut());
                Ok(if obj.is_null() {
                    (TVMValue::NULL, kTVMNullptr)
                } else {
                    (TVMValue { v_handle: obj }, kTVMObjectHandle)
                })
            }
            (Some(v), Some(c)) => Ok((*v, *c)),
            _ => Err(Error::index(format!("argument {i} missing: only {} given", self.len()))),
        }
    }

    #[cold]
    fn mismatch(&self, i: usize, want: &str) -> Error {
        let code = self.code(i);
        Error::type_err(format!("argument {i}: expected {want}, got {} (type code {code})", type_code_name(code)))
    }

    /// Argument `i` when it is an int (code 0), read with no other decoding: the common form of
    /// an executor's keys.
    #[inline]
    pub fn int_if_int(&self, i: usize) -> Option<i64> {
        match (self.values.get(i), self.codes.get(i)) {
            // SAFETY: code 0 carries `v_int64`.
            (Some(v), Some(&kTVMArgInt)) => Some(unsafe { v.v_int64 }),
            _ => None,
        }
    }

    #[inline]
    pub fn int(&self, i: usize) -> Result<i64> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: code 0 carries `v_int64`.
            kTVMArgInt => Ok(unsafe { v.v_int64 }),
            _ => Err(self.mismatch(i, "int")),
        }
    }

    /// An int that must fit `i32` (indices, device ids).
    pub fn int32(&self, i: usize) -> Result<i32> {
        let v = self.int(i)?;
        i32::try_from(v).map_err(|_| Error::value(format!("argument {i}: {v} does not fit a 32-bit int")))
    }

    pub fn float(&self, i: usize) -> Result<f64> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: code 2 carries `v_float64`.
            kTVMArgFloat => Ok(unsafe { v.v_float64 }),
            // SAFETY: code 0 carries `v_int64`.
            kTVMArgInt => Ok(unsafe { v.v_int64 } as f64),
            _ => Err(self.mismatch(i, "float")),
        }
    }

    /// A data type argument (type code 5).
    pub fn data_type(&self, i: usize) -> Result<DLDataType> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: code 5 carries `v_type`.
            kTVMDataType => Ok(unsafe { v.v_type }),
            kTVMStr => self.str(i)?.parse(),
            _ => Err(self.mismatch(i, "DataType")),
        }
    }

    /// The raw 64 bits of an integer argument of either signedness (codes 0 and 1).
    pub fn int_bits(&self, i: usize) -> Result<i64> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: codes 0 and 1 carry `v_int64`.
            kTVMArgInt | 1 => Ok(unsafe { v.v_int64 }),
            _ => Err(self.mismatch(i, "int")),
        }
    }

    /// The address a pointer argument holds (an opaque handle, a tensor, a string), as bits: for
    /// translating arguments into tvm-ffi's cells, which borrow the same.
    pub(crate) fn pointer_bits(&self, i: usize) -> Result<u64> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: these codes carry a pointer (`v_str` is the same bits as `v_handle`).
            kTVMOpaqueHandle | kTVMDLTensorHandle | kTVMNDArrayHandle | kTVMStr => Ok(unsafe { v.v_handle } as u64),
            _ => Err(self.mismatch(i, "pointer")),
        }
    }

    pub fn handle(&self, i: usize) -> Result<*mut c_void> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: codes 3 and 7 carry `v_handle`.
            kTVMOpaqueHandle | kTVMDLTensorHandle => Ok(unsafe { v.v_handle }),
            kTVMNullptr => Ok(std::ptr::null_mut()),
            _ => Err(self.mismatch(i, "handle")),
        }
    }

    /// `n` int64 values a handle argument points to: how generated code passes a shape (a stack
    /// array valid for the call, as `device_api.opencl.alloc_nd` takes it).
    pub fn i64_array(&self, i: usize, n: usize) -> Result<Vec<i64>> {
        let p = self.handle(i)?.cast::<i64>();
        if p.is_null() || n > 64 {
            return Err(Error::value(format!("argument {i}: expected an array of {n} int64, got {p:?}")));
        }
        // SAFETY: the packed-call contract: a handle passed for an array addresses it for the
        // call (checked non-null and of a sane length above).
        Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
    }

    pub fn device(&self, i: usize) -> Result<DLDevice> {
        let (v, c) = self.get(i)?;
        match c {
            // SAFETY: code 6 carries `v_device`.
            kDLDevice => Ok(unsafe { v.v_device }),
            _ => Err(self.mismatch(i, "Device")),
        }
    }

    /// A string argument: `str`, `bytes` (UTF-8), or a String object.
    pub fn str(&self, i: usize) -> Result<&'a str> {
        let (v, c) = self.get(i)?;
        match c {
            kTVMStr => {
                // SAFETY: code 11 carries a NUL-terminated string valid for the call.
                let p = unsafe { v.v_str };
                if p.is_null() {
                    return Err(Error::value(format!("argument {i}: null string")));
                }
                // SAFETY: non-null, NUL-terminated per the contract.
                unsafe { CStr::from_ptr(p) }
                    .to_str()
                    .map_err(|_| Error::value(format!("argument {i}: string is not UTF-8")))
            }
            kTVMBytes => std::str::from_utf8(self.bytes(i)?)
                .map_err(|_| Error::value(format!("argument {i}: bytes are not UTF-8"))),
            kTVMObjectHandle => {
                let obj = self.borrowed_object(i)?.ok_or_else(|| self.mismatch(i, "str"))?;
                let s = obj.downcast_ref::<StringObj>().ok_or_else(|| self.mismatch(i, "str"))?;
                // SAFETY: the caller's handle keeps the String alive for the call, beyond our
                // temporary count.
                Ok(unsafe { &*(s.as_str() as *const str) })
            }
            _ => Err(self.mismatch(i, "str")),
        }
    }

    /// Whether argument `i` names something (a string) rather than indexing it.
    #[inline]
    pub fn is_name(&self, i: usize) -> bool {
        match self.code(i) {
            kTVMStr => true,
            kTVMObjectHandle => {
                self.borrowed_object(i).ok().flatten().is_some_and(|o| o.type_index() == StringObj::TYPE_INDEX)
            }
            _ => false,
        }
    }

    pub fn bytes(&self, i: usize) -> Result<&'a [u8]> {
        let (v, c) = self.get(i)?;
        match c {
            kTVMBytes => {
                // SAFETY: code 12 carries a `TVMByteArray*` valid for the call.
                let arr = unsafe { v.v_handle.cast::<TVMByteArray>().as_ref() }
                    .ok_or_else(|| Error::value(format!("argument {i}: null byte array")))?;
                if arr.size == 0 {
                    return Ok(&[]);
                }
                if arr.data.is_null() {
                    return Err(Error::value(format!("argument {i}: byte array of {} bytes at null", arr.size)));
                }
                // SAFETY: the byte array describes `size` readable bytes.
                Ok(unsafe { std::slice::from_raw_parts(arr.data.cast::<u8>(), arr.size) })
            }
            kTVMStr => {
                // SAFETY: code 11 carries a NUL-terminated string valid for the call.
                let p = unsafe { v.v_str };
                if p.is_null() {
                    return Err(Error::value(format!("argument {i}: null string")));
                }
                // SAFETY: non-null, NUL-terminated per the contract; bytes, so any encoding.
                Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
            }
            kTVMObjectHandle => Ok(self.str(i)?.as_bytes()),
            _ => Err(self.mismatch(i, "bytes")),
        }
    }

    /// A tensor argument: a plain DLTensor (7) or an NDArray (13).
    #[inline]
    pub fn tensor(&self, i: usize) -> Result<RawTensor<'a>> {
        let (v, c) = self.get(i)?;
        match c {
            kTVMDLTensorHandle | kTVMNDArrayHandle => {
                // SAFETY: codes 7 and 13 carry a `DLTensor*` valid for the call.
                unsafe { RawTensor::from_ptr(v.v_handle.cast()) }.map_err(|e| e.context(format!("argument {i}")))
            }
            _ => Err(self.mismatch(i, "tensor")),
        }
    }

    /// Copies `from` into tensor argument `i`, an output the caller gave (a packed call may
    /// write the tensors it is given, for the call); byte sizes must match.
    pub fn write_tensor(&self, i: usize, from: RawTensor<'_>) -> Result<()> {
        let to = self.tensor(i)?;
        // SAFETY: the caller's tensor, writable and not touched by others for the call (the
        // packed-call contract); its bytes are checked against `from`'s before the copy.
        unsafe { crate::tensor::raw::copy_tensor(from, to) }
    }

    /// A tensor argument to bind with zero-copy. Only for the functions whose documented
    /// contract is TVM's zero-copy one (`set_input_zero_copy`, `set_output_zero_copy`): their
    /// callers promise what [`ZeroCopy::new`] asks.
    pub(crate) fn zero_copy(&self, i: usize) -> Result<ZeroCopy<'a>> {
        let t = self.tensor(i)?;
        // SAFETY: the calling function's contract, as above: the caller keeps the tensor's memory
        // valid while bound and leaves it alone while the holder runs.
        Ok(unsafe { ZeroCopy::new(t) })
    }

    /// The file a path argument names (confined beneath the session's directory in a process
    /// serving RPC), mapped. Only for the functions whose documented contract is to map the file
    /// they are given (`load_params_from_file`, include/tvm_runtime.h): their callers keep it
    /// unchanged while anything mapped from it is in use.
    pub(crate) fn mapped_file(&self, i: usize) -> Result<Arc<FileMap>> {
        let path = crate::files::existing_file(std::path::Path::new(self.str(i)?))?;
        // SAFETY: the calling function's contract, as above.
        unsafe { FileMap::open(&path.to_string_lossy()) }
    }

    /// An object-like argument (codes 8, 9, 10, 13, 14), with a new count.
    pub fn object(&self, i: usize) -> Result<Option<AnyObject>> {
        let (_, c) = self.get(i)?;
        match c {
            kTVMObjectHandle | kTVMModuleHandle | kTVMPackedFuncHandle | kTVMNDArrayHandle | kTVMNullptr => {
                self.borrowed_object(i)
            }
            _ => Err(self.mismatch(i, "object")),
        }
    }

    fn borrowed_object(&self, i: usize) -> Result<Option<AnyObject>> {
        let (v, c) = self.get(i)?;
        // SAFETY: per code, `v_handle` is an object header or an NDArray's DLTensor (header 16
        // bytes before it), live for the call.
        unsafe {
            let header: *mut ObjectHeader = match c {
                kTVMNullptr => return Ok(None),
                kTVMObjectHandle | kTVMModuleHandle | kTVMPackedFuncHandle => v.v_handle.cast(),
                kTVMNDArrayHandle => {
                    if v.v_handle.is_null() {
                        return Ok(None);
                    }
                    v.v_handle.cast::<u8>().sub(NDARRAY_TENSOR_OFFSET).cast()
                }
                _ => return Err(self.mismatch(i, "object")),
            };
            Ok(AnyObject::retain_raw(header))
        }
    }

    fn typed<T: ObjectType>(&self, i: usize, want: &str) -> Result<ObjRef<T>> {
        let obj = self
            .object(i)
            .map_err(|_| self.mismatch(i, want))?
            .ok_or_else(|| Error::type_err(format!("argument {i}: expected {want}, got a null handle")))?;
        obj.downcast::<T>().map_err(|_| self.mismatch(i, want))
    }

    pub fn ndarray(&self, i: usize) -> Result<ObjRef<NDArray>> {
        self.typed(i, "NDArray")
    }

    pub fn typed_object<T: ObjectType>(&self, i: usize, want: &str) -> Result<ObjRef<T>> {
        self.typed(i, want)
    }
}

/// Calls `f` with `objects` as arguments, each under its natural code (as [`ArgsBuilder::object`]),
/// the arrays on the stack for up to 16 of them: what a VM's every primitive call passes, with no
/// allocation. The objects are borrowed, so alive for the call.
pub fn with_object_args<R>(objects: &[&AnyObject], f: impl FnOnce(&Args<'_>) -> R) -> R {
    const SMALL: usize = 16;
    if objects.len() <= SMALL {
        let mut values = [TVMValue::NULL; SMALL];
        let mut codes = [0i32; SMALL];
        for (i, o) in objects.iter().enumerate() {
            (values[i], codes[i]) = object_to_value(o);
        }
        f(&Args { values: &values[..objects.len()], codes: &codes[..objects.len()] })
    } else {
        let (values, codes): (Vec<TVMValue>, Vec<i32>) = objects.iter().map(|o| object_to_value(o)).unzip();
        f(&Args { values: &values, codes: &codes })
    }
}

/// One argument of [`with_items`]: what a VM passes to kernels and functions, borrowed.
#[derive(Clone, Copy)]
pub enum Item<'a> {
    Null,
    Int(i64),
    Float(f64),
    DataType(DLDataType),
    Tensor(&'a ObjRef<crate::tensor::NDArray>),
    Object(&'a AnyObject),
}

/// Calls `f` with `items` as arguments (tensors as NDArrays, code 13), the arrays on the stack
/// for up to 16 of them. The items are borrowed, so alive for the call.
pub fn with_items<R>(items: &[Item<'_>], f: impl FnOnce(&Args<'_>) -> R) -> R {
    fn one(item: &Item<'_>) -> (TVMValue, i32) {
        match item {
            Item::Null => (TVMValue::NULL, kTVMNullptr),
            Item::Int(i) => (TVMValue { v_int64: *i }, kTVMArgInt),
            Item::Float(x) => (TVMValue { v_float64: *x }, kTVMArgFloat),
            Item::DataType(t) => (TVMValue { v_type: *t }, kTVMDataType),
            Item::Tensor(t) => (
                TVMValue { v_handle: t.as_ptr().cast::<u8>().wrapping_add(NDARRAY_TENSOR_OFFSET).cast() },
                kTVMNDArrayHandle,
            ),
            Item::Object(o) => object_to_value(o),
        }
    }
    const SMALL: usize = 16;
    if items.len() <= SMALL {
        let mut values = [TVMValue::NULL; SMALL];
        let mut codes = [0i32; SMALL];
        for (i, item) in items.iter().enumerate() {
            (values[i], codes[i]) = one(item);
        }
        f(&Args { values: &values[..items.len()], codes: &codes[..items.len()] })
    } else {
        let (values, codes): (Vec<TVMValue>, Vec<i32>) = items.iter().map(one).unzip();
        f(&Args { values: &values, codes: &codes })
    }
}

/// Builds arguments for a call made from Rust; keeps what the values point to alive.
#[derive(Default)]
pub struct ArgsBuilder {
    values: Vec<TVMValue>,
    codes: Vec<i32>,
    strings: Vec<CString>,
    objects: Vec<AnyObject>,
    /// Byte arrays and the bytes they describe, boxed so their addresses stay put.
    byte_arrays: Vec<(Box<TVMByteArray>, Box<[u8]>)>,
}

impl ArgsBuilder {
    pub fn new() -> ArgsBuilder {
        ArgsBuilder::default()
    }

    fn push(&mut self, v: TVMValue, code: i32) -> &mut Self {
        self.values.push(v);
        self.codes.push(code);
        self
    }

    pub fn int(&mut self, v: i64) -> &mut Self {
        self.push(TVMValue { v_int64: v }, kTVMArgInt)
    }

    pub fn float(&mut self, v: f64) -> &mut Self {
        self.push(TVMValue { v_float64: v }, kTVMArgFloat)
    }

    pub fn device(&mut self, d: DLDevice) -> &mut Self {
        self.push(TVMValue { v_device: d }, kDLDevice)
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        let c = CString::new(s.replace('\0', "")).expect("NULs removed");
        let p = c.as_ptr();
        self.strings.push(c);
        self.push(TVMValue { v_str: p }, kTVMStr)
    }

    /// An opaque handle (type code 3).
    ///
    /// # Safety
    /// The function called may use the handle as what its contract says it is (a kernel: a
    /// device tensor's data): it must be that, alive for the call.
    pub unsafe fn handle(&mut self, p: *mut std::ffi::c_void) -> &mut Self {
        self.push(TVMValue { v_handle: p }, kTVMOpaqueHandle)
    }

    pub fn null(&mut self) -> &mut Self {
        self.push(TVMValue::NULL, kTVMNullptr)
    }

    /// A plain DLTensor (type code 7), borrowed for the call.
    ///
    /// # Safety
    /// `t` must be a well-formed tensor whose bytes live, unchanged by others, for the call.
    pub unsafe fn dl_tensor(&mut self, t: *mut DLTensor) -> &mut Self {
        self.push(TVMValue { v_handle: t.cast() }, kTVMDLTensorHandle)
    }

    /// A copy of `bytes` (type code 12).
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let data: Box<[u8]> = bytes.into();
        let arr = Box::new(TVMByteArray { data: data.as_ptr().cast(), size: data.len() });
        let p: *const TVMByteArray = &*arr;
        self.byte_arrays.push((arr, data));
        self.push(TVMValue { v_handle: p.cast_mut().cast() }, kTVMBytes)
    }

    /// A data type (type code 5).
    pub fn dtype(&mut self, t: DLDataType) -> &mut Self {
        self.push(TVMValue { v_type: t }, crate::dlpack::kTVMDataType)
    }

    /// An object, passed with its natural code (NDArrays as their DLTensor, code 13).
    pub fn object(&mut self, obj: AnyObject) -> &mut Self {
        let (v, code) = object_to_value(&obj);
        self.objects.push(obj);
        self.push(v, code)
    }

    pub fn args(&self) -> Args<'_> {
        Args { values: &self.values, codes: &self.codes }
    }

    /// Empties the builder (releasing what it holds), its capacity kept.
    fn clear(&mut self) {
        self.values.clear();
        self.codes.clear();
        self.strings.clear();
        self.objects.clear();
        self.byte_arrays.clear();
    }

    /// Calls `f` with an empty builder: the thread's spare one, so calls made over and over (a
    /// host's calls of a VM function) do not allocate argument arrays each time. What `f` put in
    /// it is released when `f` returns; a nested call gets a builder of its own.
    pub fn with_spare<R>(f: impl FnOnce(&mut ArgsBuilder) -> R) -> R {
        thread_local! {
            static SPARE: std::cell::Cell<Option<Box<ArgsBuilder>>> = const { std::cell::Cell::new(None) };
        }
        let mut b = SPARE.try_with(|s| s.take()).ok().flatten().unwrap_or_default();
        let r = f(&mut b);
        b.clear();
        let _ = SPARE.try_with(|s| s.set(Some(b)));
        r
    }
}
