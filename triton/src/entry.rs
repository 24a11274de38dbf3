//! The functions Triton calls (`TRITONBACKEND_*`, tritonbackend.h's "functions a backend
//! implements"). Each catches panics (one never crosses into Triton: it becomes an error) and
//! turns our errors into Triton's. Every request of an execute call is answered and released
//! here, whatever happens to the others.

use crate::api::{self, triton, Code};
use crate::handles::{self, check, ModelHandle};
use crate::instance::Instance;
use crate::model::TvmModel;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use tvm_runtime::{Error, Result};

/// Runs `f`; its error or panic as a Triton error object (null: success).
fn guard(what: &str, f: impl FnOnce() -> Result<()>) -> *mut api::Error {
    if let Err(why) = api::api() {
        // Not inside Triton: there is no error object to make.
        eprintln!("triton_tvm: {what}: {why}");
        return std::ptr::null_mut();
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => handles::to_triton(&e.context(what.to_string())),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            api::new_error(Code::Internal, &format!("{what}: internal error: {why}"))
        }
    }
}

/// # Safety
/// Triton's contract: `backend` is the backend being initialised.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_Initialize(_backend: *mut api::Backend) -> *mut api::Error {
    guard("the tvm backend", || {
        let api = triton();
        tvm_runtime::init();
        let (mut major, mut minor) = (0u32, 0u32);
        // SAFETY: Triton's function, filling in two numbers.
        check(unsafe { (api.TRITONBACKEND_ApiVersion)(&mut major, &mut minor) }, "Triton's API version")?;
        if major != api::API_MAJOR || minor < 10 {
            return Err(Error::value(format!(
                "Triton's backend API is {major}.{minor}; this backend needs {}.10 or later (written for {}.{})",
                api::API_MAJOR,
                api::API_MAJOR,
                api::API_MINOR
            )));
        }
        api::log(
            api::LOG_INFO,
            &format!("tvm backend {} (Triton backend API {major}.{minor})", env!("CARGO_PKG_VERSION")),
        );
        Ok(())
    })
}

/// # Safety
/// Triton's contract: `model` is the model being initialised.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInitialize(model: *mut api::Model) -> *mut api::Error {
    guard("loading the model", || {
        let handle = ModelHandle(model);
        let name = handle.name()?;
        let dir = handle.version_dir()?;
        let mut config = handle.config()?;
        let auto = handle.auto_complete()?;
        let (loaded, changed) =
            TvmModel::load(&name, &dir, &mut config, auto).map_err(|e| e.context(format!("model '{name}'")))?;
        if changed {
            handle.set_config(&config)?;
        }
        api::log(api::LOG_INFO, &loaded.describe());
        for note in loaded.builds.iter().filter_map(|b| b.note.as_deref()) {
            api::log(api::LOG_WARN, note);
        }
        let state = Box::into_raw(Box::new(Arc::new(loaded)));
        // SAFETY: the model being initialised; the state is ours until ModelFinalize takes it back.
        let set = check(unsafe { (triton().TRITONBACKEND_ModelSetState)(model, state.cast()) }, "the model's state");
        if set.is_err() {
            // SAFETY: never handed over: ours to drop.
            drop(unsafe { Box::from_raw(state) });
        }
        set
    })
}

/// The state this backend set on a model or an instance (`getter`: Triton's function reading it),
/// if any: a model or instance whose initialisation failed has none.
///
/// # Safety
/// `handle` is a model or instance (as `getter` takes) this backend initialised and has not
/// finalised.
unsafe fn state_of<T>(
    getter: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> *mut api::Error,
    handle: *mut c_void,
) -> Result<Option<*mut T>> {
    let mut state: *mut c_void = std::ptr::null_mut();
    // SAFETY: the caller's handle, of the kind `getter` reads.
    check(unsafe { getter(handle, &mut state) }, "the backend's state")?;
    Ok((!state.is_null()).then_some(state.cast()))
}

/// The model's state, as `ModelInitialize` set it.
///
/// # Safety
/// As for [`state_of`].
unsafe fn model_state(model: *mut api::Model) -> Result<Option<*mut Arc<TvmModel>>> {
    // SAFETY: the caller's promise.
    unsafe { state_of(triton().TRITONBACKEND_ModelState, model) }
}

/// # Safety
/// Triton's contract: `model` is a model this backend initialised, finalised once.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelFinalize(model: *mut api::Model) -> *mut api::Error {
    guard("unloading the model", || {
        // SAFETY: the caller's model. A model whose initialisation failed has no state.
        if let Some(state) = unsafe { model_state(model) }? {
            // SAFETY: the boxed Arc ModelInitialize made, taken back once here (instances hold their own).
            drop(unsafe { Box::from_raw(state) });
        }
        Ok(())
    })
}

/// # Safety
/// Triton's contract: `instance` is the instance being initialised.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceInitialize(instance: *mut api::Instance) -> *mut api::Error {
    guard("an instance of the model", || {
        let t = triton();
        let (mut kind, mut model) = (0u32, std::ptr::null_mut());
        // SAFETY: the instance being initialised.
        check(unsafe { (t.TRITONBACKEND_ModelInstanceKind)(instance, &mut kind) }, "the instance's kind")?;
        // KIND_GPU: this backend has no GPU runtime (OpenCL devices are chosen by the artefact).
        if kind == 2 {
            return Err(Error::value("instance_group kind KIND_GPU: the tvm backend runs on the CPU (use KIND_CPU)"));
        }
        // SAFETY: as above.
        check(unsafe { (t.TRITONBACKEND_ModelInstanceModel)(instance, &mut model) }, "the instance's model")?;
        // SAFETY: the instance's model, initialised by this backend and alive while it has instances.
        let state = unsafe { model_state(model) }?.ok_or_else(|| Error::internal("the model has no state"))?;
        // SAFETY: as above: the model's boxed Arc, alive until ModelFinalize.
        let shared = unsafe { &*state }.clone();
        let state = Box::into_raw(Box::new(Instance::new(shared)?));
        // SAFETY: the instance being initialised; the state is ours until InstanceFinalize.
        let set =
            check(unsafe { (t.TRITONBACKEND_ModelInstanceSetState)(instance, state.cast()) }, "the instance's state");
        if set.is_err() {
            // SAFETY: never handed over: ours to drop.
            drop(unsafe { Box::from_raw(state) });
        }
        set
    })
}

