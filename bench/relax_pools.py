"""What a burst of large requests leaves behind in memory: upstream TVM 0.27's pooled allocator,
which keeps every block it ever allocated (apache/tvm#16066), against this runtime's pools, which
give back blocks no recent call used. The model (made on demand with TVM 0.27's compiler):
y = sum(relu(x + 1), axis=1), x of shape (n, 16384) float32: a request of batch 256 has 16 MB
intermediates, and costs little to compute.

Each side in a child process of its own, sides alternated, 3 rounds:
  upstream    TVM 0.27's Python on its own libtvm_runtime.so
  drop-in     the same Python on this libtvm_runtime.so, beside upstream's libtvm_ffi.so
  tvmrt       this project's package (tvmrt.Model)
Each loads the model and runs one batch-4 request (RSS: "loaded"), then 4 threads each run 5
requests of batch 256 at once (each thread its own VM, as a server's workers; RSS: "burst"),
then one thread runs 10 requests of batch 4 (RSS: "after").

    bench/relax_pools.sh          (sets the interpreters up; see there)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

from relax_memory import memory, sides

BURST_THREADS, BURST_CALLS, BURST_BATCH, QUIET_CALLS, WIDTH = 4, 5, 256, 10, 16384


def child(side: str, model: str) -> None:
    import numpy as np

    small = np.ones((4, WIDTH), "float32")
    big = np.ones((BURST_BATCH, WIDTH), "float32")
    if side == "tvmrt":
        import tvmrt

        m = tvmrt.Model(model)

        def runner():
            return lambda x: m.run(x)[0]
    else:
        import tvm
        from tvm.runtime import vm as relax_vm

        exe = tvm.runtime.load_module(model)

        def runner():
            main = relax_vm.VirtualMachine(exe, tvm.cpu())["main"]
            return lambda x: main(tvm.runtime.tensor(x)).numpy()

    run = runner()
    want = run(small)
    loaded = memory()[0]
    start = threading.Barrier(BURST_THREADS)

    def burst() -> None:
        r = runner()
        start.wait()
        for _ in range(BURST_CALLS):
            r(big)

    threads = [threading.Thread(target=burst) for _ in range(BURST_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after_burst = memory()[0]
    for _ in range(QUIET_CALLS):
        got = run(small)
    assert np.array_equal(got, want)
    after = memory()[0]
    print(json.dumps({"loaded": loaded, "burst": after_burst - loaded, "after": after - loaded}))


def make(model: Path) -> None:
    import tvm
    from tvm import relax

    tir = getattr(tvm, "tirx", None) or tvm.tir
    n = tir.Var("n", "int64")
    tensor = getattr(relax, "TensorStructInfo", None) or relax.TensorType
    x = relax.Var("x", tensor((n, WIDTH), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            one = relax.const(1.0, "float32")
            y = bb.emit_output(relax.op.sum(relax.op.nn.relu(relax.op.add(x, one)), axis=1))
        bb.emit_func_output(y)
    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"})
    model.parent.mkdir(parents=True, exist_ok=True)
    tvm.compile(bb.get(), target).export_library(str(model))


def main() -> None:
    tvm_python, tvmrt_python, ours, model = sys.argv[1:5]
    sides_ = sides(tvm_python, tvmrt_python, ours)
    results: dict[str, list[dict[str, float]]] = {s: [] for s in sides_}
    for _ in range(3):
        for side, (python, env) in sides_.items():
            e = {k: v for k, v in os.environ.items() if k not in ("TVM_LIBRARY_PATH", "TVM_USE_RUNTIME_LIB")}
            e.update(env)
            out = subprocess.run(
                [*python, __file__, "child", side, model], env=e, check=True, capture_output=True, text=True
            )
            results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"A burst ({BURST_THREADS} threads x {BURST_CALLS} requests of batch {BURST_BATCH}, 16 MB intermediates), "
        f"then {QUIET_CALLS} requests of batch 4: MB of RSS above the loaded model, median of 3 (min-max)"
    )
    print(f"{'':10} {'after the burst':>22} {'after 10 small requests':>26}")
    for side, runs in results.items():
        cells = []
        for key in ("burst", "after"):
            v = [r[key] for r in runs]
            cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})")
        print(f"{side:10} {cells[0]:>22} {cells[1]:>26}")


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    else:
        main()
