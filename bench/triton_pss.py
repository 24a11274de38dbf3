"""The memory of a Triton server serving one model with two builds of the tvm backend: PSS of the
server after loading the model with 4 instances and answering 8 requests, the two backends
alternated, fresh servers every round. For a change to the backend's (or the runtime's) memory:

    eval "$(scripts/triton_server.sh)"
    target/triton/venv/bin/python bench/triton_pss.py OLD/libtriton_tvm.so NEW/libtriton_tvm.so \\
        target/bench-models/resnet18 3

The model folder's `lib.so` alone is served (its weights bound into it); its `in_0.bin` is the
input, shaped [1, 3, 224, 224]. Every address is 127.0.0.1.
"""

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError("no Pss")


def server_args(root: Path, http: int) -> list[str]:
    """The server over `root`'s models/ and backends/, every address 127.0.0.1, HTTP on `http`."""
    return [
        os.environ["TRITONSERVER"],
        f"--model-repository={root / 'models'}",
        f"--backend-directory={root / 'backends'}",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={free_port()}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={free_port()}",
        "--allow-sagemaker=false",
        "--allow-vertex-ai=false",
    ]


def measure(backend: Path, model_dir: Path, root: Path) -> float:
    shutil.rmtree(root, ignore_errors=True)
    (root / "backends" / "tvm").mkdir(parents=True)
    shutil.copy(backend, root / "backends" / "tvm" / "libtriton_tvm.so")
    version = root / "models" / "resnet" / "1"
    version.mkdir(parents=True)
    shutil.copy(model_dir / "lib.so", version / "lib.so")
    config = 'backend: "tvm"\ninstance_group [{count: 4, kind: KIND_CPU}]\n'
    (root / "models" / "resnet" / "config.pbtxt").write_text(config)
    http = free_port()
    args = server_args(root, http)
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": os.environ["TRITON_LIBS"],
        "TVMRT_PREPARED_DIR": str(root / "prepared"),
        "TVM_NUM_THREADS": "1",
    }
    with open(root / "server.log", "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    if client.is_model_ready("resnet"):
                        break
                except Exception:
                    pass
                time.sleep(0.2)
            x = np.fromfile(model_dir / "in_0.bin", dtype="float32").reshape(1, 3, 224, 224)
            for _ in range(8):
                given = httpclient.InferInput("data", [1, 3, 224, 224], "FP32")
                given.set_data_from_numpy(x)
                client.infer("resnet", [given])
            time.sleep(1)
            return pss_kb(proc.pid) / 1024
        finally:
            client.close()
            proc.terminate()
            proc.wait(30)


def main() -> None:
    old, new, model = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    results: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(rounds):
        for side, backend in (("old", old), ("new", new)):
            results[side].append(measure(backend, model, Path(f"/tmp/triton-pss-{side}")))
            print(f"round {r + 1}: {side} {results[side][-1]:.1f} MB", flush=True)
    for side, mb in results.items():
        print(f"{side}: server PSS {statistics.median(mb):.1f} MB ({min(mb):.1f}-{max(mb):.1f})")
    print(f"new / old: {statistics.median(results['new']) / statistics.median(results['old']):.2f}x")


if __name__ == "__main__":
    main()
