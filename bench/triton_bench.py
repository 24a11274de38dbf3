"""Triton: one ResNet-18 artefact served by the tvm backend against the usual way, Triton's Python
backend running TVM's GraphModule on upstream's runtime (v0.16), each with 4 instances; then the
tvm backend with dynamic batching over b1 and b8 builds against its b1 build alone (ResNet-18, and
the test fixtures' MLP, whose runs cost less than a request's way through the server).

Load from perf_analyzer (HTTP and gRPC, C concurrent clients); the server's memory is the PSS of
the server process and its children (the Python backend runs a stub process per instance). Sides
alternate round by round; medians and spreads (min-max) are printed.

usage: triton_bench.py MODELS UPSTREAM_LIB_DIR TVM_WHEEL_DIR STUB_SITE ROUNDS SECONDS
(bench/triton_bench.sh sets everything up)
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

INSTANCES = 4
CONCURRENCY = 8
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"

PYTHON_MODEL = """
import json
import os
import sys

# The stub process does not inherit the server's environment: TVM's place, and how it loads
# upstream's runtime, come from a file beside this one.
with open(os.path.join(os.path.dirname(__file__), "env.json")) as f:
    settings = json.load(f)
sys.path[:0] = settings.pop("sys_path")
os.environ.update(settings)

