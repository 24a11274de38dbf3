//! Kernels of TVM 0.21 and later: each is a `TVMFFISafeCallType`
//! (`int (void* self, const TVMFFIAny* args, int32 n, TVMFFIAny* result)`), which takes 16-byte
//! `Any` cells instead of the classic value and type-code arrays. A packed call's arguments are
//! translated cell by cell; an error a kernel raises (through its `__TVMFFIErrorSetRaisedFromCStr`
//! slot or `TVMFFIErrorSetRaisedFromCStrParts`, both the C boundary's) is the thread's last error.

use crate::error::{Error, Result};
use crate::last_error;
use crate::object::AnyObject;
use crate::packed::{PackedFunc, RetValue};

pub use crate::dlpack::{SafeCall, TVMFFIAny};

pub(crate) use crate::packed::cells::index;

/// The kernel at `f` as a packed function; `owner` (its library) stays alive with it.
pub fn kernel(f: SafeCall, name: String, owner: AnyObject) -> crate::object::ObjRef<PackedFunc> {
    PackedFunc::over_cells(move |cells| {
        let _owner = &owner;
        call_cells(f, &name, cells)
    })
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
