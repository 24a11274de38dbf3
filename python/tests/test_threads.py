"""One model object called from many threads at once: every answer is the caller's own (also when
each request is TVM's three calls, set_input, run, get_output, which is where a shared GraphModule
hands one request another's output), and the activation memory follows the pool's capacity, not
the number of threads."""

from __future__ import annotations

import threading

import numpy as np
from conftest import load

import tvmrt

THREADS = 16
ROUNDS = 25


def distinct_inputs(f, n):
    rng = np.random.default_rng(7)
    return [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in f.inputs.items()} for _ in range(n)]


def run_threads(body):
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def wrapped(i):
        try:
            start.wait()
            body(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_requests_as_graphmodule_calls_never_get_anothers_answer():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir, concurrency=2)
    feeds = distinct_inputs(f, THREADS)
    want = [m.run(feed)[0] for feed in feeds]
    assert len({w.tobytes() for w in want}) == THREADS, "the inputs give distinct answers"
    wrong = [0] * THREADS

    def body(i):
        for _ in range(ROUNDS):
            m.set_input("data", feeds[i]["data"])
            m.run()
            got = m.get_output(0).numpy()
            if got.tobytes() != want[i].tobytes():
                wrong[i] += 1

    run_threads(body)
    assert sum(wrong) == 0, f"{sum(wrong)} of {THREADS * ROUNDS} answers were another request's"
    pool = m.memory_usage()["arena_pool"]
    assert pool["capacity"] == 2 and pool["arenas"] <= 2, pool
    assert pool["members"] >= 2 and pool["peak_lent"] <= 2, pool


def test_one_call_runs_from_many_threads_byte_equal():
    f = load("convnet")
    m = tvmrt.Model(f.dir, concurrency=3)
    feeds = distinct_inputs(f, THREADS)
    want = [m.run(feed) for feed in feeds]

    def body(i):
        for r in range(ROUNDS):
            got = m(feeds[(i + r) % THREADS])
            assert [g.tobytes() for g in got] == [w.tobytes() for w in want[(i + r) % THREADS]]

    run_threads(body)
    u = m.memory_usage()
    assert u["arena_pool"]["arenas"] <= 3, u["arena_pool"]
    # Executors share the weights: one copy, whatever the number of threads.
    assert all(e["weights_owned"] == 0 for e in u["executors_idle"]), u["executors_idle"]


def test_sessions_hold_an_executor_each_and_give_it_back():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir, concurrency=1)
    feeds = distinct_inputs(f, 4)
    with m.session() as a, m.session() as b:
        a.set_input("data", feeds[0]["data"])
        b.set_input("data", feeds[1]["data"])
        [ya] = a.run()
        [yb] = b.run()
        assert ya.tobytes() == m.run(feeds[0])[0].tobytes()
        assert yb.tobytes() == m.run(feeds[1])[0].tobytes()
    made = m.memory_usage()["executors"]
    for _ in range(5):
        with m.session() as s:
            s.run(feeds[2])
    assert m.memory_usage()["executors"] == made, "sessions reuse the executors given back"


def test_a_thread_that_ends_gives_its_executor_back():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    m.run(f.inputs)
    made = m.memory_usage()["executors"]
    for _ in range(6):
        t = threading.Thread(target=lambda: m.run(f.inputs))
        t.start()
        t.join()
    assert m.memory_usage()["executors"] <= made + 1, m.memory_usage()["executors"]
