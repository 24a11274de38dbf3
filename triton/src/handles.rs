//! Triton's objects read and written through its C API: a model's name, folder and config, a
//! request's tensors (borrowed where Triton keeps them), a response's outputs. The backend's
//! other modules see Rust values only.

use crate::api::{self, new_error, take_error, triton, Code};
use crate::instance::Outgoing;
use crate::request::{Given, Incoming};
use serde_json::Value;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use tvm_runtime::error::ErrorKind;
use tvm_runtime::{Error, Result};

/// The outcome of a Triton call: its error, if any, as ours (and Triton's object deleted).
pub(crate) fn check(e: *mut api::Error, what: &str) -> Result<()> {
    if e.is_null() {
        return Ok(());
    }
    // SAFETY: an error Triton just returned to us.
    Err(Error::internal(format!("{what}: {}", unsafe { take_error(e) })))
}

/// A string Triton owns, copied.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The Triton error code for one of ours: the caller's fault or the server's.
pub fn code_of(e: &Error) -> Code {
    match e.kind() {
        ErrorKind::ValueError | ErrorKind::TypeError | ErrorKind::KeyError | ErrorKind::IndexError => Code::InvalidArg,
        _ => Code::Internal,
    }
}

/// A Triton error object for one of ours.
pub fn to_triton(e: &Error) -> *mut api::Error {
    new_error(code_of(e), &e.to_string())
}

/// A model Triton is loading.
pub struct ModelHandle(pub *mut api::Model);

impl ModelHandle {
    pub fn name(&self) -> Result<String> {
        let mut p = std::ptr::null();
        // SAFETY: Triton's model, alive for the call that handed it over; `p` is filled in.
        check(unsafe { (triton().TRITONBACKEND_ModelName)(self.0, &mut p) }, "the model's name")?;
        // SAFETY: the model's own name, alive as long as the model.
        Ok(unsafe { text(p) })
    }

    /// The folder of this version of the model: its repository folder, then the version.
    pub fn version_dir(&self) -> Result<PathBuf> {
        let t = triton();
        let mut version = 0u64;
        // SAFETY: as in `name`.
        check(unsafe { (t.TRITONBACKEND_ModelVersion)(self.0, &mut version) }, "the model's version")?;
        let (mut kind, mut location) = (0u32, std::ptr::null());
        // SAFETY: as in `name`.
        check(unsafe { (t.TRITONBACKEND_ModelRepository)(self.0, &mut kind, &mut location) }, "the model's folder")?;
        if kind != 0 {
            return Err(Error::value("the model's files are not on a local filesystem"));
        }
        // SAFETY: the model's own string.
        Ok(PathBuf::from(unsafe { text(location) }).join(version.to_string()))
    }

    pub fn config(&self) -> Result<Value> {
        let t = triton();
        let mut message = std::ptr::null_mut();
        // SAFETY: as in `name`; the message is ours to delete.
        check(unsafe { (t.TRITONBACKEND_ModelConfig)(self.0, 1, &mut message) }, "the model's config")?;
        let (mut base, mut len) = (std::ptr::null(), 0usize);
        // SAFETY: the message just made; its buffer lives until it is deleted, after the parse.
        let parsed = check(unsafe { (t.TRITONSERVER_MessageSerializeToJson)(message, &mut base, &mut len) }, "config")
            .and_then(|()| {
                // SAFETY: `len` bytes at `base`, owned by the message.
                let bytes = unsafe { std::slice::from_raw_parts(base.cast::<u8>(), len) };
                serde_json::from_slice(bytes).map_err(|e| Error::internal(format!("the model's config: {e}")))
            });
        // SAFETY: deleted once.
        check(unsafe { (t.TRITONSERVER_MessageDelete)(message) }, "config")?;
        parsed
    }

    pub fn auto_complete(&self) -> Result<bool> {
        let mut on = false;
        // SAFETY: as in `name`.
        check(unsafe { (triton().TRITONBACKEND_ModelAutoCompleteConfig)(self.0, &mut on) }, "auto-complete")?;
        Ok(on)
    }

