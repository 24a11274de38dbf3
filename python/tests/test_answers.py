"""Every answer right or an error, never a wrong answer: inputs in any byte order, memory order or
provenance (property-based, against the contiguous native array's answer), one caller's weights
never another's, views that stay what they were, names that C would read otherwise, a closed
model, forked children, system-lib builds."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import FIXTURES, assert_outputs, load, syslib_so

import tvmrt

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MULTI = load("multi_io")  # float32, int32 and uint8 inputs
MULTI_MODEL = tvmrt.Model(MULTI.dir, concurrency=2)


def answers(model, feed=None, **kw):
    return [o.tobytes() for o in model.run(feed, **kw)]


# Inputs as callers hold them.
def layouts(draw, arr):
    """`arr`'s values in another memory layout, byte order or ownership, drawn."""
    order = draw(st.sampled_from(["C", "F", "strided", "reversed", "transposed"]))
    if order == "F":
        out = np.asfortranarray(arr)
    elif order == "strided":
        wide = np.zeros((*arr.shape[:-1], arr.shape[-1] * 3), arr.dtype) if arr.ndim else arr.copy()
        if arr.ndim:
            wide[..., ::3] = arr
            out = wide[..., ::3]
        else:
            out = wide
    elif order == "reversed" and arr.ndim:
        out = arr[..., ::-1].copy()[..., ::-1]
    elif order == "transposed" and arr.ndim >= 2:
        out = np.ascontiguousarray(arr.T).T
    else:
        out = arr.copy()
    if draw(st.booleans()) and out.dtype.itemsize > 1:
        out = out.astype(out.dtype.newbyteorder(">" if sys.byteorder == "little" else "<"))
    if draw(st.booleans()):
        out.flags.writeable = False
    return out


@st.composite
def multi_feeds(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    feed = {}
    for name, ref in MULTI.inputs.items():
        if ref.dtype.kind == "f":
            v = rng.standard_normal(ref.shape).astype(ref.dtype)
        else:
            info = np.iinfo(ref.dtype)
            v = rng.integers(max(info.min, -1000), min(info.max, 1000), ref.shape, dtype=ref.dtype)
        feed[name] = v
    return feed, {k: layouts(draw, v) for k, v in feed.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(multi_feeds(), st.sampled_from(["mapping", "keywords", "set_input", "session", "list"]))
def test_any_byte_order_or_layout_gives_the_native_answer(feeds, route):
    native, held = feeds
    want = answers(MULTI_MODEL, native)
    m = MULTI_MODEL
    if route == "mapping":
        got = answers(m, held)
    elif route == "keywords":
        got = answers(m, **held)
    elif route == "list":
        got = answers(m, [held[t.name] for t in m.inputs])
    elif route == "set_input":
        for k, v in held.items():
            m.set_input(k, v)
        m.run()
        got = [m.get_output(i).numpy().tobytes() for i in range(m.get_num_outputs())]
    else:
        with m.session() as s:
            for k, v in held.items():
                s.set_input(k, v)
            got = [o.tobytes() for o in s.run()]
    assert got == want


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["int8", "int16", "int64", "uint16", "uint32", "float16", "float32", "float64", "bool"]))
def test_another_dtype_is_refused_or_cast_on_request(dtype):
    f = MULTI
    y = f.inputs["y"]  # int32
    other = y.astype(dtype)
    feed = {**f.inputs, "y": other}
    if np.dtype(dtype) == y.dtype:
        return
    with pytest.raises(tvmrt.InvalidTypeError, match="cast=True"):
        MULTI_MODEL.run(feed)
    # Cast on request, as TVM's set_input did: the int32 array's answer when values survive.
    got = answers(MULTI_MODEL, feed, cast=True)
    assert got == answers(MULTI_MODEL, {**f.inputs, "y": other.astype(np.int32)})
    safe = np.can_cast(np.dtype(dtype), np.int32, "safe")
    if safe:
        assert answers(MULTI_MODEL, feed, cast="safe") == got
    else:
        with pytest.raises(tvmrt.InvalidTypeError):
            MULTI_MODEL.run(feed, cast="safe")


