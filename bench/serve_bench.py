"""Ray Serve on this machine: ResNet-18 (the batch-1 build, unbound params) served by tvmrt.serve in
several shapes of replicas x runs in flight (one kernel thread per run): 1 x 4, 2 x 2, 4 x 1, and
the default shape (one replica filling the node), against the usual way (TVM's Python on
upstream's runtime, 4 replicas each loading its own model, one request at a time); 16 clients at
once, sides alternated round by round. Prints the node's memory (the sum of the replica processes'
PSS), requests per second and p50/p99 latency. Run by bench/serve_bench.sh (which sets up the venv
and the models).

  python serve_bench.py MODELS_DIR UPSTREAM_LIB_DIR TVM_WHEEL_DIR [ROUNDS] [SECONDS] [shapes|batching [NET]]

`batching NET` (resnet18 or wide_mlp) compares instead, in the default shape, the batch-1 build
alone with batching over the batch-1 and batch-8 builds (`max_batch_size=8`), and the usual way.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import ray
from ray import serve

REPLICAS, CLIENTS = 4, 16


@serve.deployment
class Empty:
    """A replica with nothing in it: what Ray and Python cost before any model."""

    def __call__(self, request: dict) -> int:
        return 0

    def pid(self) -> int:
        return os.getpid()


@serve.deployment
class UsualTVM:
    """A replica as people write one for TVM's Python: its own module, weights loaded from
    params.bin, set_input / run / get_output per request (locked: one GraphModule)."""

    def __init__(self, model_dir: str) -> None:
        import tvm
        from tvm.contrib import graph_executor

        lib = tvm.runtime.load_module(os.path.join(model_dir, "lib.so"))
        graph = Path(model_dir, "graph.json").read_text()
        self.m = graph_executor.create(graph, lib, tvm.cpu())
        self.m.load_params(Path(model_dir, "params.bin").read_bytes())
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> list:
        with self.lock:
            self.m.set_input("data", request["data"])
            self.m.run()
            return [self.m.get_output(0).numpy()]

    def pid(self) -> int:
        return os.getpid()


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss for {pid}")


def replica_count(name: str) -> int:
    """How many replicas a side's name says it runs (the default shape: one, on one node)."""
    for n in (4, 2):
        if f"{n} replicas" in name:
            return n
    return 1


def pids(handle, usual: bool, want: int = REPLICAS) -> set[int]:
    """The replicas' processes (asked until each has answered)."""
    found: set[int] = set()
    deadline = time.time() + 120
    while len(found) < want and time.time() < deadline:
        found.add(handle.pid.remote().result() if usual else handle.stats.remote().result()["pid"])
    return found


def load(handle, seconds: float, row: tuple[int, ...]) -> tuple[float, float, float, int]:
    x = np.random.default_rng(0).standard_normal((1, *row)).astype("float32")
    latencies: list[float] = []
    errors = [0]
    stop = time.perf_counter() + seconds
    lock = threading.Lock()

    def client() -> None:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            try:
                handle.remote({"data": x}).result()
            except Exception:  # counted: a benchmark must not hide a failure
                with lock:
                    errors[0] += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - t)

    # Warm the replicas up first (their first runs lay memory out).
    for _ in range(2 * REPLICAS):
        handle.remote({"data": x}).result()
    start = time.perf_counter()
    ts = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - start
    lat = sorted(latencies)
    return len(lat) / wall, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3, errors[0]


