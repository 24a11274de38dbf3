//! tvm-ffi's `Any` cells and objects: counts held and given back, the text and tensors cells
//! carry, calls of its function objects.
//!
//! Tensors cross without copies where they can: a host's CPU tensor that is compact and aligned
//! as ours are becomes one of our arrays over the same bytes (holding the host's tensor through
//! DLPack); any other is passed as its `DLTensor` for the call. Our arrays leave through DLPack the
//! same way, so a host's tensor keeps ours alive, not a copy of it.

use super::api::{bytes_of, index, Api, Handle, HEADER_SIZE};
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::object::{AnyObject, ObjRef};
use crate::tensor::raw::RawTensor;
use crate::tensor::NDArray;
use std::ffi::CStr;

/// One count of a tvm-ffi object, given back when dropped.
pub struct Owned {
    api: &'static Api,
    handle: Handle,
}

// SAFETY: tvm-ffi objects are reference counted atomically and shared across threads.
unsafe impl Send for Owned {}
// SAFETY: as above.
unsafe impl Sync for Owned {}

impl Owned {
    /// Takes over one count of `handle`.
    ///
    /// # Safety
    /// `handle` must be a live tvm-ffi object whose count the caller gives up.
    pub unsafe fn from_raw(api: &'static Api, handle: Handle) -> Owned {
        Owned { api, handle }
    }

    /// Takes a count of its own of `handle`.
    ///
    /// # Safety
    /// `handle` must be a live tvm-ffi object.
    pub unsafe fn retain(api: &'static Api, handle: Handle) -> Owned {
        // SAFETY: per the contract.
        unsafe { (api.inc_ref)(handle) };
        Owned { api, handle }
    }

    pub fn as_ptr(&self) -> Handle {
        self.handle
    }

    /// The count, handed to the caller.
    pub fn into_raw(self) -> Handle {
        let h = self.handle;
        std::mem::forget(self);
        h
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: our count.
        unsafe { (self.api.dec_ref)(self.handle) };
    }
}

pub fn cell(type_index: i32, value: u64) -> TVMFFIAny {
    TVMFFIAny { type_index, small_len: 0, value }
}

/// Gives back the count an owned cell holds.
pub fn release(api: &Api, c: TVMFFIAny) {
    if c.type_index >= index::STATIC_OBJECT_BEGIN && c.value != 0 {
        // SAFETY: the cell's count.
        unsafe { (api.dec_ref)(c.value as Handle) };
    }
}

/// Owned cells, released together.
pub struct Cells<'a>(pub &'a Api, pub Vec<TVMFFIAny>);

impl Drop for Cells<'_> {
    fn drop(&mut self) {
        for c in self.1.drain(..) {
            release(self.0, c);
        }
    }
}

/// The cell of the object after a handle's header.
///
/// # Safety
/// `h` must be a live object whose cell is a `T`.
pub(super) unsafe fn cell_of<'a, T>(h: Handle) -> &'a T {
    // SAFETY: per the contract.
    unsafe { &*h.cast::<u8>().add(HEADER_SIZE).cast::<T>() }
}

/// The text of a string cell (a small string inline, a string object, or a C string).
///
/// # Safety
/// `c` must be a live cell of one of those types.
pub unsafe fn text(c: &TVMFFIAny) -> Option<&[u8]> {
    // SAFETY: each arm reads what the type index says the cell holds.
    unsafe {
        Some(match c.type_index {
            index::SMALL_STR | index::SMALL_BYTES => {
                let p: *const u8 = (&c.value as *const u64).cast();
                // At most 7 bytes inline (the eighth is the terminating NUL).
                std::slice::from_raw_parts(p, (c.small_len as usize).min(7))
            }
            index::STR | index::BYTES => bytes_of(cell_of::<TVMByteArray>(c.value as Handle)),
            index::RAW_STR if c.value != 0 => CStr::from_ptr(c.value as *const std::ffi::c_char).to_bytes(),
            index::BYTE_ARRAY_PTR if c.value != 0 => bytes_of(&*(c.value as *const TVMByteArray)),
            _ => return None,
        })
    }
}

pub(super) fn utf8(b: &[u8]) -> Result<&str> {
    std::str::from_utf8(b).map_err(|_| Error::value("a string argument is not UTF-8"))
}

pub(super) fn data_type(v: u64) -> DLDataType {
    DLDataType { code: v as u8, bits: (v >> 8) as u8, lanes: (v >> 16) as u16 }
}

pub(super) fn device(v: u64) -> DLDevice {
    DLDevice { device_type: v as u32 as i32, device_id: (v >> 32) as u32 as i32 }
}

