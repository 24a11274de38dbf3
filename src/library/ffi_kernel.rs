//! Kernels of TVM 0.21 and later: each is a `TVMFFISafeCallType`
//! (`int (void* self, const TVMFFIAny* args, int32 n, TVMFFIAny* result)`), which takes 16-byte
//! `Any` cells instead of the classic value and type-code arrays. A packed call's arguments are
//! translated cell by cell; an error a kernel raises (through its `__TVMFFIErrorSetRaisedFromCStr`
//! slot or `TVMFFIErrorSetRaisedFromCStrParts`, both the C boundary's) is the thread's last error.

use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::last_error;
use crate::object::AnyObject;
use crate::packed::{Args, PackedFunc, RetValue};

pub use crate::dlpack::{SafeCall, TVMFFIAny};

/// tvm-ffi's type indices for the values a kernel takes or returns.
pub(crate) mod index {
    pub(crate) const NONE: i32 = 0;
    pub(crate) const INT: i32 = 1;
    pub(crate) const BOOL: i32 = 2;
    pub(crate) const FLOAT: i32 = 3;
    pub(crate) const OPAQUE_PTR: i32 = 4;
    pub(crate) const DATA_TYPE: i32 = 5;
    pub(crate) const DEVICE: i32 = 6;
    pub(crate) const DL_TENSOR_PTR: i32 = 7;
    pub(crate) const RAW_STR: i32 = 8;
    pub(crate) const STATIC_OBJECT_BEGIN: i32 = 64;
}

fn cell(type_index: i32, value: u64) -> TVMFFIAny {
    TVMFFIAny { type_index, small_len: 0, value }
}

/// One classic argument as a cell (borrowed: the cell points at what the argument points at).
pub(crate) fn to_cell(a: &Args<'_>, i: usize) -> Result<TVMFFIAny> {
    let v = a.raw_values()[i];
    // SAFETY: each arm reads the union member its type code says the value holds.
    Ok(unsafe {
        match a.code(i) {
            kTVMArgInt | 1 => cell(index::INT, v.v_int64 as u64),
            kTVMArgFloat => cell(index::FLOAT, v.v_float64.to_bits()),
            kTVMNullptr => cell(index::NONE, 0),
            kTVMOpaqueHandle => cell(index::OPAQUE_PTR, v.v_handle as u64),
            kTVMDataType => {
                let t = v.v_type;
                cell(index::DATA_TYPE, u64::from(t.code) | u64::from(t.bits) << 8 | u64::from(t.lanes) << 16)
            }
            kDLDevice => {
                let d = v.v_device;
                cell(index::DEVICE, (d.device_type as u32 as u64) | (d.device_id as u32 as u64) << 32)
            }
            kTVMDLTensorHandle | kTVMNDArrayHandle => cell(index::DL_TENSOR_PTR, v.v_handle as u64),
            kTVMStr => cell(index::RAW_STR, v.v_str as u64),
            code => {
                return Err(Error::type_err(format!(
                    "argument {i}: a {} cannot be passed to a tvm-ffi kernel",
                    crate::packed::args::type_code_name(code)
                )))
            }
        }
    })
}

/// The kernel at `f` as a packed function; `owner` (its library) stays alive with it.
pub fn kernel(f: SafeCall, name: String, owner: AnyObject) -> crate::object::ObjRef<PackedFunc> {
    PackedFunc::native(move |a| {
        let _owner = &owner;
        call(f, &name, a)
    })
}

/// Calls `f` with the classic arguments `a` as cells (borrowed), on the stack for up to 16.
pub(crate) fn with_cells<R>(a: &Args<'_>, f: impl FnOnce(&[TVMFFIAny]) -> Result<R>) -> Result<R> {
    const SMALL: usize = 16;
    let mut small = [TVMFFIAny::default(); SMALL];
    let mut large = Vec::new();
    let cells: &mut [TVMFFIAny] = if a.len() <= SMALL {
        &mut small[..a.len()]
    } else {
        large.resize(a.len(), TVMFFIAny::default());
        &mut large
    };
    for (i, c) in cells.iter_mut().enumerate() {
        *c = to_cell(a, i)?;
    }
    f(cells)
}

fn call(f: SafeCall, name: &str, a: &Args<'_>) -> Result<RetValue> {
    with_cells(a, |cells| call_cells(f, name, cells))
}

fn call_cells(f: SafeCall, name: &str, cells: &[TVMFFIAny]) -> Result<RetValue> {
    let mut result = TVMFFIAny::default();
    // SAFETY: a tvm-ffi kernel's contract: it reads `n` cells, each what its type index says
    // (tensors and strings alive for the call, as the classic arguments they came from are),
    // checks them itself, and writes at most the result cell. It goes through the C++ guard,
    // as kernels may throw.
    let rc = unsafe {
        crate::cxx_abi::tvmrt_cxx_guarded_ffi_kernel(
            f,
            std::ptr::null_mut(),
            cells.as_ptr(),
            cells.len() as i32,
            &mut result,
        )
    };
    if rc != 0 {
        let msg = last_error::get();
        let msg = if msg.is_empty() { format!("kernel '{name}' failed (status {rc}) without a message") } else { msg };
        return Err(Error::foreign(msg));
    }
    Ok(match result.type_index {
        index::NONE => RetValue::None,
        index::INT | index::BOOL => RetValue::Int(result.value as i64),
        index::FLOAT => RetValue::Float(f64::from_bits(result.value)),
        t => {
            return Err(Error::type_err(format!(
                "kernel '{name}' returned a value of type index {t}{}, which kernels do not return",
                if t >= index::STATIC_OBJECT_BEGIN { " (an object)" } else { "" }
            )))
        }
    })
}
