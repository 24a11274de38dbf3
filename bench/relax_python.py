"""One request from Python with numpy in and out, on a Relax model: TVM 0.27's own Python
(`relax.VirtualMachine`, the function fetched once, `tvm.runtime.tensor` in, `.numpy()` out)
against `tvmrt.Model.run`, in a process per side (bench/relax_python.sh alternates them).
Usage: relax_python.py SIDE MODEL N    SIDE: upstream | tvmrt | tvmrt-ctypes
Prints microseconds per request, the best of 5 runs of N requests."""

import sys
import time

import numpy as np


def upstream(model: str):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(model), tvm.cpu())
    main = vm["main"]
    to_tensor = getattr(tvm.runtime, "tensor", None) or tvm.nd.array
    return lambda x: main(to_tensor(x)).numpy()


def ours(model: str):
    import tvmrt

    m = tvmrt.Model(model)
    return lambda x: m.run(x)[0]


def main() -> None:
    side, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    request = upstream(model) if side == "upstream" else ours(model)
    x = np.arange(4, dtype="float32")
    want = x + 1
    got = request(x)
    if not np.array_equal(got, want):
        raise SystemExit(f"{side}: wrong answer {got}")
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            request(x)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    print(f"{best:.2f}")


if __name__ == "__main__":
    main()