def main() -> None:
    models, upstream, wheel_dir = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 20.0
    mode = sys.argv[6] if len(sys.argv) > 6 else "shapes"
    net = sys.argv[7] if len(sys.argv) > 7 else "resnet18"
    # Per network: its batch-1 and batch-8 builds (unbound params, one set of weights), a row's
    # shape, its name in the table.
    b1, b8, row, title = {
        "resnet18": ("resnet18_unbound", "resnet18_unbound_b8", (3, 224, 224), "ResNet-18"),
        "wide_mlp": ("wide_mlp", "wide_mlp_b8", (2048,), "wide MLP (2048-4096-4096-1000)"),
    }[net]
    b1, b8 = str(models / b1), str(models / b8)
    prepared = tempfile.mkdtemp(prefix="tvmrt-bench-prepared-")
    env = {"TVM_NUM_THREADS": "1"}
    usual_env = dict(env, TVM_FFI="ctypes", TVM_USE_RUNTIME_LIB="1", TVM_LIBRARY_PATH=upstream, PYTHONPATH=wheel_dir)
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": 18200})
    import tvmrt.serve

    def shape(replicas: int, runs: int):
        return lambda: tvmrt.serve.deployment(
            b1,
            name="bench",
            num_replicas=replicas,
            concurrency=runs,
            num_threads=1,
            max_batch_size=1,
            prepared_dir=prepared,
            ray_actor_options={"num_cpus": 2 / replicas},
        )

    def b1_alone():
        return tvmrt.serve.deployment(b1, name="bench", max_batch_size=1, prepared_dir=prepared)

    shapes = {
        "tvmrt, 1 replica x 4 runs in flight": shape(1, 4),
        "tvmrt, 2 replicas x 2 runs": shape(2, 2),
        "tvmrt, 4 replicas x 1 run": shape(4, 1),
        "tvmrt, the default shape (1 replica x 2 runs here)": b1_alone,
    }
    batching = {
        "tvmrt, the batch-1 build alone (default shape)": b1_alone,
        "tvmrt, batching over the batch-1 and batch-8 builds (default shape)": lambda: tvmrt.serve.deployment(
            [b1, b8], name="bench", max_batch_size=8, prepared_dir=prepared
        ),
    }
    sides = dict(batching if mode == "batching" else shapes)
    sides["usual: TVM's Python, upstream's runtime, 4 replicas"] = lambda: UsualTVM.options(
        name="bench",
        num_replicas=REPLICAS,
        max_ongoing_requests=8,
        ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": usual_env}},
    ).bind(b1)
    empty = serve.run(
        Empty.options(num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.5}).bind(),
        name="bench",
        route_prefix="/bench",
    )
    floor = sum(pss_mb(p) for p in pids(empty, usual=True))
    serve.delete("bench")
    print(f"{REPLICAS} empty replicas (Ray and Python alone): {floor:.0f} MB", flush=True)
    results: dict[str, list[tuple[float, float, float, float, int]]] = {k: [] for k in sides}
    for r in range(rounds):
        for name, make in sides.items():
            handle = serve.run(make(), name="bench", route_prefix="/bench")
            usual = name.startswith("usual")
            replica_pids = pids(handle, usual, want=REPLICAS if usual else replica_count(name))
            rps, p50, p99, errors = load(handle, seconds, row)
            node_mb = sum(pss_mb(p) for p in replica_pids)
            results[name].append((node_mb, rps, p50, p99, errors))
            print(
                f"round {r + 1}: {name}: {node_mb:.0f} MB, {rps:.1f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms,"
                f" {errors} errors",
                flush=True,
            )
            serve.delete("bench")
    print()
    print(f"| {CLIENTS} clients, {title} | node memory (PSS sum), MB | requests/s | p50, ms | p99, ms | errors |")
    print("|---|---|---|---|---|---|")
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in results.items()}
    for name, (mb, rps, p50, p99, _errors) in med.items():
        print(
            f"| {name} | {mb:.0f} ({min(x[0] for x in results[name]):.0f}-{max(x[0] for x in results[name]):.0f}) "
            f"| {rps:.1f} ({min(x[1] for x in results[name]):.1f}-{max(x[1] for x in results[name]):.1f}) "
            f"| {p50:.1f} | {p99:.1f} | {sum(x[4] for x in results[name])} |"
        )
    usual = med[list(med)[-1]]
    print(f"\nagainst the usual way (4 replicas), {floor:.0f} MB of it being {REPLICAS} empty replicas:")
    for name, (mb, rps, _p50, p99, _e) in list(med.items())[:-1]:
        print(f"- {name}: memory {mb / usual[0]:.2f}x, throughput {rps / usual[1]:.2f}x, p99 {p99 / usual[3]:.2f}x")
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
