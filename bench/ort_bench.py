"""One side of bench/ort_bench.sh, in a process of its own: prints the mean microseconds of a request.

  ort_bench.py SIDE REQUESTS

SIDE is `ort` (ONNX Runtime's InferenceSession.run(None, {"data": x}) on the MLP exported to ONNX:
Flatten, Gemm+Relu, Gemm+Relu, Gemm, Softmax; one intra-op and one inter-op thread, the CPU
provider, its default graph optimisations; `ort-all`: its default threads, every core), or
`tvmrt-FORM[-THREADS]` on the bundled MLP (tests/fixtures/mlp_b1), FORM one of the ways a user
calls it: `kw` (run(data=x)), `pos` (run(x)), `dict` (run({"data": x})), `ortform` (run(None,
{"data": x})), `into` (run_into(outs, data=x), outputs preallocated); THREADS `1` for one kernel
thread, else the package's default (every core).
The requests run after 300 of warm-up, in one timed loop.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))


def ort_request(x: np.ndarray, one_thread: bool):
    import onnxruntime as ort
    from python_bench import onnx_mlp

    so = ort.SessionOptions()
    if one_thread:
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory(prefix="tvmrt-bench-") as tmp:
        path = onnx_mlp(REPO / "tests/fixtures/mlp_unbound_b1", Path(tmp) / "mlp.onnx")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"data": x})


def tvmrt_request(form: str, threads: int | None, x: np.ndarray):
    import tvmrt

    m = tvmrt.Model(REPO / "tests/fixtures/mlp_b1", num_threads=threads)
    outs = [t.empty() for t in m.outputs]
    forms = {
        "kw": lambda: m.run(data=x),
        "pos": lambda: m.run(x),
        "dict": lambda: m.run({"data": x}),
        "ortform": lambda: m.run(None, {"data": x}),
        "into": lambda: m.run_into(outs, data=x),
    }
    return forms[form]


def main() -> None:
    side, count = sys.argv[1], int(sys.argv[2])
    x = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    if side.startswith("ort"):
        request = ort_request(x, side == "ort")
    else:
        _, form, *rest = side.split("-")
        request = tvmrt_request(form, int(rest[0]) if rest else None, x)
    for _ in range(300):
        request()
    start = time.perf_counter()
    for _ in range(count):
        request()
    print(f"{(time.perf_counter() - start) / count * 1e6:.3f}")


if __name__ == "__main__":
    main()
