//! fork() while another thread holds one of the runtime's process-wide locks: the fork waits for
//! it, and the child finds it free (before, the child waited for ever for a thread it does not
//! have). Each lock is held on purpose for a while, so the fork lands inside: the type table's
//! (the test holds its guard) and the global registry's (a function replaced in it whose finalizer
//! takes its time, which runs under the registry's lock). OpenCL set up before a fork is refused
//! in the child with a message, not waited on for ever. A test binary of its own: it forks.

mod common;

use common::Fixture;
use std::ffi::{c_void, CString};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tvm_runtime::capi::function::{TVMFuncCreateFromCFunc, TVMFuncFree, TVMFuncGetGlobal, TVMFuncRegisterGlobal};
use tvm_runtime::dlpack::TVMValue;

const HELD_FOR: Duration = Duration::from_millis(400);

/// Forks while `hold` (run on another thread, which it tells through the sender once it holds
/// its lock) keeps a lock; the child runs `child` under a deadline. Returns how long the fork
/// took and the child's exit status.
fn fork_while(hold: impl FnOnce(mpsc::Sender<()>) + Send + 'static, child: impl FnOnce() -> bool) -> (Duration, i32) {
    let (tx, rx) = mpsc::channel();
    let holder = std::thread::spawn(move || hold(tx));
    rx.recv().unwrap();
    let start = Instant::now();
    // SAFETY: the child only runs `child` and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: alarm ends a child that hangs, which the parent sees as SIGALRM.
        unsafe { libc::alarm(20) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let took = start.elapsed();
    let mut status = 0;
    // SAFETY: the child just made.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    holder.join().unwrap();
    (took, status)
}

/// The child's work: a run of the model, right to the byte, and a registry lookup.
fn child_runs(f: &Fixture, ex: &tvm_runtime::object::ObjRef<tvm_runtime::module::Module>) -> bool {
    f.set_inputs(ex);
    common::exec(ex).run().unwrap();
    f.check_outputs(ex, "in the child");
    let mut h = std::ptr::null_mut();
    let name = CString::new("runtime.GetDeviceAttr").unwrap();
    // SAFETY: a valid name and out-pointer.
    unsafe { TVMFuncGetGlobal(name.as_ptr(), &mut h) == 0 && !h.is_null() }
}

fn assert_ran(status: i32, what: &str) {
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what}: the child {}",
        if libc::WIFSIGNALED(status) {
            format!("was killed by signal {} (hung)", libc::WTERMSIG(status))
        } else {
            format!("exited {}", libc::WEXITSTATUS(status))
        }
    );
}

fn assert_waited_and_ran(took: Duration, status: i32, what: &str) {
    assert_ran(status, what);
    // The fork waited for the holder (less a little: the holder's clock started first).
    assert!(took >= HELD_FOR / 2, "{what}: the fork took {took:?}, not waiting for the lock's holder");
}

unsafe extern "C" fn nothing(_: *mut TVMValue, _: *mut i32, _: i32, _: *mut c_void, _: *mut c_void) -> i32 {
    0
}

/// A finalizer that tells the test it runs (under the registry's lock), then takes its time.
unsafe extern "C" fn slow_finalizer(resource: *mut c_void) {
    // SAFETY: the resource is the boxed sender the test made, used once.
    let tx = unsafe { Box::from_raw(resource.cast::<mpsc::Sender<()>>()) };
    tx.send(()).unwrap();
    std::thread::sleep(HELD_FOR);
}

fn function(fin: Option<unsafe extern "C" fn(*mut c_void)>, resource: *mut c_void) -> *mut c_void {
    let mut h = std::ptr::null_mut();
    // SAFETY: a valid callback and out-pointer.
    assert_eq!(unsafe { TVMFuncCreateFromCFunc(Some(nothing), resource, fin, &mut h) }, 0);
    h
}

#[test]
fn a_fork_waits_for_the_runtimes_locks_and_the_child_finds_them_free() {
    let f = Fixture::load("convnet");
    let lib = f.load_lib();
    let ex = f.executor_from_factory(&lib);
    f.set_inputs(&ex);
    common::exec(&ex).run().unwrap(); // the thread pool is started
    f.check_outputs(&ex, "in the parent");

    // The type table, held by another thread.
    let (took, status) = fork_while(
        |tx| {
            let table = tvm_runtime::object::type_table::table();
            tx.send(()).unwrap();
            std::thread::sleep(HELD_FOR);
            drop(table);
        },
        || {
            drop(tvm_runtime::object::type_table::table());
            child_runs(&f, &ex)
        },
    );
    assert_waited_and_ran(took, status, "the type table held");

    // The registry, held by another thread replacing a function whose finalizer is slow.
    let name = CString::new("test.fork.slow").unwrap();
    let (took, status) = fork_while(
        {
            let name = name.clone();
            move |tx| {
                let first = function(Some(slow_finalizer), Box::into_raw(Box::new(tx)).cast());
                // SAFETY: a live name and function; the registry then holds the only reference.
                unsafe {
                    assert_eq!(TVMFuncRegisterGlobal(name.as_ptr(), first, 0), 0);
                    assert_eq!(TVMFuncFree(first), 0);
                }
                // Replacing it drops the first under the registry's lock: the finalizer signals.
                let second = function(None, std::ptr::null_mut());
                // SAFETY: as above.
                unsafe {
                    assert_eq!(TVMFuncRegisterGlobal(name.as_ptr(), second, 1), 0);
                    assert_eq!(TVMFuncFree(second), 0);
                }
            }
        },
        || child_runs(&f, &ex),
    );
    assert_waited_and_ran(took, status, "the registry held");
    assert!(child_runs(&f, &ex), "the parent after the forks");
}

#[test]
fn opencl_set_up_before_a_fork_is_refused_in_the_child_not_hung() {
    if !common::have_opencl() {
        return;
    }
    let api = tvm_runtime::device::api(4).unwrap();
    let p = api.alloc(0, 256, 64).unwrap(); // set up, with the driver's threads started
    let (_, status) = fork_while(
        |tx| tx.send(()).unwrap(),
        || {
            let err = api.alloc(0, 256, 64).expect_err("OpenCL in a forked child");
            err.to_string().contains("before this process was forked")
        },
    );
    assert_ran(status, "OpenCL in the child");
    // SAFETY: the buffer allocated above, not used since.
    unsafe { api.free(0, p) }.unwrap();
}
