//! c_tests/opencl_shim.c as a test process's OpenCL library: built once and selected with
//! `TVM_RT_OPENCL_LIBRARY` before anything opens OpenCL (so a test file that uses it is a process
//! of its own); the test drives it through its exported functions.

use std::sync::OnceLock;

/// The shim, built once and selected before anything opens OpenCL; `None` without a device.
pub fn shim() -> Option<&'static libloading::Library> {
    static SHIM: OnceLock<Option<libloading::Library>> = OnceLock::new();
    SHIM.get_or_init(|| {
        let out = super::temp_path("opencl_shim.so");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("c_tests/opencl_shim.c");
        let built = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&out)
            .arg(&src)
            .args(["-ldl", "-lpthread"])
            .status()
            .expect("a C compiler");
        assert!(built.success(), "building the OpenCL shim");
        std::env::set_var("TVM_RT_OPENCL_LIBRARY", &out);
        let lib = if super::have_opencl() {
            // SAFETY: the shim this test just built, which the runtime has loaded already (the
            // same file, so the same instance).
            Some(unsafe { libloading::Library::new(&out) }.unwrap())
        } else {
            None
        };
        // Both have it open now (the runtime opens OpenCL once): the file can go.
        let _ = std::fs::remove_file(&out);
        lib
    })
    .as_ref()
}

/// Fails the `n`-th call of `function` from now on (and every later one when `persistent`); `n` =
/// 0 disarms.
pub fn fail(lib: &libloading::Library, function: &str, n: i64, persistent: bool) {
    let name = std::ffi::CString::new(function).unwrap();
    // SAFETY: the shim's exported control function, of this signature.
    unsafe {
        let f = lib
            .get::<unsafe extern "C" fn(*const std::ffi::c_char, std::ffi::c_long, i32)>(b"tvm_rt_cl_shim_fail\0")
            .unwrap();
        f(name.as_ptr(), n as std::ffi::c_long, i32::from(persistent));
    }
}
