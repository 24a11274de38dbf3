//! Bytes results through the C API: they live in the calling thread's slot until its next call,
//! and a large one is given back at that next call whatever it returns (an integer, nothing, an
//! object), not kept until the thread's next bytes. A test binary of its own: the heap measured
//! is the whole process's, which no other test may move meanwhile.

use std::ffi::{c_int, c_void};
use tvm_runtime::capi::function::{TVMCFuncSetReturn, TVMFuncCall, TVMFuncCreateFromCFunc, TVMFuncFree};
use tvm_runtime::dlpack::{kTVMArgInt, kTVMBytes, kTVMNullptr, TVMByteArray, TVMValue};

const BIG: usize = 4 << 20;

/// Returns the bytes of the `Vec<u8>` its resource points at.
unsafe extern "C" fn give_bytes(_: *mut TVMValue, _: *mut i32, _: i32, ret: *mut c_void, resource: *mut c_void) -> i32 {
    // SAFETY: the resource is the test's vector, alive for every call.
    let bytes = unsafe { &*resource.cast::<Vec<u8>>() };
    let mut array = TVMByteArray { data: bytes.as_ptr().cast(), size: bytes.len() };
    let mut value = TVMValue { v_handle: (&mut array as *mut TVMByteArray).cast() };
    let mut code = kTVMBytes;
    // SAFETY: `ret` is the slot of this call; the value is borrowed for it (copied).
    unsafe { TVMCFuncSetReturn(ret, &mut value, &mut code, 1) }
}

/// Returns 7.
unsafe extern "C" fn give_int(_: *mut TVMValue, _: *mut i32, _: i32, ret: *mut c_void, _: *mut c_void) -> i32 {
    let mut value = TVMValue { v_int64: 7 };
    let mut code = kTVMArgInt;
    // SAFETY: as above.
    unsafe { TVMCFuncSetReturn(ret, &mut value, &mut code, 1) }
}

/// Returns nothing.
unsafe extern "C" fn give_nothing(_: *mut TVMValue, _: *mut i32, _: i32, _: *mut c_void, _: *mut c_void) -> i32 {
    0
}

/// The bytes the process's heap holds (mmapped chunks included).
fn heap() -> usize {
    // SAFETY: a plain query of the allocator.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

fn function(
    f: unsafe extern "C" fn(*mut TVMValue, *mut i32, i32, *mut c_void, *mut c_void) -> i32,
    resource: *mut c_void,
) -> *mut c_void {
    let mut h = std::ptr::null_mut();
    // SAFETY: a valid callback and out-pointer.
    assert_eq!(unsafe { TVMFuncCreateFromCFunc(Some(f), resource, None, &mut h) }, 0);
    h
}

/// Calls `f` with no arguments: the result's value and type code.
fn call(f: *mut c_void) -> (TVMValue, c_int) {
    let (mut value, mut code) = (TVMValue { v_int64: 0 }, -1);
    // SAFETY: a live function; no arguments.
    let rc = unsafe { TVMFuncCall(f, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut value, &mut code) };
    assert_eq!(rc, 0);
    (value, code)
}

#[test]
fn a_large_bytes_result_is_given_back_at_the_next_call() {
    let mut big: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let mut small: Vec<u8> = b"small".to_vec();
    let bytes = function(give_bytes, (&mut big as *mut Vec<u8>).cast());
    let few = function(give_bytes, (&mut small as *mut Vec<u8>).cast());
    let int = function(give_int, std::ptr::null_mut());
    let nothing = function(give_nothing, std::ptr::null_mut());
    for next in [int, nothing, few] {
        let before = heap();
        let (value, code) = call(bytes);
        assert_eq!(code, kTVMBytes);
        // SAFETY: a bytes result points at the thread's slot until its next call.
        let got = unsafe {
            let array = &*value.v_handle.cast::<TVMByteArray>();
            std::slice::from_raw_parts(array.data.cast::<u8>(), array.size)
        };
        assert!(got == &big[..], "the bytes as given");
        let held = heap();
        assert!(held >= before + BIG, "the result is held: {before} -> {held}");
        let (value, code) = call(next);
        let after = heap();
        assert!(after + BIG <= held, "given back at the next call: {held} -> {after}");
        if code == kTVMArgInt {
            // SAFETY: an integer result.
            assert_eq!(unsafe { value.v_int64 }, 7);
        } else if code == kTVMBytes {
            // SAFETY: as above.
            let array = unsafe { &*value.v_handle.cast::<TVMByteArray>() };
            assert_eq!(array.size, small.len());
        } else {
            assert_eq!(code, kTVMNullptr);
        }
    }
    // Another thread's large result is its own: this thread's calls go on, and that thread's
    // next call gives it back.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (bytes_addr, int_addr) = (bytes as usize, int as usize);
    let other = std::thread::spawn(move || {
        let (_, code) = call(bytes_addr as *mut c_void);
        assert_eq!(code, kTVMBytes);
        rx.recv().unwrap();
        let held = heap();
        call(int_addr as *mut c_void);
        assert!(heap() + BIG <= held, "the other thread's result given back at its next call");
    });
    for _ in 0..3 {
        assert_eq!(call(int).1, kTVMArgInt);
    }
    tx.send(()).unwrap();
    other.join().unwrap();
    for f in [bytes, few, int, nothing] {
        // SAFETY: the test's own references.
        assert_eq!(unsafe { TVMFuncFree(f) }, 0);
    }
}
