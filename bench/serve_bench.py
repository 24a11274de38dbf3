"""Ray Serve on this machine: ResNet-18 served by tvmrt.serve (builds for batch 1, 2, 4 and 8,
with and without batching) and the usual way (TVM's Python on upstream's runtime, each replica
loading its own model), 4 replicas, 16 clients at once, sides alternated round by round. Prints
the node's memory (the sum of the replica processes' PSS), requests per second and p50/p99
latency. Run by bench/serve_bench.sh (which sets up the venv and the models).

  python serve_bench.py MODELS_DIR UPSTREAM_LIB_DIR TVM_WHEEL_DIR [ROUNDS] [SECONDS]
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


def pids(handle, usual: bool) -> set[int]:
    """The replicas' processes (asked until each has answered)."""
    found: set[int] = set()
    deadline = time.time() + 120
    while len(found) < REPLICAS and time.time() < deadline:
        found.add(handle.pid.remote().result() if usual else handle.stats.remote().result()["pid"])
    return found


def load(handle, seconds: float) -> tuple[float, float, float, int]:
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
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
    builds = [str(models / f"resnet18_unbound_b{b}") for b in (1, 2, 4, 8)]
    builds[0] = str(models / "resnet18_unbound")
    prepared = tempfile.mkdtemp(prefix="tvmrt-bench-prepared-")
    env = {"TVM_NUM_THREADS": "1"}
    usual_env = dict(env, TVM_FFI="ctypes", TVM_USE_RUNTIME_LIB="1", TVM_LIBRARY_PATH=upstream, PYTHONPATH=wheel_dir)
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": 18200})
    import tvmrt.serve

    actor = {"num_cpus": 0.5, "runtime_env": {"env_vars": env}}
    sides = {
        "tvmrt, batching (builds 1/2/4/8)": lambda: tvmrt.serve.deployment(
            builds, name="bench", num_replicas=REPLICAS, max_batch_size=8,
            concurrency=1, prepared_dir=prepared, ray_actor_options=actor,
        ),
        "tvmrt, no batching (build 1)": lambda: tvmrt.serve.deployment(
            builds[:1], name="bench", num_replicas=REPLICAS, max_batch_size=1, concurrency=1,
            prepared_dir=prepared, ray_actor_options=actor,
        ),
        "usual: TVM's Python, upstream's runtime": lambda: UsualTVM.options(
            name="bench", num_replicas=REPLICAS, max_ongoing_requests=8,
            ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": usual_env}},
        ).bind(builds[0]),
    }
    empty = serve.run(Empty.options(num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.5}).bind(), name="bench",
                      route_prefix="/bench")
    floor = sum(pss_mb(p) for p in pids(empty, usual=True))
    serve.delete("bench")
    print(f"{REPLICAS} empty replicas (Ray and Python alone): {floor:.0f} MB", flush=True)
    results: dict[str, list[tuple[float, float, float, float, int]]] = {k: [] for k in sides}
    for r in range(rounds):
        for name, make in sides.items():
            handle = serve.run(make(), name="bench", route_prefix="/bench")
            replica_pids = pids(handle, usual=name.startswith("usual"))
            rps, p50, p99, errors = load(handle, seconds)
            node_mb = sum(pss_mb(p) for p in replica_pids)
            results[name].append((node_mb, rps, p50, p99, errors))
            print(f"round {r + 1}: {name}: {node_mb:.0f} MB, {rps:.1f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms,"
                  f" {errors} errors", flush=True)
            serve.delete("bench")
    print()
    print(f"| {REPLICAS} replicas, {CLIENTS} clients | node memory (sum of PSS), MB | requests/s | p50, ms | p99, ms |")
    print("|---|---|---|---|---|")
    med = {k: [statistics.median(col) for col in zip(*v)] for k, v in results.items()}
    for name, (mb, rps, p50, p99, _errors) in med.items():
        print(f"| {name} | {mb:.0f} | {rps:.1f} | {p50:.1f} | {p99:.1f} |")
    keys = list(med)
    ours, nob, usual = med[keys[0]], med[keys[1]], med[keys[2]]
    print(f"\nabove {REPLICAS} empty replicas ({floor:.0f} MB): tvmrt batching {ours[0] - floor:.0f} MB, "
          f"no batching {nob[0] - floor:.0f} MB, usual {usual[0] - floor:.0f} MB: "
          f"{(ours[0] - floor) / (usual[0] - floor):.2f}x and "
          f"{(nob[0] - floor) / (usual[0] - floor):.2f}x the usual way's")
    print(f"node memory: tvmrt {ours[0] / usual[0]:.2f}x the usual way's ({nob[0] / usual[0]:.2f}x without the "
          f"batch builds); throughput: batching "
          f"{ours[1] / usual[1]:.2f}x the usual way's, {ours[1] / nob[1]:.2f}x no batching; p99: "
          f"{ours[3] / usual[3]:.2f}x the usual way's")
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
