"""ctypes against a compiled module over CPython's stable ABI, for the one call a Python request
makes into the library (bench/ffi_floor.sh runs it): the package's prepared ctypes call and
bench/ffi_floor.c's, each over the same argument arrays, on a call that does nothing (the
executor's get_num_outputs: the mechanism alone) and on the request's own call (tvmrt.run_into on
the model: inputs set, run, outputs copied out); a whole ``Model.run`` request for scale. Prints
microseconds per call, the least of the rounds (noise only adds).

    python bench/ffi_floor.py MODEL_DIR EXTENSION_DIR [ROUNDS]
"""

from __future__ import annotations

import ctypes
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, sys.argv[2])
import ffi_floor  # type: ignore[import-not-found]

import tvmrt
from tvmrt import _ffi, _tensors


def best(f: Callable[[], object], rounds: int, n: int) -> float:
    least = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            f()
        least = min(least, (time.perf_counter() - start) / n)
    return least * 1e6


def compiled(call: _ffi.PreparedCall) -> int:
    address = ctypes.addressof
    slot: int = ffi_floor.prepare(
        ctypes.cast(_ffi.lib().cdll.TVMFuncCall, ctypes.c_void_p).value,
        call._fn.handle.value,
        address(call.values),
        address(call._codes),
        len(call._codes),
        address(call.ret),
        address(call.ret_code),
    )
    return slot


def main() -> None:
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    model = tvmrt.Model(sys.argv[1], num_threads=1)
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(i.dtype) for i in model.inputs}
    model.run(**feeds)  # prepares the thread's executor and its one-call request
    ex = model._thread_session()._executor
    assert ex is not None
    nothing = _ffi.PreparedCall(ex.function("get_num_outputs"), [])
    request = next(iter(ex._fused.values()))
    want = model.run(**feeds)  # before the tensors below are pointed at arrays (a run clears them)
    arrays = [np.ascontiguousarray(feeds[i.name]) for i in model.inputs]
    outs = [np.empty(s.shape, s.dtype) for s in ex.outputs]
    for slot, arr in zip([ex.inputs[i] for i in model._data_input_indices], arrays):
        slot.tensor.data = _tensors.address(arr)
    for slot, out in zip(ex.outputs, outs):
        slot.tensor.data = _tensors.address(out)
    k_nothing, k_request = compiled(nothing), compiled(request)
    invoke = ffi_floor.invoke
    assert invoke(k_request) == 0 and invoke(k_nothing) == 0
    assert all(np.array_equal(a, b) for a, b in zip(outs, want)), "the compiled call's outputs differ"
    rows = [
        ("get_num_outputs, ctypes", best(nothing, rounds, 200_000)),
        ("get_num_outputs, stable ABI", best(lambda: invoke(k_nothing), rounds, 200_000)),
        ("tvmrt.run_into (the request's call), ctypes", best(request, rounds, 20_000)),
        ("tvmrt.run_into, stable ABI", best(lambda: invoke(k_request), rounds, 20_000)),
    ]
    # Last: a run clears the tensors' pointers the calls above use.
    rows.append(("Model.run (the whole request)", best(lambda: model.run(**feeds), rounds, 20_000)))
    for name, us in rows:
        print(f"{name}\t{us:.3f}")


if __name__ == "__main__":
    main()