/// A host's tensor as one of our arrays over the same bytes, when it is laid out as ours are
/// (CPU, compact, 64-byte aligned); else `None`.
///
/// # Safety
/// `h` must be a live tensor object.
pub(super) unsafe fn shared_tensor(api: &Api, h: Handle) -> Result<Option<ObjRef<NDArray>>> {
    // SAFETY: a tensor's cell is its DLTensor.
    let t = unsafe { RawTensor::from_ptr(cell_of::<DLTensor>(h))? };
    if t.device().device_type != kDLCPU || !t.is_compact() || t.data_ptr() as usize % 64 != 0 {
        return Ok(None);
    }
    // The array holds a count of the host's tensor: no DLPack tensor made and deleted per call.
    // SAFETY: a live object; the count is the array's (or released on failure).
    unsafe {
        (api.inc_ref)(h);
        NDArray::over_counted(t, h.cast(), release_tensor).map(Some)
    }
}

/// Gives back the count an array over a host's tensor held (`Owner::Counted`).
unsafe fn release_tensor(h: *mut std::ffi::c_void) {
    if let Some(api) = super::api::api() {
        // SAFETY: the count `shared_tensor` took.
        unsafe { (api.dec_ref)(h.cast()) };
    }
}

pub(super) fn expect_int(c: TVMFFIAny, what: &str) -> Result<i64> {
    if c.type_index == index::INT {
        Ok(c.value as i64)
    } else {
        Err(Error::type_err(format!("{what} returned type index {}", c.type_index)))
    }
}

/// Calls libtvm_ffi's global function `name` with borrowed cells; the result cell is the caller's.
pub fn call_global(api: &'static Api, name: &'static str, args: &[TVMFFIAny]) -> Result<TVMFFIAny> {
    let f = api.global(name)?;
    // SAFETY: the registry's functions live as long as the process (the cache holds a count).
    unsafe { call(api, f, args) }
}

/// Calls the tvm-ffi function `f` with borrowed cells; the result cell is the caller's.
///
/// # Safety
/// `f` must be a live function object, and `args` live cells.
pub unsafe fn call(api: &'static Api, f: Handle, args: &[TVMFFIAny]) -> Result<TVMFFIAny> {
    // SAFETY: a function object's cell starts with its safe call, which takes the object itself.
    let safe_call = unsafe { *cell_of::<SafeCall>(f) };
    let mut result = TVMFFIAny::default();
    // SAFETY: the callee reads `args` (live cells) and writes the result cell; through the C++
    // guard, as it may be code that throws.
    let rc = unsafe {
        crate::cxx_abi::tvmrt_cxx_guarded_ffi_kernel(safe_call, f, args.as_ptr(), args.len() as i32, &mut result)
    };
    if rc != 0 {
        return Err(api.take_error().unwrap_or_else(|| {
            let ours = crate::last_error::get();
            Error::foreign(if ours.is_empty() { format!("a tvm-ffi function failed (status {rc})") } else { ours })
        }));
    }
    Ok(result)
}

type FromBytes = unsafe extern "C" fn(*const TVMByteArray, *mut TVMFFIAny) -> std::ffi::c_int;

pub(super) fn string_out(api: &Api, b: &[u8], make: FromBytes) -> Result<TVMFFIAny> {
    let a = TVMByteArray { data: b.as_ptr().cast(), size: b.len() };
    let mut out = TVMFFIAny::default();
    // SAFETY: a byte array the callee copies, and an out cell.
    api.check(unsafe { make(&a, &mut out) }, "TVMFFIStringFromByteArray")?;
    Ok(out)
}

unsafe extern "C" fn dlpack_deleter(t: *mut DLManagedTensor) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: made by `tensor_out`: a boxed tensor whose context holds one count of our array.
        unsafe {
            let b = Box::from_raw(t);
            drop(AnyObject::from_raw(b.manager_ctx.cast()));
        }
    });
}

pub(super) fn tensor_out(api: &Api, a: ObjRef<NDArray>) -> Result<TVMFFIAny> {
    let mut dl_tensor = *a.dl_tensor();
    // Booleans are the classic ABI's `uint1` in our hosts' eyes and tvm-ffi's `bool` in these
    // (one byte each either way).
    if dl_tensor.dtype == (DLDataType { code: kDLUInt, bits: 1, lanes: 1 }) {
        dl_tensor.dtype = DLDataType { code: kDLBool, bits: 8, lanes: 1 };
    }
    let managed = Box::into_raw(Box::new(DLManagedTensor {
        dl_tensor,
        manager_ctx: a.into_any().into_raw().cast(),
        deleter: Some(dlpack_deleter),
    }));
    let mut out: Handle = std::ptr::null_mut();
    // SAFETY: a DLPack tensor handed over, and an out-pointer.
    let rc = unsafe { (api.tensor_from_dlpack)(managed, 0, 0, &mut out) };
    if rc != 0 {
        // SAFETY: not taken on failure: ours to delete.
        unsafe { dlpack_deleter(managed) };
        api.check(rc, "TVMFFITensorFromDLPack")?;
    }
    Ok(cell(index::TENSOR, out as u64))
}
