"""The input rules one function at a time (`tvmrt._tensors`), with the messages they give: what
mutation testing of the package found the end-to-end tests did not pin down (a bound one off, a
message that lost the input's name, a literal path taken for a producer's array)."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest
from conftest import load

import tvmrt
from tvmrt import _fork, _tensors, errors

F32 = np.dtype("float32")
I8 = np.dtype("int8")
BOOL = np.dtype("bool")


def as_input(value, want, cast=False):
    return _tensors.as_input(value, want, "x", cast)


# Python literals: numbers and lists become the input's dtype when every value survives.
def test_literals_for_a_bool_input():
    got = as_input([0, 1, 1], BOOL)
    assert got.dtype == BOOL and got.tolist() == [False, True, True]
    assert as_input([0.0, 1.0], BOOL).tolist() == [False, True]
    assert as_input(True, BOOL).tolist() is True
    for bad in ([2], [0, -1], [0.5]):
        with pytest.raises(errors.InvalidValueError, match=r"input 'x' is bool: values other than 0 and 1 given"):
            as_input(bad, BOOL)


def test_literals_for_an_integer_input_keep_every_value_or_are_refused():
    got = as_input([1.0, 2.0], I8)
    assert got.dtype == I8 and got.tolist() == [1, 2]
    assert as_input([127, -128], I8).tolist() == [127, -128]  # the bounds themselves
    for bad in ([1.5], [float("inf")], [float("nan")]):
        with pytest.raises(errors.InvalidTypeError, match=r"input 'x' is int8: non-integer values given"):
            as_input(bad, I8)
    for bad in ([128], [-129], [0, 1000]):
        with pytest.raises(errors.InvalidValueError, match=r"input 'x' is int8: values outside \[-128, 127\] given"):
            as_input(bad, I8)
    assert as_input([255], np.dtype("uint8")).tolist() == [255]


def test_literals_for_a_float_input_round_to_it():
    got = as_input([1, 2], F32)
    assert got.dtype == F32 and got.tolist() == [1.0, 2.0]
    assert as_input(0.1, np.dtype("float16")) == np.float16(0.1)


def test_literals_that_are_not_numbers_are_refused():
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x' takes int8 numbers, got <U1 values"):
        as_input(["a"], I8)
    with pytest.raises(errors.InvalidValueError, match=r"input 'x': not an array of numbers"):
        as_input([[1, 2], [3]], F32)


# Arrays: the input's dtype as it is; another dtype refused unless the caller casts.
def test_another_dtype_is_refused_with_the_way_to_cast():
    with pytest.raises(errors.InvalidTypeError, match=r"^input 'x' is float32, got int64: .* or pass cast=True$"):
        as_input(np.arange(3), F32)
    with pytest.raises(errors.InvalidTypeError, match=r"got int64"):
        _tensors.as_input(np.arange(3), F32, "x")  # no cast unless asked (Serve's requests)
    with pytest.raises(errors.InvalidTypeError) as e:
        as_input(np.arange(3, dtype=np.int64), F32, cast="safe")  # int64 to float32 loses values
    assert str(e.value).endswith("got int64: convert it (x.astype('float32'))")
    assert as_input(np.arange(3, dtype=np.int8), F32, cast="safe").dtype == F32
    assert as_input(np.arange(3, dtype=np.int64), F32, cast=True).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(errors.InvalidValueError, match=r"cast='yes': use False, 'safe' or True"):
        as_input(np.arange(3), F32, cast="yes")
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x' is float32, got an array of object"):
        as_input(np.array(["a"], dtype=object), F32, cast=True)


def test_a_masked_array_is_refused():
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x': a masked array"):
        as_input(np.ma.masked_array([1.0], mask=[True]), np.dtype("float64"))


class Producer:
    """A DLPack producer over a numpy array, on `device` (None: no __dlpack_device__ at all)."""

    def __init__(self, array, device=None):
        self.array = array
        if device is not None:
            self.__dlpack_device__ = lambda: device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


class Unreadable(Producer):
    def __dlpack__(self, **kwargs):
        raise BufferError("no")


def test_dlpack_producers_on_the_host_are_read_and_others_refused():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    for device in (None, (1, 0), (3, 0)):  # none said (the host), the CPU, CUDA's pinned host memory
        got = as_input(Producer(a, device), np.dtype("float64"))
        assert got.tolist() == a.tolist(), device
    # A producer's array has a dtype of its own: not a literal, so not silently converted.
    with pytest.raises(errors.InvalidTypeError, match=r"is float32, got float64"):
        as_input(Producer(a), F32)
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x': an array on DLPack device \(2, 0\)"):
        as_input(Producer(a, (2, 0)), np.dtype("float64"))
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x': numpy cannot read this array through DLPack \(no\)"):
        as_input(Unreadable(a), np.dtype("float64"))


class ArrayLike:
    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array


class NotAnArray:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("no")


def test_objects_with_array_are_read_and_keep_their_dtype():
    a = np.arange(4, dtype=np.int32)
    assert as_input(ArrayLike(a), np.dtype("int32")).tolist() == [0, 1, 2, 3]
    with pytest.raises(errors.InvalidTypeError, match=r"is float32, got int32"):
        as_input(ArrayLike(a), F32)
    with pytest.raises(errors.InvalidTypeError, match=r"input 'x': a NotAnArray is not an array"):
        as_input(NotAnArray(), F32)


# The runtime's dtypes.
def test_dtypes_both_ways():
    b = _tensors.dl_dtype(BOOL)
    assert (b.code, b.bits, b.lanes) == (1, 1, 1)
    f = _tensors.dl_dtype(F32)
    assert (f.code, f.bits, f.lanes) == (2, 32, 1)
    for bad in (np.dtype("complex64"), np.dtype(np.longdouble)):
        with pytest.raises(errors.InvalidTypeError, match=f"the runtime takes no arrays of dtype {bad}"):
            _tensors.dl_dtype(bad)
    assert _tensors.np_dtype("uint1") == BOOL and _tensors.np_dtype("bool") == BOOL
    with pytest.raises(errors.InvalidTypeError, match=r"no numpy dtype for float7"):
        _tensors.np_dtype("float7")


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch):
    monkeypatch.setattr(_tensors, "_bfloat16", lambda: None)
    with pytest.raises(errors.InvalidTypeError, match=r"^a bfloat16 tensor needs the ml_dtypes package"):
        _tensors.np_dtype("bfloat16")


def test_bfloat16_arrays_are_numbers_to_cast():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    assert as_input(x, F32, cast=True).tolist() == [1.5, -2.0]
    assert as_input(np.array([1.5], dtype=F32), np.dtype(ml_dtypes.bfloat16), cast=True).tolist() == [1.5]


# Through a model: the name in every message, the cast passed on, views of the right shape.
def test_set_input_through_a_model():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    x = f.inputs["data"]
    with pytest.raises(errors.InvalidKeyError, match=r"inputs never set: data"):
        m.session().run()
    with pytest.raises(errors.InvalidTypeError, match=r"input 'data' is float32, got float64"):
        m.set_input("data", x.astype("float64"))
    with pytest.raises(errors.InvalidTypeError, match=r"input 'data' is float32, got float64"):
        m.benchmark(repeat=1, number=1, data=x.astype("float64"))
    m.set_input("data", x.astype("float64"), cast=True)
    m.run()
    assert m.get_output(0).numpy().tobytes() == f.outputs[0].tobytes()
    [v] = m.run(data=x, copy=False)
    assert v.shape == f.outputs[0].shape and v.tobytes() == f.outputs[0].tobytes()


def test_every_input_never_set_is_named():
    f = load("multi_io")
    m = tvmrt.Model(f.dir)
    s = m.session()
    with pytest.raises(errors.InvalidKeyError, match=r"^inputs never set: x, y, z$"):
        s.run()
    with pytest.raises(errors.InvalidKeyError, match=r"^inputs never set: y, z$"):
        s.run(x=f.inputs["x"])


def test_a_view_keeps_its_executor_and_a_tensor_view_its_array():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    s = m.session()
    executor = weakref.ref(s._executor)
    [v] = s.run(f.inputs, copy=False)
    s.close()
    del s, m
    gc.collect()
    assert executor() is not None, "the executor whose outputs a view shows was freed"
    assert v.tobytes() == f.outputs[0].tobytes()
    a = np.arange(4, dtype=np.float32)
    kept = weakref.ref(a)
    t = _tensors.TensorView(a)
    del a
    gc.collect()
    assert kept() is not None and t.tensor.data == _tensors.address(kept())


# fork(): a model's lock another thread holds at the fork is free in the child.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_lock_held_at_the_fork_is_free_in_the_child():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    held, release = threading.Event(), threading.Event()

    def hold():
        with m._lock:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = m._lock.acquire(timeout=10)
            again = tvmrt.Model(f.dir)  # registers with the package's list of locks
            code = 0 if ok and again.run(f.inputs)[0].tobytes() == f.outputs[0].tobytes() else 3
        finally:
            os._exit(code)
    release.set()
    t.join()
    deadline = time.time() + 60
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child hung")
    assert os.waitstatus_to_exitcode(status) == 0
    assert _fork._HOLDERS_LOCK.acquire(timeout=1)
    _fork._HOLDERS_LOCK.release()