    pub fn set_config(&self, config: &Value) -> Result<()> {
        let t = triton();
        let json = serde_json::to_string(config).map_err(|e| Error::internal(e.to_string()))?;
        let mut message = std::ptr::null_mut();
        // SAFETY: `json` outlives the call; Triton copies it into the message, ours to delete.
        check(
            // SAFETY: `json` outlives the call; Triton copies it into a message that is ours to delete.
            unsafe { (t.TRITONSERVER_MessageNewFromSerializedJson)(&mut message, json.as_ptr().cast(), json.len()) },
            "the completed config",
        )?;
        // SAFETY: the model being initialised, and the message just made.
        let set = check(unsafe { (t.TRITONBACKEND_ModelSetConfig)(self.0, 1, message) }, "the completed config");
        // SAFETY: deleted once.
        check(unsafe { (t.TRITONSERVER_MessageDelete)(message) }, "the completed config")?;
        set
    }
}

/// Reads `request`'s inputs and the outputs it asks for.
///
/// # Safety
/// `request` is a request Triton handed to the current execute call and not yet released; the
/// returned slices borrow its buffers and must not outlive its release.
pub unsafe fn read_request<'a>(request: *mut api::Request) -> Result<Incoming<'a>> {
    let t = triton();
    let mut count = 0u32;
    // SAFETY: the caller's live request.
    check(unsafe { (t.TRITONBACKEND_RequestInputCount)(request, &mut count) }, "the request's inputs")?;
    let mut inputs = Vec::with_capacity(count as usize);
    for i in 0..count {
        let mut input = std::ptr::null_mut();
        // SAFETY: as above; `i` is below the count.
        check(unsafe { (t.TRITONBACKEND_RequestInputByIndex)(request, i, &mut input) }, "an input")?;
        let (mut name, mut wire_type, mut shape, mut dims) = (std::ptr::null(), 0u32, std::ptr::null(), 0u32);
        let (mut byte_size, mut buffers) = (0u64, 0u32);
        // SAFETY: the input just found; what it fills in lives as long as the request.
        check(
            // SAFETY: the input just found; what it fills in lives as long as the request.
            unsafe {
                (t.TRITONBACKEND_InputProperties)(
                    input,
                    &mut name,
                    &mut wire_type,
                    &mut shape,
                    &mut dims,
                    &mut byte_size,
                    &mut buffers,
                )
            },
            "an input's properties",
        )?;
        // SAFETY: the request's own strings and shape, alive until it is released.
        let name: &'a str =
            unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| Error::value("an input name that is not UTF-8"))?;
        let shape: &'a [i64] = if dims == 0 {
            &[]
        } else {
            // SAFETY: the request's own shape, `dims` long, alive until it is released.
            unsafe { std::slice::from_raw_parts(shape, dims as usize) }
        };
        let mut pieces = Vec::with_capacity(buffers as usize);
        for b in 0..buffers {
            let (mut data, mut len, mut memory, mut memory_id) = (std::ptr::null::<c_void>(), 0u64, 0u32, 0i64);
            check(
                // SAFETY: the input's buffer `b`, below its count.
                unsafe { (t.TRITONBACKEND_InputBuffer)(input, b, &mut data, &mut len, &mut memory, &mut memory_id) },
                "an input's buffer",
            )?;
            if memory != api::MEMORY_CPU && memory != api::MEMORY_CPU_PINNED {
                return Err(Error::value(format!("input '{name}': in GPU memory, and this backend runs on the CPU")));
            }
            if len > 0 {
                // SAFETY: `len` bytes of host memory Triton holds until the request is released.
                pieces.push(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len as usize) });
            }
        }
        inputs.push(Given { name, wire_type, shape, pieces });
    }
    let mut outputs = 0u32;
    // SAFETY: as above.
    check(unsafe { (t.TRITONBACKEND_RequestOutputCount)(request, &mut outputs) }, "the request's outputs")?;
    let mut requested = Vec::with_capacity(outputs as usize);
    for k in 0..outputs {
        let mut name = std::ptr::null();
        // SAFETY: as above; `k` below the count.
        check(unsafe { (t.TRITONBACKEND_RequestOutputName)(request, k, &mut name) }, "an output's name")?;
        // SAFETY: the request's own string.
        requested.push(
            unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| Error::value("an output name that is not UTF-8"))?,
        );
    }
    Ok(Incoming { inputs, requested })
}

