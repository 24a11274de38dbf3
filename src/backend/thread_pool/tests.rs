//! The thread pool's unit tests.

use super::*;
use std::sync::atomic::AtomicI32;

struct Data {
    hits: [AtomicI32; 8],
    after_barrier_saw: [AtomicI32; 8],
}

/// Each task marks itself, waits at the barrier, then checks every task marked itself.
unsafe extern "C" fn lambda(task: i32, penv: *mut TVMParallelGroupEnv, cdata: *mut c_void) -> i32 {
    // SAFETY: the test passes a `Data` and a live environment.
    unsafe {
        let d = &*cdata.cast::<Data>();
        let n = (*penv).num_task;
        d.hits[task as usize].fetch_add(1, Ordering::SeqCst);
        barrier(penv).unwrap();
        let seen = (0..n as usize).filter(|&t| d.hits[t].load(Ordering::SeqCst) > 0).count();
        d.after_barrier_saw[task as usize].store(seen as i32, Ordering::SeqCst);
        if task == 1 {
            last_error::set("boom");
            return -1;
        }
        0
    }
}

/// The pool's size is process-wide: tests that set it take turns.
static SIZE: Mutex<()> = Mutex::new(());

fn sized(threads: usize) -> std::sync::MutexGuard<'static, ()> {
    let g = SIZE.lock().unwrap_or_else(|e| e.into_inner());
    // More threads than cores is what these tests exercise: lift the cap first.
    set_max_concurrency(threads);
    configure(Mode::Default, threads, &[]).unwrap();
    g
}

#[test]
fn tasks_run_concurrently_with_barriers_and_errors_name_the_task() {
    let _size = sized(3);
    for _ in 0..50 {
        let d = Data { hits: Default::default(), after_barrier_saw: Default::default() };
        // SAFETY: the lambda only touches `d`, alive for the launch.
        let r = unsafe { parallel_launch(lambda, (&d as *const Data).cast_mut().cast(), 3) };
        let e = r.unwrap_err().to_string();
        assert_eq!(e, "Task 1 error: boom");
        for t in 0..3 {
            assert_eq!(d.hits[t].load(Ordering::SeqCst), 1, "task {t} ran once");
            assert_eq!(d.after_barrier_saw[t].load(Ordering::SeqCst), 3, "barrier let task {t} through early");
        }
    }
    // SAFETY: a launch that is refused before it runs anything (9 tasks above the maximum).
    assert!(unsafe { parallel_launch(lambda, std::ptr::null_mut(), 9) }.is_err());
    set_max_concurrency(0);
    configure(Mode::Default, 0, &[]).unwrap();
}

/// Splits 1000 items among `num_task` tasks as generated code does.
unsafe extern "C" fn count_items(task: i32, penv: *mut TVMParallelGroupEnv, cdata: *mut c_void) -> i32 {
    // SAFETY: the test passes 1000 counters and a live environment.
    unsafe {
        let items = std::slice::from_raw_parts(cdata.cast::<AtomicI32>(), 1000);
        let n = (*penv).num_task as usize;
        let chunk = 1000usize.div_ceil(n);
        for item in &items[(task as usize * chunk).min(1000)..((task as usize + 1) * chunk).min(1000)] {
            item.fetch_add(1, Ordering::Relaxed);
        }
    }
    0
}

#[test]
fn all_thread_launches_cover_the_work_once_whichever_way_they_run() {
    let _size = sized(2);
    let items: Vec<AtomicI32> = (0..1000).map(|_| AtomicI32::new(0)).collect();
    for _ in 0..300 {
        // SAFETY: the lambda only touches `items`, alive for the launch.
        unsafe { parallel_launch(count_items, items.as_ptr().cast_mut().cast(), 0) }.unwrap();
    }
    assert!(items.iter().all(|i| i.load(Ordering::Relaxed) == 300));
    set_max_concurrency(0);
    configure(Mode::Default, 0, &[]).unwrap();
}

#[test]
fn host_threads_launching_at_once_share_one_pool_and_all_finish_their_work() {
    let _size = sized(2);
    let counts = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let items: Vec<AtomicI32> = (0..1000).map(|_| AtomicI32::new(0)).collect();
                    for _ in 0..200 {
                        // SAFETY: the lambda only touches `items`, alive for the launch.
                        unsafe { parallel_launch(count_items, items.as_ptr().cast_mut().cast(), 2) }.unwrap();
                    }
                    items.iter().all(|i| i.load(Ordering::Relaxed) == 200)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(counts, vec![true; 4]);
    let pool = POOL.lock().unwrap();
    assert_eq!(pool.as_ref().map(Pool::threads), Some(2), "one pool of the configured size");
    drop(pool);
    set_max_concurrency(0);
    configure(Mode::Default, 0, &[]).unwrap();
}

/// Records how many tasks the launch was given.
unsafe extern "C" fn count_tasks(_task: i32, penv: *mut TVMParallelGroupEnv, cdata: *mut c_void) -> i32 {
    // SAFETY: the test passes an AtomicI32 and a live environment.
    unsafe { (*cdata.cast::<AtomicI32>()).store((*penv).num_task, Ordering::SeqCst) };
    0
}

#[test]
fn a_threads_own_count_caps_its_launches_and_ends_with_the_call() {
    let _size = sized(3);
    let seen = AtomicI32::new(0);
    let cdata = (&seen as *const AtomicI32).cast_mut().cast();
    let launch = || {
        // SAFETY: the lambda only writes `seen`, alive for the launch.
        unsafe { parallel_launch(count_tasks, cdata, 0) }.unwrap();
        seen.load(Ordering::SeqCst)
    };
    assert_eq!(with_threads(2, launch), 2);
    assert_eq!(with_threads(1, launch), 1);
    // 0 is the process's count; more than the process allows is capped at it.
    assert_eq!(with_threads(0, num_threads), 3);
    assert_eq!(with_threads(16, launch_threads), 3);
    // Nested calls restore what was there, and the thread is back to the process's after.
    with_threads(2, || {
        with_threads(1, || assert_eq!(launch_threads(), 1));
        assert_eq!(launch_threads(), 2);
    });
    assert_eq!(launch_threads(), 3);
    set_max_concurrency(0);
    configure(Mode::Default, 0, &[]).unwrap();
}