def test_python_numbers_take_the_inputs_dtype_when_every_value_survives():
    f = MULTI
    as_lists = {k: v.tolist() for k, v in f.inputs.items()}
    assert answers(MULTI_MODEL, as_lists) == answers(MULTI_MODEL, f.inputs)
    with pytest.raises(tvmrt.InvalidTypeError, match="non-integer"):
        MULTI_MODEL.run({**f.inputs, "y": (f.inputs["y"] + 0.5).tolist()})
    with pytest.raises(tvmrt.InvalidValueError, match="outside"):
        MULTI_MODEL.run({**f.inputs, "z": (f.inputs["z"].astype(np.int64) + 300).tolist()})
    with pytest.raises(tvmrt.TVMRTError):
        MULTI_MODEL.run({**f.inputs, "x": [["a"]]})


def test_big_endian_files_as_np_load_returns_them(tmp_path):
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    x = f.inputs["data"]
    np.save(tmp_path / "x.npy", x.astype(">f4"))
    back = np.load(tmp_path / "x.npy")
    assert back.dtype.byteorder == ">"
    assert_outputs(m.run(data=back), f.outputs, "big-endian .npy")
    assert_outputs(m.run(data=np.frombuffer(x.astype(">f4").tobytes(), ">f4").reshape(x.shape)), f.outputs, "frombuf")


def test_masked_object_and_complex_arrays_are_refused():
    x = MULTI.inputs["x"]
    for bad in (np.ma.masked_array(x), x.astype(object), x.astype(np.complex64)):
        with pytest.raises(tvmrt.TVMRTError):
            MULTI_MODEL.run({**MULTI.inputs, "x": bad})


# Names.
@settings(max_examples=80, deadline=None)
@given(st.one_of(st.text(max_size=20), st.binary(max_size=8), st.floats(), st.none(), st.booleans(), st.integers()))
def test_names_and_keys_of_every_kind(key):
    m = MULTI_MODEL
    x = MULTI.inputs["x"]
    if isinstance(key, str) and key in m._input_indices:
        return
    if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < m.get_num_inputs():
        return
    before = answers(m, MULTI.inputs)
    with pytest.raises(tvmrt.TVMRTError):
        if key is None:
            m.set_input(None, x)
        else:
            m.set_input(key, x)
    with pytest.raises(tvmrt.TVMRTError):
        m.run({**MULTI.inputs, key: x} if isinstance(key, str) else {key: x})
    # Nothing was set under another name.
    assert answers(m, MULTI.inputs) == before


def test_a_name_with_a_nul_is_refused_not_read_short():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    want = m.run(f.inputs)[0]
    zeros = np.zeros_like(f.inputs["data"])
    for name in ("data\x00junk", "data\x00"):
        # Not one of the model's names (it never reaches C, where it would read as 'data').
        with pytest.raises(tvmrt.InvalidKeyError, match="no input named"):
            m.set_input(name, zeros)
        with pytest.raises(tvmrt.TVMRTError):
            m.run({name: zeros})
    m.run()
    assert m.get_output(0).numpy().tobytes() == want.tobytes(), "the NUL name wrote 'data'"
    with pytest.raises(tvmrt.InvalidValueError):
        tvmrt.Model(str(f.dir) + "\x00/elsewhere")
    # Below the package's own checks, every string handed to C is refused with a NUL in it.
    from tvmrt import _ffi

    for call in (
        lambda: _ffi.global_function("runtime.NumThreads\x00junk"),
        lambda: _ffi.load_module(str(f.lib) + "\x00junk"),
        lambda: _ffi.global_function("runtime.ModuleGetTypeKey")("a\x00b"),
    ):
        with pytest.raises(tvmrt.InvalidValueError, match="NUL"):
            call()