/// Sends `request` its answer: the outputs, or the error.
///
/// # Safety
/// `request` is a request of the current execute call, not yet released.
pub unsafe fn respond(
    request: *mut api::Request,
    answer: &Result<Vec<Outgoing>>,
    spec: &crate::config::Spec,
) -> Result<()> {
    let t = triton();
    let mut response = std::ptr::null_mut();
    // SAFETY: the caller's live request.
    check(unsafe { (t.TRITONBACKEND_ResponseNew)(&mut response, request) }, "a response")?;
    // SAFETY: the response just made.
    let written = answer
        .as_ref()
        .map_err(|e| Error::new(e.kind(), e.to_string()))
        .and_then(|outs| unsafe { write_outputs(response, outs, spec) });
    let error = match &written {
        Ok(()) => std::ptr::null_mut(),
        Err(e) => to_triton(e),
    };
    // SAFETY: the response, sent once (Triton owns it after); the error stays ours.
    let sent =
        check(unsafe { (t.TRITONBACKEND_ResponseSend)(response, api::COMPLETE_FINAL, error) }, "sending a response");
    if !error.is_null() {
        // SAFETY: our error object, deleted once.
        unsafe { (t.TRITONSERVER_ErrorDelete)(error) };
    }
    sent
}

/// # Safety
/// `response` is a response made and not yet sent.
unsafe fn write_outputs(response: *mut api::Response, outs: &[Outgoing], spec: &crate::config::Spec) -> Result<()> {
    let t = triton();
    for o in outs {
        let want = &spec.outputs[o.index];
        let name = CString::new(want.name.as_str()).map_err(|_| Error::value("an output name with a NUL"))?;
        let wire = crate::signature::wire_type(want.dtype)
            .ok_or_else(|| Error::internal("an output dtype Triton has no type for"))?;
        let mut output = std::ptr::null_mut();
        // SAFETY: the live response; name and shape are copied by Triton.
        check(
            // SAFETY: the live response; Triton copies the name and shape.
            unsafe {
                (t.TRITONBACKEND_ResponseOutput)(
                    response,
                    &mut output,
                    name.as_ptr(),
                    wire,
                    o.shape.as_ptr(),
                    o.shape.len() as u32,
                )
            },
            "an output",
        )?;
        let (mut memory, mut memory_id) = (api::MEMORY_CPU, 0i64);
        let mut buffer = std::ptr::null_mut();
        // SAFETY: the output just made; Triton gives a buffer of the size asked where it likes.
        check(
            // SAFETY: the output just made; Triton gives a buffer of the size asked, where it likes.
            unsafe {
                (t.TRITONBACKEND_OutputBuffer)(output, &mut buffer, o.bytes.len() as u64, &mut memory, &mut memory_id)
            },
            "an output buffer",
        )?;
        if memory != api::MEMORY_CPU && memory != api::MEMORY_CPU_PINNED {
            return Err(Error::internal(format!("output '{}': Triton gave GPU memory to a CPU backend", want.name)));
        }
        if !o.bytes.is_empty() {
            // SAFETY: a host buffer of `o.bytes.len()` bytes Triton gave for this output.
            unsafe { std::ptr::copy_nonoverlapping(o.bytes.as_ptr(), buffer.cast::<u8>(), o.bytes.len()) };
        }
    }
    Ok(())
}