/// The instance's state, as `ModelInstanceInitialize` set it.
///
/// # Safety
/// As for [`state_of`].
unsafe fn instance_state(instance: *mut api::Instance) -> Result<Option<*mut Instance>> {
    // SAFETY: the caller's promise.
    unsafe { state_of(triton().TRITONBACKEND_ModelInstanceState, instance) }
}

/// # Safety
/// Triton's contract: `instance` is an instance this backend initialised, finalised once.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceFinalize(instance: *mut api::Instance) -> *mut api::Error {
    guard("unloading an instance", || {
        // SAFETY: the caller's instance.
        if let Some(state) = unsafe { instance_state(instance) }? {
            // SAFETY: the boxed Instance InstanceInitialize made, taken back once.
            drop(unsafe { Box::from_raw(state) });
        }
        Ok(())
    })
}

/// # Safety
/// Triton's contract: `instance` is an instance of this backend, never called concurrently with
/// itself; `requests` holds `count` live requests, which this call answers and releases.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceExecute(
    instance: *mut api::Instance,
    requests: *mut *mut api::Request,
    count: u32,
) -> *mut api::Error {
    let exec_start = crate::clock::now_ns();
    let requests: &[*mut api::Request] = if requests.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Triton hands `count` request pointers at `requests`.
        unsafe { std::slice::from_raw_parts(requests, count as usize) }
    };
    // SAFETY: the caller's instance; Triton runs one execute of it at a time.
    let state = match unsafe { instance_state(instance) }
        .and_then(|s| s.ok_or_else(|| Error::internal("the instance has no state")))
    {
        // SAFETY: the instance's boxed state, alive until InstanceFinalize.
        Ok(s) => unsafe { &*s },
        Err(e) => {
            for &r in requests {
                // SAFETY: live requests of this call, each answered and released once.
                unsafe { fail_and_release(r, &e) };
            }
            return std::ptr::null_mut();
        }
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: live requests of this call; what is read borrows them until their release below.
        let checked: Vec<Result<_>> = requests
            .iter()
            .map(|&r| unsafe { handles::read_request(r) }.and_then(|inc| crate::request::check(&state.model.spec, inc)))
            .collect();
        let mut compute = (0u64, 0u64);
        let answers = state.execute(&checked, &mut compute);
        let rows: usize = checked
            .iter()
            .zip(&answers)
            .filter(|(_, a)| a.is_ok())
            .map(|(c, _)| c.as_ref().map_or(0, |c| c.rows))
            .sum();
        (answers, compute, rows)
    }));
    let t = triton();
    match outcome {
        Ok((answers, compute, rows)) => {
            for (&r, answer) in requests.iter().zip(&answers) {
                // SAFETY: live requests of this call.
                let sent = unsafe { handles::respond(r, answer, &state.model.spec) };
                if let Err(e) = &sent {
                    api::log(api::LOG_ERROR, &e.to_string());
                }
                let ok = answer.is_ok() && sent.is_ok();
                let exec_end = crate::clock::now_ns();
                // SAFETY: the instance and a live request; statistics before the release.
                let e = unsafe {
                    (t.TRITONBACKEND_ModelInstanceReportStatistics)(
                        instance, r, ok, exec_start, compute.0, compute.1, exec_end,
                    )
                };
                log_error(e);
                // SAFETY: released once, after its answer.
                log_error(unsafe { (t.TRITONBACKEND_RequestRelease)(r, api::RELEASE_ALL) });
            }
            if rows > 0 {
                let exec_end = crate::clock::now_ns();
                // SAFETY: the instance.
                let e = unsafe {
                    (t.TRITONBACKEND_ModelInstanceReportBatchStatistics)(
                        instance,
                        rows as u64,
                        exec_start,
                        compute.0,
                        compute.1,
                        exec_end,
                    )
                };
                log_error(e);
            }
        }
        Err(_) => {
            let e = Error::internal("the tvm backend failed while running these requests");
            for &r in requests {
                // SAFETY: live requests of this call, none answered yet.
                unsafe { fail_and_release(r, &e) };
            }
        }
    }
    std::ptr::null_mut()
}

fn log_error(e: *mut api::Error) {
    if !e.is_null() {
        // SAFETY: an error Triton just returned.
        api::log(api::LOG_ERROR, &unsafe { api::take_error(e) });
    }
}

/// Answers `request` with `e` and releases it.
///
/// # Safety
/// `request` is a live request of the current execute call, not yet answered.
unsafe fn fail_and_release(request: *mut api::Request, e: &Error) {
    // SAFETY: the caller's live request.
    if let Err(sent) = unsafe { handles::respond(request, &Err(Error::new(e.kind(), e.to_string())), &empty_spec()) } {
        api::log(api::LOG_ERROR, &sent.to_string());
    }
    // SAFETY: released once.
    log_error(unsafe { (triton().TRITONBACKEND_RequestRelease)(request, api::RELEASE_ALL) });
}

fn empty_spec() -> crate::config::Spec {
    crate::config::Spec { max_batch_size: 0, inputs: Vec::new(), outputs: Vec::new(), feed: Vec::new() }
}