# Weights.
@pytest.mark.parametrize("name", ["mlp_unbound_b1", "mlp_b1", "convnet"])
def test_one_callers_weight_stays_its_own(name):
    f = load(name)
    m = tvmrt.Model(f.dir)
    want = [o.tobytes() for o in m.run(f.inputs)]
    w = m.weights[0]
    m.set_input(w.name, np.zeros(w.shape, w.dtype))
    assert [o.tobytes() for o in m.run(f.inputs)] != want, "the caller's own weight is used by its runs"
    seen = {}
    t = threading.Thread(target=lambda: seen.setdefault("other", [o.tobytes() for o in m.run(f.inputs)]))
    t.start()
    t.join()
    assert seen["other"] == want, "another thread's executor got the caller's weight"
    with m.session() as s:
        assert [o.tobytes() for o in s.run(f.inputs)] == want, "a new session got the caller's weight"
    report = m.profile(f.inputs)
    assert report.calls
    b8 = FIXTURES / name.replace("b1", "b8")
    if b8 != f.dir and b8.is_dir():
        v = m.variant(b8)
        fb8 = load(b8.name)
        assert_outputs(v.run(fb8.inputs), fb8.outputs, "a variant made after the write")


def test_load_params_replaces_every_executors_weights():
    f = load("mlp_unbound_b1")
    m = tvmrt.Model(f.dir)
    want = m.run(f.inputs)[0]
    weights = tvmrt.load_params(f.dir / "params.bin")
    assert set(weights) == {w.name for w in m.weights}
    halved = {k: (v / 2).astype(v.dtype) for k, v in weights.items()}
    m.load_params(tvmrt.save_params(halved))
    other = tvmrt.Model(f.dir, params=tvmrt.save_params(halved))
    assert m.run(f.inputs)[0].tobytes() == other.run(f.inputs)[0].tobytes() != want.tobytes()
    with m.session() as s:
        assert s.run(f.inputs)[0].tobytes() == other.run(f.inputs)[0].tobytes()
    m.load_params(f.dir / "params.bin")
    assert m.run(f.inputs)[0].tobytes() == want.tobytes()


# Views.
def test_views_stay_what_they_were_after_their_thread_ends():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir, concurrency=1)
    views = {}

    def first():
        views["v"] = m.run(f.inputs, copy=False)[0]

    t = threading.Thread(target=first)
    t.start()
    t.join()
    del t
    kept = views["v"].copy()
    assert kept.tobytes() == f.outputs[0].tobytes()
    for _ in range(5):  # other threads' runs, on whatever executor the model gives them
        t = threading.Thread(target=lambda: m.run(data=np.zeros_like(f.inputs["data"])))
        t.start()
        t.join()
    m.run(data=np.ones_like(f.inputs["data"]))
    assert views["v"].tobytes() == kept.tobytes(), "a view of a finished thread's run was overwritten"
    # Once the views are gone, the executor serves again.
    made = m.memory_usage()["executors"]
    views.clear()
    for _ in range(3):
        t = threading.Thread(target=lambda: m.run(f.inputs))
        t.start()
        t.join()
    assert m.memory_usage()["executors"] <= made + 1


def test_a_sessions_views_outlive_its_close():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir, concurrency=1)
    with m.session() as s:
        [v] = s.run(f.inputs, copy=False)
    for _ in range(3):
        with m.session() as other:
            other.run(data=np.zeros_like(f.inputs["data"]))
    assert v.tobytes() == f.outputs[0].tobytes()


