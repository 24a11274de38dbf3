//! What a packed function returns: an owned value.

use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef, ObjectHeader, ObjectType};
use crate::tensor::ndarray::NDARRAY_TENSOR_OFFSET;
use std::ffi::{c_void, CStr};

#[derive(Debug, Default)]
pub enum RetValue {
    #[default]
    None,
    Int(i64),
    Float(f64),
    Handle(*mut c_void),
    Str(String),
    Bytes(Vec<u8>),
    DataType(DLDataType),
    Device(DLDevice),
    Object(AnyObject),
}

impl RetValue {
    pub fn into_object<T: ObjectType>(self) -> Result<ObjRef<T>> {
        match self {
            RetValue::Object(o) => o.downcast::<T>().map_err(|o| Error::type_err(format!("unexpected result {o:?}"))),
            other => Err(Error::type_err(format!("expected an object result, got {other:?}"))),
        }
    }

    /// Takes an owned value out of a `(value, code)` pair produced by foreign code: strings and
    /// bytes are copied, object-like codes hand over one count.
    ///
    /// # Safety
    /// `v` must be what `code` says; for object codes the caller gives up one count.
    pub unsafe fn from_owned_c(v: TVMValue, code: i32) -> Result<RetValue> {
        // SAFETY: per the contract.
        unsafe { Self::from_c(v, code, true) }
    }

    /// Copies a borrowed `(value, code)` pair: object-like codes gain a count.
    ///
    /// # Safety
    /// `v` must be what `code` says and live for the call.
    pub unsafe fn from_borrowed_c(v: TVMValue, code: i32) -> Result<RetValue> {
        // SAFETY: per the contract.
        unsafe { Self::from_c(v, code, false) }
    }

    unsafe fn from_c(v: TVMValue, code: i32, owned: bool) -> Result<RetValue> {
        // SAFETY: the caller guarantees `v` matches `code`.
        unsafe {
            let obj = |p: *mut ObjectHeader| {
                if owned {
                    AnyObject::from_raw(p)
                } else {
                    AnyObject::retain_raw(p)
                }
            };
            Ok(match code {
                kTVMArgInt => RetValue::Int(v.v_int64),
                kTVMArgFloat => RetValue::Float(v.v_float64),
                kTVMOpaqueHandle => RetValue::Handle(v.v_handle),
                kTVMNullptr => RetValue::None,
                kTVMDataType => RetValue::DataType(v.v_type),
                kDLDevice => RetValue::Device(v.v_device),
                kTVMStr => {
                    if v.v_str.is_null() {
                        return Err(Error::value("null string value"));
                    }
                    RetValue::Str(CStr::from_ptr(v.v_str).to_string_lossy().into_owned())
                }
                kTVMBytes => {
                    let arr = v.v_handle.cast::<TVMByteArray>().as_ref().ok_or_else(|| Error::value("null bytes"))?;
                    let data = if arr.size == 0 {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(arr.data.cast::<u8>(), arr.size).to_vec()
                    };
                    RetValue::Bytes(data)
                }
                kTVMObjectHandle | kTVMModuleHandle | kTVMPackedFuncHandle => {
                    obj(v.v_handle.cast()).map_or(RetValue::None, RetValue::Object)
                }
                kTVMNDArrayHandle => {
                    if v.v_handle.is_null() {
                        RetValue::None
                    } else {
                        let header = v.v_handle.cast::<u8>().sub(NDARRAY_TENSOR_OFFSET).cast();
                        obj(header).map_or(RetValue::None, RetValue::Object)
                    }
                }
                kTVMDLTensorHandle => {
                    return Err(Error::type_err("a borrowed DLTensor cannot be returned; return an NDArray"))
                }
                kTVMObjectRValueRefArg => {
                    let slot = v.v_handle.cast::<*mut ObjectHeader>();
                    if slot.is_null() {
                        RetValue::None
                    } else {
                        let p = std::mem::replace(&mut *slot, std::ptr::null_mut());
                        AnyObject::from_raw(p).map_or(RetValue::None, RetValue::Object)
                    }
                }
                other => return Err(Error::type_err(format!("unsupported value type code {other}"))),
            })
        }
    }

    /// The value and code for a C caller: objects hand over their count; strings and bytes must
    /// be stored by the caller (see the C layer), so they are returned as `None` here.
    pub fn into_c_scalar(self) -> std::result::Result<(TVMValue, i32), RetValue> {
        match self.as_c_scalar() {
            Some(pair) => {
                // An object's count goes with the handle.
                std::mem::forget(self);
                Ok(pair)
            }
            None => Err(self),
        }
    }

    /// What `into_c_scalar` gives, read in place: an object's handle is borrowed (forget `self`
    /// to hand its count over with it). Strings, bytes and dtypes have none.
    #[inline]
    pub fn as_c_scalar(&self) -> Option<(TVMValue, i32)> {
        Some(match self {
            RetValue::None => (TVMValue::NULL, kTVMNullptr),
            RetValue::Int(v) => (TVMValue { v_int64: *v }, kTVMArgInt),
            RetValue::Float(v) => (TVMValue { v_float64: *v }, kTVMArgFloat),
            RetValue::Handle(p) => (TVMValue { v_handle: *p }, kTVMOpaqueHandle),
            RetValue::Device(d) => (TVMValue { v_device: *d }, kDLDevice),
            RetValue::Object(o) => object_to_value(o),
            RetValue::Str(_) | RetValue::Bytes(_) | RetValue::DataType(_) => return None,
        })
    }
}

impl From<i64> for RetValue {
    fn from(v: i64) -> Self {
        RetValue::Int(v)
    }
}

impl From<bool> for RetValue {
    fn from(v: bool) -> Self {
        RetValue::Int(v as i64)
    }
}

impl From<f64> for RetValue {
    fn from(v: f64) -> Self {
        RetValue::Float(v)
    }
}

impl From<String> for RetValue {
    fn from(v: String) -> Self {
        RetValue::Str(v)
    }
}

impl From<&str> for RetValue {
    fn from(v: &str) -> Self {
        RetValue::Str(v.to_string())
    }
}

impl From<Vec<u8>> for RetValue {
    fn from(v: Vec<u8>) -> Self {
        RetValue::Bytes(v)
    }
}

impl From<()> for RetValue {
    fn from(_: ()) -> Self {
        RetValue::None
    }
}

impl<T: ObjectType> From<ObjRef<T>> for RetValue {
    fn from(v: ObjRef<T>) -> Self {
        RetValue::Object(v.into_any())
    }
}

impl From<AnyObject> for RetValue {
    fn from(v: AnyObject) -> Self {
        RetValue::Object(v)
    }
}

impl<T: Into<RetValue>> From<Option<T>> for RetValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(RetValue::None, Into::into)
    }
}

/// The value and code under which an object travels.
pub fn object_to_value(obj: &AnyObject) -> (TVMValue, i32) {
    use crate::object::type_index as ti;
    let p = obj.as_c_handle();
    match obj.type_index() {
        ti::NDARRAY => {
            (TVMValue { v_handle: p.cast::<u8>().wrapping_add(NDARRAY_TENSOR_OFFSET).cast() }, kTVMNDArrayHandle)
        }
        ti::MODULE => (TVMValue { v_handle: p }, kTVMModuleHandle),
        ti::PACKED_FUNC => (TVMValue { v_handle: p }, kTVMPackedFuncHandle),
        _ => (TVMValue { v_handle: p }, kTVMObjectHandle),
    }
}
