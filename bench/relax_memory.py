"""What a Relax model's constants cost in memory: upstream TVM 0.27's runtime against this one, on
a model with 64 MB of bound constants (made on demand with TVM 0.27's compiler, never committed).

Each side runs in a child process of its own, sides alternated, 3 rounds:
  upstream    TVM 0.27's Python on its own libtvm_runtime.so (runtime only)
  drop-in     the same Python on this libtvm_runtime.so, beside upstream's libtvm_ffi.so
  tvmrt       this project's package (tvmrt.Model), no TVM in the process
  mapped      the package with map_constants=True (the constants in one file every process maps)
and each reports what its process grew by (VmRSS, and private memory from smaps_rollup): loading
the model and running it once, then loading the same file a second time and running that. The
measured process runs while another of the same side holds the model (as the first replica of a
node would): private memory is what each further process costs the node.

    bench/relax_memory.sh          (sets the interpreters up; see there)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CONST_MB = 64


def memory() -> tuple[float, float]:
    """(VmRSS, private) of this process in MB."""
    rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
    private = 0
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            private += int(line.split()[1])
    return rss / 1024, private / 1024


def child(side: str, model: str, hold: bool = False) -> None:
    import numpy as np

    x = np.ones((4, 1024), "float32")
    if side in ("tvmrt", "mapped"):
        import tvmrt

        mapped = side == "mapped"
        base = memory()
        first = tvmrt.Model(model, map_constants=mapped)
        first.run(x)
        one = memory()
        second = tvmrt.Model(model, map_constants=mapped)
        second.run(x)
        two = memory()
    else:
        import tvm
        from tvm.runtime import vm as relax_vm

        base = memory()
        first = relax_vm.VirtualMachine(tvm.runtime.load_module(model), tvm.cpu())
        first["main"](tvm.runtime.tensor(x))
        one = memory()
        second = relax_vm.VirtualMachine(tvm.runtime.load_module(model), tvm.cpu())
        second["main"](tvm.runtime.tensor(x))
        two = memory()
    print(json.dumps({"load": [one[0] - base[0], one[1] - base[1]], "second": [two[0] - one[0], two[1] - one[1]]}))
    sys.stdout.flush()
    if hold:
        sys.stdin.read()  # held until the measured process is done


def make(model: Path) -> None:
    """The model: y = sum(x @ W, axis=1), W a bound 1024 x 16384 float32 constant (64 MB)."""
    import numpy as np
    import tvm
    from tvm import relax

    tir = getattr(tvm, "tirx", None) or tvm.tir
    n = tir.Var("n", "int64")
    tensor = getattr(relax, "TensorStructInfo", None) or relax.TensorType
    x = relax.Var("x", tensor((n, 1024), "float32"))
    w = np.random.RandomState(3).uniform(-1, 1, (1024, 16384)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.sum(relax.op.matmul(x, relax.const(w)), axis=1))
        bb.emit_func_output(y)
    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"})
    model.parent.mkdir(parents=True, exist_ok=True)
    tvm.compile(bb.get(), target).export_library(str(model))


def sides(tvm_python: str, tvmrt_python: str, ours: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each side's interpreter and environment: TVM 0.27's Python on its own runtime and on this
    one (the folder `ours`), and the package on this one."""
    return {
        "upstream": ([tvm_python], {"TVM_USE_RUNTIME_LIB": "1"}),
        "drop-in": ([tvm_python], {"TVM_USE_RUNTIME_LIB": "1", "TVM_LIBRARY_PATH": ours}),
        "tvmrt": ([tvmrt_python], {"TVMRT_LIBRARY": os.path.join(ours, "libtvm_runtime.so")}),
    }


def main() -> None:
    tvm_python, tvmrt_python, ours, model = sys.argv[1:5]
    sides_ = sides(tvm_python, tvmrt_python, ours)
    sides_["mapped"] = sides_["tvmrt"]
    results: dict[str, list[dict[str, list[float]]]] = {s: [] for s in sides_}
    for _ in range(3):
        for side, (python, env) in sides_.items():
            e = {k: v for k, v in os.environ.items() if k not in ("TVM_LIBRARY_PATH", "TVM_USE_RUNTIME_LIB")}
            e.update(env)
            # Another process of this side holds the model while this one is measured.
            holder = subprocess.Popen(
                [*python, __file__, "hold", side, model],
                env=e,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None and holder.stdin is not None
            holder.stdout.readline()
            out = subprocess.run(
                [*python, __file__, "child", side, model], env=e, check=True, capture_output=True, text=True
            )
            holder.stdin.close()
            holder.wait()
            results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"A Relax model with {CONST_MB} MB of bound constants (TVM 0.27); MB a process grew by, median of 3")
    head = f"{'':10} {'load+run RSS':>13} {'private':>8} {'x const':>8} {'2nd load RSS':>13} {'private':>8}"
    print(head + "   spread (RSS)")
    for side, runs in results.items():
        load = [r["load"][0] for r in runs]
        second = [r["second"][0] for r in runs]
        lp = statistics.median(r["load"][1] for r in runs)
        sp = statistics.median(r["second"][1] for r in runs)
        lm, sm = statistics.median(load), statistics.median(second)
        print(
            f"{side:10} {lm:13.1f} {lp:8.1f} {lm / CONST_MB:8.2f} {sm:13.1f} {sp:8.1f}   "
            f"{min(load):.1f}-{max(load):.1f}, {min(second):.1f}-{max(second):.1f}"
        )


if __name__ == "__main__":
    if sys.argv[1] in ("child", "hold"):
        child(sys.argv[2], sys.argv[3], hold=sys.argv[1] == "hold")
    elif sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    else:
        main()
