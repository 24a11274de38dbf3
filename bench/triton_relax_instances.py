"""A Triton server's memory serving a Relax model (TVM 0.27, 64 MB of bound constants:
bench/relax_memory.sh makes it) with 1 and with 4 instances of the tvm backend: PSS of the server
after loading and answering 8 requests, the two alternated, fresh servers every round.

    eval "$(scripts/triton_server.sh)"
    target/triton/venv/bin/python bench/triton_relax_instances.py target/release/libtriton_tvm.so \\
        .tvm-cache/bench/relax_64mb/model.so 3
"""

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).parent))
from triton_pss import free_port, pss_kb, server_args


def measure(backend: Path, model: Path, count: int, root: Path) -> float:
    shutil.rmtree(root, ignore_errors=True)
    (root / "backends" / "tvm").mkdir(parents=True)
    shutil.copy(backend, root / "backends" / "tvm" / "libtriton_tvm.so")
    (root / "models" / "relax" / "1").mkdir(parents=True)
    shutil.copy(model, root / "models" / "relax" / "1" / "model.so")
    config = f'backend: "tvm"\nmax_batch_size: 8\ninstance_group [{{count: {count}, kind: KIND_CPU}}]\n'
    (root / "models" / "relax" / "config.pbtxt").write_text(config)
    http = free_port()
    args = server_args(root, http)
    env = {**os.environ, "LD_LIBRARY_PATH": os.environ["TRITON_LIBS"], "TVM_NUM_THREADS": "1"}
    with open(root / "server.log", "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}", concurrency=4)
        try:
            deadline = time.time() + 180
            while not _ready(client) and time.time() < deadline:
                time.sleep(0.2)
            x = np.ones((2, 1024), "float32")
            pending = []
            for _ in range(8):
                given = httpclient.InferInput("x", [2, 1024], "FP32")
                given.set_data_from_numpy(x)
                pending.append(client.async_infer("relax", [given]))
            for p in pending:
                p.get_result()
            time.sleep(1)
            return pss_kb(proc.pid) / 1024
        finally:
            client.close()
            proc.terminate()
            proc.wait(30)


def _ready(client: httpclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_model_ready("relax"))
    except Exception:  # not listening yet
        return False


def main() -> None:
    backend, model = Path(sys.argv[1]), Path(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    results: dict[int, list[float]] = {1: [], 4: []}
    for r in range(rounds):
        for count in (1, 4):
            results[count].append(measure(backend, model, count, Path(f"/tmp/triton-relax-{count}")))
            print(f"round {r + 1}: {count} instance(s) {results[count][-1]:.1f} MB", flush=True)
    for count, mb in results.items():
        print(f"{count} instance(s): server PSS {statistics.median(mb):.1f} MB ({min(mb):.1f}-{max(mb):.1f})")
    print(f"4 / 1: {statistics.median(results[4]) / statistics.median(results[1]):.2f}x")


if __name__ == "__main__":
    main()
