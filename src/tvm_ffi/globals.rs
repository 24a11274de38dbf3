//! What this runtime registers in libtvm_ffi, as upstream's `libtvm_runtime.so` does at load: the
//! context symbols libtvm_ffi writes into every library it loads, the loader of Relax executables,
//! and the `runtime.*` tensor and device functions TVM's Python calls (`tvm.runtime.tensor`,
//! `Tensor.numpy`, `Device.exist`). Names libtvm_ffi already has (another runtime in the
//! process registered them) are left to it.

use super::api::Api;
use super::values::function_out;
use crate::dlpack::{kDLBool, kDLUInt, kTVMDataType, kTVMNullptr, DLDataType};
use crate::error::{Error, Result};
use crate::packed::ShapeTupleObj;
use crate::packed::{Args, PackedFunc, RetValue};
use crate::relax::image::Generation;
use crate::relax::{Executable, ExecutableModule};
use crate::tensor::{raw, NDArray};
use std::ffi::{c_void, CString};

type Native = fn(&Args<'_>) -> Result<RetValue>;

/// Registers everything; what libtvm_ffi refuses is skipped (see the module's note).
pub fn register(api: &'static Api) {
    // Kernels reach libtvm_ffi's own functions through four slots (their library's context is
    // libtvm_ffi's module) and this runtime's thread pool and workspaces through the others.
    let ours = crate::capi::backend::context_functions();
    let init_once = crate::capi::ffi::context_functions();
    let mut symbols: Vec<(&str, *mut c_void)> = api.own_context.clone();
    if !symbols.iter().any(|(n, _)| *n == "__TVMFFIHandleInitOnce") {
        symbols.extend(init_once.iter().copied().filter(|(n, _)| *n == "__TVMFFIHandleInitOnce"));
    }
    symbols.extend(
        ours.iter().copied().filter(|(n, _)| n.starts_with("__TVMBackend") && *n != "__TVMBackendGetFuncFromEnv"),
    );
    for (name, f) in symbols {
        let name = CString::new(name).expect("no NUL");
        // SAFETY: a C string and a function of the slot's type; libtvm_ffi copies the name.
        let _ =
            api.check(unsafe { (api.register_context_symbol)(name.as_ptr(), f) }, "TVMFFIEnvModRegisterContextSymbol");
    }
    let functions: [(&str, Native); 6] = [
        ("ffi.Module.load_from_bytes.relax.VMExecutable", load_executable),
        ("runtime.TVMTensorAllocWithScope", alloc),
        ("runtime.TVMTensorCopyFromBytes", copy_from_bytes),
        ("runtime.TVMTensorCopyToBytes", copy_to_bytes),
        ("runtime.TVMTensorCopyFromTo", copy_from_to),
        ("runtime.TVMTensorCreateView", create_view),
    ];
    for (name, f) in functions {
        set(api, name, PackedFunc::native(f));
    }
    // The device questions are the classic registry's own functions.
    for name in ["runtime.GetDeviceAttr", "runtime.RuntimeEnabled"] {
        if let Some(f) = crate::packed::registry::get(name) {
            set(api, name, f);
        }
    }
}

fn set(api: &'static Api, name: &str, f: crate::object::ObjRef<PackedFunc>) {
    if let Ok(h) = function_out(api, f) {
        // SAFETY: the function object just made.
        let _ = unsafe { api.set_global(name, h, false) };
        // SAFETY: our count; the registry holds its own.
        unsafe { (api.dec_ref)(h) };
    }
}

/// `ffi.Module.load_from_bytes.relax.VMExecutable(bytes)`: TVM 0.22 and later's executables.
fn load_executable(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("ffi.Module.load_from_bytes.relax.VMExecutable", 1, 1)?;
    let bytes = a.bytes(0)?;
    let exe = Executable::from_bytes(bytes, Generation::Ffi)?;
    // Parsed (the constants copied or shared): the library's own blob, which libtvm_ffi mapped
    // and read these bytes from, need not stay resident, as in a library this runtime loads.
    crate::library::blob::release_ffi_blob_holding(bytes);
    Ok(ExecutableModule::module(exe, "relax.VMExecutable").into())
}

/// A dtype argument (a data type or its name); tvm-ffi's `bool` is the classic ABI's `uint1` in
/// this runtime's arrays (one byte each; `cells` labels them back on the way out).
fn dtype_arg(a: &Args<'_>, i: usize) -> Result<DLDataType> {
    let t = if a.code(i) == kTVMDataType { a.data_type(i)? } else { crate::dtype::parse(a.str(i)?)? };
    Ok(if t == (DLDataType { code: kDLBool, bits: 8, lanes: 1 }) {
        DLDataType { code: kDLUInt, bits: 1, lanes: 1 }
    } else {
        t
    })
}

/// `(shape, dtype, device, mem_scope)`: a new tensor (64-byte aligned on the CPU).
fn alloc(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("runtime.TVMTensorAllocWithScope", 3, 4)?;
    let shape = a.typed_object::<ShapeTupleObj>(0, "Shape")?;
    let scope = if a.len() > 3 && a.code(3) != kTVMNullptr { a.str(3)? } else { "" };
    Ok(NDArray::empty_in(shape.dims(), dtype_arg(a, 1)?, a.device(2)?, scope)?.into())
}

/// The `n` bytes at host address `p`.
///
/// # Safety
/// The caller's promise: `p` holds `n` bytes for the call.
unsafe fn host_bytes<'a>(p: *mut c_void, n: i64) -> Result<&'a mut [u8]> {
    let n = usize::try_from(n).map_err(|_| Error::value(format!("a byte count of {n}")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::value(format!("a null host buffer of {n} bytes")));
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), n) })
}

