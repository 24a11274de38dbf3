"""One side of bench/python_bench.sh, in a process of its own: prints one line of figures.

  overhead SIDE MODEL          a request (set the input, run, copy the output out) in us, and the
                               model's own run time in us (SIDE: tvm = TVM's GraphModule, tvmrt =
                               Model.run, tvmrt-gm = Model's GraphModule calls, ort = ONNX Runtime)
  threads MODEL T SECONDS      runs per second of one tvmrt.Model called from T threads
  memory SIDE MODEL T          the process's memory (MB: VmRSS after, and its growth from loading
                               the model and serving T threads) for tvmrt (one Model) or tvm
                               (T GraphModules, one per thread, as TVM's Python serves threads)
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def input_of(model_dir: Path) -> tuple[str, np.ndarray]:
    manifest = model_dir / "manifest.txt"
    if manifest.exists():
        for line in manifest.read_text().splitlines():
            w = line.split()
            if w[0] == "input":
                nd = int(w[3])
                shape = tuple(int(x) for x in w[4 : 4 + nd])
                return w[1], np.fromfile(model_dir / w[4 + nd], dtype=w[2]).reshape(shape)
    return "data", np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")


def tvm_module(model_dir: Path):
    import tvm
    from tvm.contrib import graph_executor

    lib = tvm.runtime.load_module(str(model_dir / "lib.so"))
    return tvm, graph_executor.GraphModule(lib["default"](tvm.cpu())), lib


def onnx_mlp(model_dir: Path, out: Path) -> Path:
    """The MLP of `model_dir` (relay.testing.mlp, unbound weights) as an ONNX model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    blob = (model_dir / "params.bin").read_bytes()
    params = read_params(blob)
    nodes = [helper.make_node("Flatten", ["data"], ["x0"])]
    x = "x0"
    for i in (1, 2, 3):
        y = f"fc{i}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}_weight", f"fc{i}_bias"], [y], transB=1))
        if i < 3:
            nodes.append(helper.make_node("Relu", [y], [f"r{i}"]))
            x = f"r{i}"
    nodes.append(helper.make_node("Softmax", ["fc3"], ["out"], axis=1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), out)
    return out


def read_params(blob: bytes) -> dict[str, np.ndarray]:
    """TVM's params format, read here so the ONNX side needs no TVM."""
    import struct

    _, _, n = struct.unpack_from("<QQQ", blob, 0)
    at, names = 24, []
    for _ in range(n):
        (k,) = struct.unpack_from("<Q", blob, at)
        names.append(blob[at + 8 : at + 8 + k].decode())
        at += 8 + k
    at += 8
    out = {}
    for name in names:
        at += 16 + 8  # magic, reserved, device
        (ndim,) = struct.unpack_from("<i", blob, at)
        code, bits, _lanes = struct.unpack_from("<BBH", blob, at + 4)
        shape = struct.unpack_from(f"<{ndim}q", blob, at + 8)
        at += 8 + 8 * ndim
        (nbytes,) = struct.unpack_from("<q", blob, at)
        dtype = {(2, 32): "float32", (2, 16): "float16", (0, 32): "int32", (0, 64): "int64"}[(code, bits)]
        out[name] = np.frombuffer(blob, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=at + 8).reshape(
            shape
        )
        at += 8 + nbytes
    return out


def time_requests(req, seconds: float = 2.0) -> float:
    for _ in range(200):
        req()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            req()
        n += 100
    return (time.perf_counter() - start) / n * 1e6


def overhead(side: str, model_dir: Path) -> None:
    name, x = input_of(model_dir)
    if side == "tvm":
        tvm, m, _ = tvm_module(model_dir)

        def req():
            m.set_input(name, x)
            m.run()
            return m.get_output(0).numpy()

        model_us = min(m.module.time_evaluator("run", tvm.cpu(), number=200, repeat=5)().results) * 1e6
    elif side == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        with tempfile.TemporaryDirectory(prefix="tvmrt-bench-") as tmp:
            path = onnx_mlp(model_dir, Path(tmp) / "mlp.onnx")
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

        def req():
            return sess.run(None, {"data": x})[0]

        model_us = float("nan")
    else:
        import tvmrt

        m = tvmrt.Model(model_dir)
        if side == "tvmrt-gm":

            def req():
                m.set_input(name, x)
                m.run()
                return m.get_output(0).numpy()

        else:

            def req():
                return m.run({name: x})[0]

        m.run({name: x})
        model_us = m.benchmark(repeat=5, number=200).min * 1e6
    print(f"{time_requests(req):.2f} {model_us:.2f}")


def threads(model_dir: Path, n: int, seconds: float) -> None:
    import tvmrt

    name, x = input_of(model_dir)
    m = tvmrt.Model(model_dir, concurrency=n)
    m.run({name: x})
    done = [0] * n
    stop = time.perf_counter() + seconds
    start_line = threading.Barrier(n + 1)

    def body(i):
        start_line.wait()
        while time.perf_counter() < stop:
            m.run({name: x})
            done[i] += 1

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    start_line.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    print(f"{sum(done) / (time.perf_counter() - t0):.2f}")


def memory(side: str, model_dir: Path, n: int) -> None:
    name, x = input_of(model_dir)
    runs = 5
    if side == "tvm":
        import tvm
        from tvm.contrib import graph_executor

        before = rss_mb()
        lib = tvm.runtime.load_module(str(model_dir / "lib.so"))
        mods = [graph_executor.GraphModule(lib["default"](tvm.cpu())) for _ in range(n)]

        def body(i):
            for _ in range(runs):
                mods[i].set_input(name, x)
                mods[i].run()
                mods[i].get_output(0).numpy()

    elif side == "ort":
        import onnxruntime as ort

        path = onnx_mlp(model_dir, Path("/tmp") / f"tvmrt-bench-mlp-mem-{n}.onnx")
        before = rss_mb()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

        def body(i):
            for _ in range(runs):
                sess.run(None, {"data": x})

    else:
        import tvmrt

        before = rss_mb()
        model = tvmrt.Model(model_dir, concurrency=n)

        def body(i):
            for _ in range(runs):
                model.run({name: x})

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    after = rss_mb()
    print(f"{after:.1f} {after - before:.1f}")


def main() -> None:
    what = sys.argv[1]
    if what == "overhead":
        overhead(sys.argv[2], Path(sys.argv[3]))
    elif what == "threads":
        threads(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif what == "memory":
        memory(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