import triton_python_backend_utils as pb_utils  # noqa: E402
import tvm  # noqa: E402
from tvm.contrib import graph_executor  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        d = os.path.join(args["model_repository"], args["model_version"])
        lib = tvm.runtime.load_module(os.path.join(d, "lib.so"))
        with open(os.path.join(d, "graph.json")) as f:
            self.m = graph_executor.create(f.read(), lib, tvm.cpu())
        with open(os.path.join(d, "params.bin"), "rb") as f:
            self.m.load_params(f.read())

    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "data").as_numpy()
            self.m.set_input("data", x)
            self.m.run()
            y = self.m.get_output(0).numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("output_0", y)]))
        return responses
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def artefact(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for f in ("lib.so", "graph.json", "params.bin"):
        shutil.copy(src / f, dst / f)


def repository(root: Path, side: str, models: Path, python_env: dict[str, object]) -> None:
    m = root / "resnet"
    groups = f"instance_group [{{count: {INSTANCES}, kind: KIND_CPU}}]\n"
    io = (
        'input [{name: "data", data_type: TYPE_FP32, dims: [1, 3, 224, 224]}]\n'
        'output [{name: "output_0", data_type: TYPE_FP32, dims: [1, 1000]}]\n'
    )
    if side == "tvm":
        artefact(models / "resnet18_unbound", m / "1")
        (m / "config.pbtxt").write_text('backend: "tvm"\n' + groups)
    elif side == "python":
        artefact(models / "resnet18_unbound", m / "1")
        (m / "1" / "model.py").write_text(PYTHON_MODEL)
        (m / "1" / "env.json").write_text(json.dumps(python_env))
        (m / "config.pbtxt").write_text('backend: "python"\n' + groups + io)
    elif side.endswith(" b1"):
        net = models / "resnet18_unbound" if side.startswith("tvm") else FIXTURES / "mlp_b1"
        artefact(net, m / "1" / "b1")
        (m / "config.pbtxt").write_text('backend: "tvm"\nmax_batch_size: 8\n' + groups)
    elif side.endswith(" b1+b8"):
        resnet = side.startswith("tvm")
        artefact(models / "resnet18_unbound" if resnet else FIXTURES / "mlp_b1", m / "1" / "b1")
        artefact(models / "resnet18_unbound_b8" if resnet else FIXTURES / "mlp_b8", m / "1" / "b8")
        batching = "dynamic_batching { max_queue_delay_microseconds: 5000 }\n"
        (m / "config.pbtxt").write_text('backend: "tvm"\n' + groups + batching)


def pss_kb(pid: int) -> int:
    """PSS of `pid` and its descendants."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


class Server:
    def __init__(
        self, side: str, env: dict[str, str], models: Path, backends: Path, python_env: dict[str, object]
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="triton-bench-"))
        repository(self.dir / "models", side, models, python_env)
        self.http, self.grpc, self.metrics = free_port(), free_port(), free_port()
        self.log = open(self.dir / "log", "w")
        self.proc = subprocess.Popen(
            [
                env["TRITONSERVER"],
                f"--model-repository={self.dir / 'models'}",
                f"--backend-directory={backends}",
                "--http-address=127.0.0.1",
                f"--http-port={self.http}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={self.grpc}",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={self.metrics}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/resnet/ready") as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        text = "\n".join(
            line for line in (self.dir / "log").read_text().splitlines() if " E" in line[:2] or "rror" in line
        )
        self.stop()
        raise RuntimeError(f"{side}: the server did not get ready:\n{text}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def load(perf: str, env: dict[str, str], port: int, protocol: str, seconds: float, batch: int = 1) -> dict[str, float]:
    out = Path(tempfile.mkstemp(suffix=".csv")[1])
    cmd = [
        perf,
        "-m",
        "resnet",
        "-u",
        f"127.0.0.1:{port}",
        "-i",
        protocol,
        "-b",
        str(batch),
        "--concurrency-range",
        str(CONCURRENCY),
        "--measurement-mode",
        "time_windows",
        "-p",
        str(int(seconds * 1000)),
        "--stability-percentage",
        "100",
        "--max-trials",
        "3",
        "-f",
        str(out),
    ]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(out) as f:
        row = next(csv.DictReader(f))
    out.unlink()
    return {
        "rps": float(row["Inferences/Second"]),
        "p50": float(row["p50 latency"]) / 1e3,
        "p99": float(row["p99 latency"]) / 1e3,
    }


def show(name: str, xs: list[float], unit: str, fmt: str = "{:.1f}") -> str:
    med = statistics.median(xs)
    return f"{name} {fmt.format(med)} {unit} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> None:
    models, upstream, wheel, stub_site = (Path(a) for a in sys.argv[1:5])
    rounds, seconds = int(sys.argv[5]), float(sys.argv[6])
    base = dict(os.environ)
    perf = base["PERF_ANALYZER"]
    backends = Path(tempfile.mkdtemp(prefix="triton-backends-"))
    (backends / "tvm").mkdir()
    shutil.copy(base["TRITON_TVM_BACKEND"], backends / "tvm" / "libtriton_tvm.so")
    shutil.copytree(base["TRITON_PYTHON_BACKEND"], backends / "python")
    shutil.copy(Path(base["TRITON_PYTHON_STUBS"]) / "3.11" / "triton_python_backend_stub", backends / "python")
    libs = base["TRITON_LIBS"]
    env = dict(base, LD_LIBRARY_PATH=f"{base.get('PERF_LIBS', '')}:{libs}", TVM_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # The Python backend's stubs: TVM's Python (the 0.16 wheel) on upstream's own library.
    python_env: dict[str, object] = {
        "sys_path": [str(stub_site), str(wheel)],
        "TVM_FFI": "ctypes",
        "TVM_USE_RUNTIME_LIB": "1",
        "TVM_LIBRARY_PATH": str(upstream),
        "TVM_NUM_THREADS": "1",
    }
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    memory: dict[str, list[int]] = {}
    sides = ["tvm", "python"]
    batching = ["tvm b1", "tvm b1+b8", "mlp b1", "mlp b1+b8"]
    only = [x for x in os.environ.get("TRITON_BENCH_SIDES", "").split(",") if x]
    for r in range(rounds):
        for group in (sides, batching):
            order = group if r % 2 == 0 else group[::-1]
            for side in (s for s in order if not only or s in only):
                s = Server(side, env, models, backends, python_env)
                try:
                    protocols = ["http", "grpc"] if group is sides else ["grpc"]
                    for protocol in protocols:
                        port = s.http if protocol == "http" else s.grpc
                        load(perf, env, port, protocol, min(2.0, seconds))  # warm-up
                        results.setdefault((side, protocol), []).append(load(perf, env, port, protocol, seconds))
                    memory.setdefault(side, []).append(pss_kb(s.proc.pid))
                finally:
                    s.stop()
                print(f"round {r + 1}: {side} done", file=sys.stderr, flush=True)
    print(
        f"ResNet-18, {INSTANCES} instances, {CONCURRENCY} concurrent clients (perf_analyzer), "
        f"{rounds} rounds of {seconds:.0f} s"
    )
    for side in (s for s in sides + batching if s in memory):
        print(f"{side:>10}: {show('server PSS', [m / 1024 for m in memory[side]], 'MB')}")
        for (s, protocol), rs in sorted(results.items()):
            if s == side:
                print(
                    f"{'':>12}{protocol:<5} {show('', [x['rps'] for x in rs], 'req/s')}, "
                    f"{show('p50', [x['p50'] for x in rs], 'ms')}, {show('p99', [x['p99'] for x in rs], 'ms')}"
                )

    def ratio(a: str, b: str, key: str, protocol: str) -> str:
        xs = [x[key] / y[key] for x, y in zip(results[(a, protocol)], results[(b, protocol)])]
        return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"

    if only:
        return
    mem = [a / b for a, b in zip(memory["tvm"], memory["python"])]
    print(f"tvm / python: memory {statistics.median(mem):.2f}x ({min(mem):.2f}-{max(mem):.2f})")
    for protocol in ("http", "grpc"):
        print(
            f"tvm / python over {protocol}: throughput {ratio('tvm', 'python', 'rps', protocol)}, "
            f"p99 {ratio('tvm', 'python', 'p99', protocol)}"
        )
    for net in ("tvm", "mlp"):
        print(
            f"{'ResNet-18' if net == 'tvm' else 'MLP'}: b1+b8 batching / b1 alone (grpc): throughput "
            f"{ratio(f'{net} b1+b8', f'{net} b1', 'rps', 'grpc')}, "
            f"p99 {ratio(f'{net} b1+b8', f'{net} b1', 'p99', 'grpc')}"
        )


if __name__ == "__main__":
    main()