/// `(tensor, host_ptr, nbytes)`: the host's bytes into the tensor.
fn copy_from_bytes(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("runtime.TVMTensorCopyFromBytes", 3, 3)?;
    // SAFETY: TVM's contract for this function: the pointer holds `nbytes` bytes, and the tensor
    // is the caller's to write.
    unsafe { raw::copy_from_bytes(a.tensor(0)?, host_bytes(a.handle(1)?, a.int(2)?)?)? };
    Ok(RetValue::None)
}

/// `(tensor, host_ptr, nbytes)`: the tensor's bytes into the host's buffer.
fn copy_to_bytes(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("runtime.TVMTensorCopyToBytes", 3, 3)?;
    // SAFETY: as above: the buffer holds `nbytes` bytes the caller lets us write.
    raw::copy_to_bytes(a.tensor(0)?, unsafe { host_bytes(a.handle(1)?, a.int(2)?)? })?;
    Ok(RetValue::None)
}

/// `(from, to)`: one tensor's bytes into another of the same size.
fn copy_from_to(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("runtime.TVMTensorCopyFromTo", 2, 3)?;
    // SAFETY: the destination is the caller's to write, as the function says.
    unsafe { raw::copy_tensor(a.tensor(0)?, a.tensor(1)?)? };
    Ok(RetValue::None)
}

/// `(tensor, shape, dtype, relative_byte_offset)`: a view of the tensor's bytes.
fn create_view(a: &Args<'_>) -> Result<RetValue> {
    a.expect_count("runtime.TVMTensorCreateView", 2, 4)?;
    let t = a.ndarray(0)?;
    let shape = a.typed_object::<ShapeTupleObj>(1, "Shape")?;
    let dtype = if a.len() > 2 && a.code(2) != kTVMNullptr { dtype_arg(a, 2)? } else { t.dtype() };
    if a.len() > 3 && a.int(3)? != 0 {
        return Err(Error::value("a view at a byte offset is not supported by this runtime"));
    }
    Ok(NDArray::create_view(&t, shape.dims(), dtype)?.into())
}