# Closing.
def test_a_closed_model_says_so_everywhere_and_its_sessions_end():
    f = load("mlp_unbound_b1")
    m = tvmrt.Model(f.dir)
    s = m.session()
    s.run(f.inputs)
    m.close()
    calls = [
        lambda: m.run(f.inputs),
        lambda: m.set_input("data", f.inputs["data"]),
        lambda: m.memory_usage(),
        lambda: m.prepare_params("/nonexistent/x"),
        lambda: m.variant(f.dir),
        lambda: m.profile(f.inputs),
        lambda: m.session(),
        lambda: m.benchmark(repeat=1, number=1),
        lambda: s.run(f.inputs),
        lambda: s.get_output(0),
    ]
    for call in calls:
        with pytest.raises(tvmrt.RuntimeFailure, match="closed"):
            call()
    assert "closed" in repr(m)


# fork().
CHILD_TIMEOUT = 60


def run_in_child(body):
    """Runs `body` in a forked child; its exit code (or None if it hung)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    deadline = time.time() + CHILD_TIMEOUT
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_runs_the_parents_models_and_its_own():
    f = load("convnet")  # its kernels launch on the thread pool
    m = tvmrt.Model(f.dir)
    assert_outputs(m.run(f.inputs), f.outputs, "parent")

    def child():
        ok = [o.tobytes() for o in m.run(f.inputs)] == [o.tobytes() for o in f.outputs]
        mine = tvmrt.Model(f.dir)
        ok &= [o.tobytes() for o in mine.run(f.inputs)] == [o.tobytes() for o in f.outputs]
        return 0 if ok else 3

    assert run_in_child(child) == 0
    assert_outputs(m.run(f.inputs), f.outputs, "parent after the fork")


def fork_while_threads_run(answers_right):
    """Forks five times while two threads run `answers_right` (true when a run of the model gives
    the expected bytes) without pause; every child must run it right too, within the deadline."""
    stop = threading.Event()
    wrong = []

    def busy():
        while not stop.is_set():
            if not answers_right():
                wrong.append(1)

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            code = run_in_child(lambda: 0 if answers_right() else 3)
            assert code == 0, f"the child {'hung' if code is None else f'exited {code}'}"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not wrong


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_fork_while_other_threads_run_leaves_the_child_able_to_run():
    f = load("convnet")
    m = tvmrt.Model(f.dir, concurrency=2)
    want = [o.tobytes() for o in f.outputs]
    fork_while_threads_run(lambda: [o.tobytes() for o in m.run(f.inputs)] == want)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_fork_while_other_threads_run_a_vm_model_leaves_the_child_able_to_run():
    m = tvmrt.Model(FIXTURES / "vm" / "0.16" / "seq_dyn")
    x = np.random.default_rng(5).standard_normal((1, 17, 8)).astype("float32")
    want = [o.tobytes() for o in m.run(x)]
    fork_while_threads_run(lambda: [o.tobytes() for o in m.run(x)] == want)


def _pool_worker(path: str) -> bytes:
    f = load(os.path.basename(path))
    return tvmrt.Model(path).run(f.inputs)[0].tobytes()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_multiprocessing_with_fork():
    f = load("convnet")
    tvmrt.Model(f.dir).run(f.inputs)  # the parent has run a model: its pool is started
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        got = pool.map_async(_pool_worker, [str(f.dir)] * 4).get(timeout=CHILD_TIMEOUT)
    assert got == [f.outputs[0].tobytes()] * 4


# System-lib builds.
def test_a_system_lib_build_loads_and_runs(tmp_path):
    d = syslib_so(tmp_path)
    f = load("mlp_syslib")
    # In a process of its own: a failure here would end the process, not raise.
    code = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, numpy as np, tvmrt; sys.path.insert(0, sys.argv[2]); from conftest import load; "
            "f = load('mlp_syslib'); m = tvmrt.Model(sys.argv[1]); "
            "assert m.run(f.inputs)[0].tobytes() == f.outputs[0].tobytes(); print('ok')",
            str(d),
            os.path.dirname(__file__),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert code.returncode == 0 and "ok" in code.stdout, code.stderr
    assert f.outputs
