"""RPC over loopback, this runtime against upstream's (v0.16 from source, ../shared/upstream), in
one run with the roles alternated round by round:

- servers, driven by one client (TVM's Python on upstream's library): `tvmrt rpc-server`, TVM's
  Python server on this library, and TVM's Python server on upstream's library;
- clients, driving one server (TVM's Python server on upstream's library): TVM's Python on this
  library, and on upstream's;
- this runtime on both sides, against upstream's on both sides.

Each client process measures: a remote call's round trip (median of 2000 calls of a global),
100 MB copied to a remote array and back, and `time_evaluator("run")` of a model as the server
measured it. Prints each measurement's median over the rounds, its spread, and the ratio to
upstream. Usage: bench/rpc_bench.sh [ROUNDS]."""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = os.path.join(REPO, "target", "python-runtime")
UPSTREAM = os.environ.get("TVM_UPSTREAM_SHARED", os.path.join(REPO, "..", "shared", "upstream"))
MODEL = os.path.join(REPO, "tests", "fixtures", "mlp_unbound_b1")

CLIENT = r"""
import json, sys, time, numpy as np, tvm
from tvm import rpc
from tvm.contrib import graph_executor
port, model = int(sys.argv[1]), sys.argv[2]
remote = rpc.connect("127.0.0.1", port, key="bench")
out = {}
f = remote.get_function("runtime.RuntimeEnabled")
for _ in range(200):
    f("cpu")
laps = []
for _ in range(2000):
    t = time.perf_counter()
    f("cpu")
    laps.append(time.perf_counter() - t)
laps.sort()
out["call_us"] = laps[len(laps) // 2] * 1e6
dev = remote.cpu(0)
host = np.random.default_rng(0).random(25 << 20, dtype="float32")  # 100 MB
a = tvm.nd.empty(host.shape, "float32", dev)
a.copyfrom(host)
t = time.perf_counter()
a.copyfrom(host)
out["to_remote_ms"] = (time.perf_counter() - t) * 1e3
t = time.perf_counter()
back = a.numpy()
out["from_remote_ms"] = (time.perf_counter() - t) * 1e3
assert np.array_equal(back, host)
del a
remote.upload(model + "/lib.so", target="bench.so")
# The wheel's load_module passes arguments upstream's 0.16 LoadRemoteModule refuses.
lib = remote.get_function("tvm.rpc.server.load_module")("bench.so")
m = graph_executor.create(open(model + "/graph.json").read(), lib, dev)
m.load_params(open(model + "/params.bin", "rb").read())
t = time.perf_counter()
res = m.module.time_evaluator("run", dev, number=200, repeat=3)().results
out["evaluator_wall_ms"] = (time.perf_counter() - t) * 1e3
out["run_us"] = min(res) * 1e6
print("RESULT " + json.dumps(out))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(library):
    e = dict(os.environ, TVM_USE_RUNTIME_LIB="1", TVM_LIBRARY_PATH=library, TVM_NUM_THREADS="1")
    return e


def start(cmd, port, e):
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return p
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no server on {port}: {cmd}")


def python_server(library):
    port = free_port()
    cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
           "--port-end", str(port + 1), "--key", "bench", "--silent"]
    return port, start(cmd, port, env(library))


def tvmrt_server():
    port = free_port()
    cmd = [os.path.join(REPO, "target", "release", "tvmrt"), "rpc-server", "--host", "127.0.0.1", "--port",
           str(port), "--port-end", str(port + 1), "--key", "bench", "--silent"]
    return port, start(cmd, port, env(OURS))


def client(library, port):
    done = subprocess.run([sys.executable, "-c", CLIENT, str(port), MODEL], env=env(library), capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    servers = {"tvmrt rpc-server": tvmrt_server(), "python server, ours": python_server(OURS),
               "python server, upstream": python_server(UPSTREAM)}
    # (label, client library, server); every row is compared with all upstream's.
    up = "all upstream's"
    pairs = [("server: tvmrt rpc-server", UPSTREAM, "tvmrt rpc-server"),
             ("server: python on ours", UPSTREAM, "python server, ours"),
             ("client: ours", OURS, "python server, upstream"),
             ("all ours (tvmrt, client)", OURS, "tvmrt rpc-server"),
             (up, UPSTREAM, "python server, upstream")]
    results = {label: [] for label, _, _ in pairs}
    try:
        for r in range(rounds):
            order = pairs if r % 2 == 0 else list(reversed(pairs))
            for label, library, server in order:
                results[label].append(client(library, servers[server][0]))
    finally:
        for _, p in servers.values():
            os.killpg(p.pid, 9)
            p.wait()
    metrics = ["call_us", "to_remote_ms", "from_remote_ms", "run_us", "evaluator_wall_ms"]
    print(f"{rounds} rounds, roles alternated; median [min-max]; ratio to the median of {up}")
    print(f"{'':28}" + "".join(f"{m:>30}" for m in metrics))
    base = results[up]
    for label, _, _ in pairs:
        cells = []
        for m in metrics:
            v = [x[m] for x in results[label]]
            med, ref = statistics.median(v), statistics.median([x[m] for x in base])
            cells.append(f"{med:9.1f} [{min(v):.1f}-{max(v):.1f}] {med / ref:5.2f}x")
        print(f"{label:28}" + "".join(f"{c:>30}" for c in cells))


if __name__ == "__main__":
    main()
