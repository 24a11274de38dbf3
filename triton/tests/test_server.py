"""The tvm backend in a real Triton server (2.51, from the nvidia-pytriton wheel), all on 127.0.0.1.

Run by scripts/test_triton.sh, which provides the server (TRITONSERVER: its binary; its libraries
beside it in ../../nvidia_pytriton.libs or TRITON_LIBS) and the backend (TRITON_TVM_BACKEND: the
built libtriton_tvm.so). Every answer is compared with the fixture's recorded output, which TVM
itself computed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read(path: Path, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return np.fromfile(path, dtype=dtype).reshape(shape)


def copy_files(src: Path, dst: Path, names: list[str]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(src / n, dst / n)


def write_config(model_dir: Path, text: str) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text('backend: "tvm"\n' + text)


# multi_io has a 0-d output (a sum), which Triton cannot show: it is served as [1].
FIXTURE_MODELS = [
    "multi_io",
    "tvm019/multi_io",
    "convnet",
    "int8_dense",
    "mlp_fp16",
    "sort_ops",
    "lstm_seq8",
    "mlp_link_params",
]


def model_name(fixture: str) -> str:
    return "fx_" + fixture.replace("/", "_").replace(".", "_")


def manifest(d: Path) -> tuple[list[tuple[str, np.ndarray]], list[np.ndarray]]:
    """The fixture's inputs (name, array) and outputs, as its manifest.txt lists them."""
    inputs, outputs = [], []
    for line in (d / "manifest.txt").read_text().splitlines():
        w = line.split()
        if not w or w[0] not in ("input", "output"):
            continue
        at = 2 if w[0] == "input" else 1
        ndim = int(w[at + 1])
        shape = tuple(int(x) for x in w[at + 2 : at + 2 + ndim])
        array = np.fromfile(d / w[at + 2 + ndim], dtype=np.dtype(w[at])).reshape(shape)
        if w[0] == "input":
            inputs.append((w[1], array))
        else:
            outputs.append(array)
    return inputs, outputs


def make_repository(root: Path) -> None:
    graph = ["lib.so", "graph.json", "params.bin"]
    copy_files(FIXTURES / "mlp_b1", root / "mlp" / "1", graph)
    write_config(root / "mlp", "instance_group [{count: 4, kind: KIND_CPU}]\n")
    # One network at two batch sizes, served as one model.
    copy_files(FIXTURES / "mlp_b1", root / "mlpb" / "1" / "b1", graph)
    copy_files(FIXTURES / "mlp_b8", root / "mlpb" / "1" / "b8", graph)
    write_config(
        root / "mlpb",
        "instance_group [{count: 2, kind: KIND_CPU}]\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        # A batch's runs side by side, whatever they cost (the MLP's are too short for the default).
        'parameters { key: "parallel_batch_runs" value: { string_value: "always" } }\n',
    )
    vm = FIXTURES / "vm" / "0.16" / "mlp_dyn"
    copy_files(vm, root / "vm" / "1", ["vm.so", "model.meta"])
    write_config(root / "vm", "max_batch_size: 16\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    # The executable alone records no tensors: the config declares them (outputs by position).
    copy_files(vm, root / "vm_declared" / "1", ["vm.so"])
    write_config(
        root / "vm_declared",
        "max_batch_size: 8\n"
        'input [{name: "data", data_type: TYPE_FP32, dims: [16]}]\n'
        'output [{name: "scores", data_type: TYPE_FP32, dims: [8]},\n'
        '        {name: "total", data_type: TYPE_FP32, dims: [1], reshape: {shape: []}}]\n',
    )
    # Every CPU graph fixture, each a model whose config the backend completes alone.
    for name in FIXTURE_MODELS:
        copy_files(FIXTURES / name, root / model_name(name) / "1", ["lib.so", "graph.json", "params.bin"])
        write_config(root / model_name(name), "")
    # Relax executables (TVM 0.27): the config completed from the executable alone, a symbolic
    # batch batched dynamically; a fixed-shape tuple of four dtypes.
    copy_files(FIXTURES / "relax" / "0.27" / "mlp_bound", root / "relax_mlp" / "1", ["model.so"])
    write_config(root / "relax_mlp", "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    copy_files(FIXTURES / "relax" / "0.27" / "tuple_mixed", root / "relax_tuple" / "1", ["model.so"])
    write_config(root / "relax_tuple", "")
    copy_files(FIXTURES / "aot" / "0.16" / "mlp", root / "aot" / "1", ["lib.so"])
    write_config(root / "aot", "instance_group [{count: 2, kind: KIND_CPU}]\n")
    # Models that must not load, each with the reason named.
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "lib.so").write_bytes(b"not a library")
    write_config(root / "broken", "")
    copy_files(FIXTURES / "mlp_b1", root / "mismatch" / "1", graph)
    write_config(root / "mismatch", 'input [{name: "data", data_type: TYPE_FP32, dims: [1, 1, 28, 27]}]\n')
    copy_files(vm, root / "vm_undeclared" / "1", ["vm.so"])
    write_config(root / "vm_undeclared", "max_batch_size: 8\n")


GOOD = ["mlp", "mlpb", "vm", "vm_declared", "aot", "relax_mlp", "relax_tuple"] + [model_name(n) for n in FIXTURE_MODELS]


class Server:
    def __init__(self, root: Path) -> None:
        binary = Path(os.environ["TRITONSERVER"])
        backend = Path(os.environ["TRITON_TVM_BACKEND"])
        libs = os.environ.get("TRITON_LIBS", str(binary.parents[3] / "nvidia_pytriton.libs"))
        backends = root / "backends"
        (backends / "tvm").mkdir(parents=True)
        shutil.copy(backend, backends / "tvm" / "libtriton_tvm.so")
        self.repo = root / "models"
        make_repository(self.repo)
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log = open(root / "server.log", "w")
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--model-repository={self.repo}",
                f"--backend-directory={backends}",
                "--model-control-mode=explicit",
                "--http-address=127.0.0.1",
                f"--http-port={self.http_port}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={self.grpc_port}",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={self.metrics_port}",
                "--allow-sagemaker=false",
                "--allow-vertex-ai=false",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LD_LIBRARY_PATH": libs},
        )
        self.http = httpclient.InferenceServerClient(f"127.0.0.1:{self.http_port}", concurrency=8)
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        deadline = time.time() + 60
        while True:
            try:
                if self.http.is_server_live():
                    break
            except Exception:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"tritonserver did not start:\n{(root / 'server.log').read_text()[-4000:]}")
            time.sleep(0.2)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.http.close()
        self.grpc.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("triton"))
    try:
        for m in GOOD:
            s.http.load_model(m)
        yield s
    finally:
        s.stop()
    # A server that died (a signal: Triton logs its own stack trace first) says why, here.
    log = (s.repo.parent / "server.log").read_text()[-6000:]
    assert s.proc.returncode == 0, f"the server did not stop cleanly ({s.proc.returncode}); its log ends:\n{log}"


def infer_input(module: Any, name: str, x: np.ndarray, binary: bool = True) -> Any:
    i = module.InferInput(name, list(x.shape), "FP32")
    if module is httpclient:
        i.set_data_from_numpy(x, binary_data=binary)
    else:
        i.set_data_from_numpy(x)
    return i


def test_graph_model_over_http_and_grpc_json_and_binary(server: Server) -> None:
    x = read(FIXTURES / "mlp_b1" / "in_0.bin", (1, 1, 28, 28))
    want = read(FIXTURES / "mlp_b1" / "out_0.bin", (1, 10))
    for binary in (True, False):
        got = server.http.infer("mlp", [infer_input(httpclient, "data", x, binary)]).as_numpy("output_0")
        assert got.shape == (1, 10) and np.array_equal(got, want)
    got = server.grpc.infer("mlp", [infer_input(grpcclient, "data", x)]).as_numpy("output_0")
    assert np.array_equal(got, want)


def test_auto_complete_fills_the_config_from_the_artefact(server: Server) -> None:
    c = server.http.get_model_config("mlpb")
    assert c["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"]) for i in c["input"]] == [("data", "TYPE_FP32", [1, 28, 28])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in c["output"]] == [("output_0", "TYPE_FP32", [10])]
    vm = server.http.get_model_config("vm")
    assert [(o["name"], o["dims"]) for o in vm["output"]] == [("output_0", [8]), ("output_1", [1])]


@pytest.mark.parametrize("fixture", FIXTURE_MODELS)
def test_every_fixture_answers_as_upstream_did(server: Server, fixture: str) -> None:
    """Each fixture as a model with an auto-completed config: its outputs equal upstream's bytes;
    a 0-d tensor is [1] in the config and the answer (Triton has no scalars, and refuses a reshape
    to [] in a model without a batch axis)."""
    from tritonclient.utils import np_to_triton_dtype

    inputs, outputs = manifest(FIXTURES / fixture)
    config = server.http.get_model_config(model_name(fixture))
    for o, want in zip(config["output"], outputs):
        assert o["dims"] == (list(want.shape) or [1]), (o, want.shape)
        assert "reshape" not in o, o
    for client in (httpclient, grpcclient):
        given = []
        for name, x in inputs:
            i = client.InferInput(name, list(x.shape), np_to_triton_dtype(x.dtype))
            i.set_data_from_numpy(x)
            given.append(i)
        conn = server.http if client is httpclient else server.grpc
        answer = conn.infer(model_name(fixture), given)
        for k, want in enumerate(outputs):
            got = answer.as_numpy(f"output_{k}")
            assert got.dtype == want.dtype, (k, got.dtype, want.dtype)
            assert got.shape == (want.shape or (1,)), (k, got.shape, want.shape)
            assert got.tobytes() == want.tobytes(), f"{fixture} output {k} over {client.__name__}"


def test_concurrent_requests_are_batched_over_both_builds(server: Server) -> None:
    x8 = read(FIXTURES / "mlp_b8" / "in_0.bin", (8, 1, 28, 28))
    w8 = read(FIXTURES / "mlp_b8" / "out_0.bin", (8, 10))
    pending = []
    for k in range(160):
        rows = [k % 8, (k * 3 + 1) % 8, (k * 5 + 2) % 8][: 1 + k % 3]
        i = infer_input(httpclient, "data", x8[rows], binary=k % 4 != 0)
        pending.append((rows, server.http.async_infer("mlpb", [i])))
    for rows, p in pending:
        got = p.get_result().as_numpy("output_0")
        assert got.shape == (len(rows), 10)
        np.testing.assert_allclose(got, w8[rows], rtol=1e-5, atol=1e-6)
    stats = server.http.get_inference_statistics("mlpb")["model_stats"][0]
    assert stats["inference_count"] >= sum(1 + k % 3 for k in range(160))
    # Requests of 1 to 3 rows, executed in batches larger than any of them.
    assert max(b["batch_size"] for b in stats["batch_stats"]) > 3, stats["batch_stats"]


def test_a_vm_model_runs_each_batch_at_its_own_size(server: Server) -> None:
    d = FIXTURES / "vm" / "0.16" / "mlp_dyn"
    for case, n in ((0, 1), (1, 3), (2, 7)):
        x = read(d / f"in_{case}_0.bin", (n, 16))
        want0 = read(d / f"out_{case}_0.bin", (n, 8))
        want1 = read(d / f"out_{case}_1.bin", (n,))
        r = server.grpc.infer("vm", [infer_input(grpcclient, "data", x)])
        assert np.array_equal(r.as_numpy("output_0"), want0)
        assert np.array_equal(r.as_numpy("output_1").reshape(n), want1)
        r = server.http.infer("vm_declared", [infer_input(httpclient, "data", x)])
        assert np.array_equal(r.as_numpy("scores"), want0)
        assert np.array_equal(r.as_numpy("total").reshape(n), want1)
    # Gathered: rows of several requests in one run, each answered with its own.
    x = read(d / "in_2_0.bin", (7, 16))
    want = read(d / "out_2_0.bin", (7, 8))
    pending = [
        (k, server.http.async_infer("vm", [infer_input(httpclient, "data", x[k : k + 1 + k % 2])])) for k in range(6)
    ]
    for k, p in pending:
        assert np.array_equal(p.get_result().as_numpy("output_0"), want[k : k + 1 + k % 2])


def test_relax_models_answer_as_tvm_027(server: Server) -> None:
    """Relax executables of TVM 0.27 with auto-completed configs: inputs from the executable's
    checks, outputs from its probe runs; answers byte-equal to TVM 0.27's own runtime, a batch
    gathered from several requests answered row by row."""
    d = FIXTURES / "relax" / "0.27" / "mlp_bound"
    c = server.http.get_model_config("relax_mlp")
    assert [(i["name"], i["data_type"], i["dims"]) for i in c["input"]] == [("x", "TYPE_FP32", [16])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in c["output"]] == [("output_0", "TYPE_FP32", [4])]
    for case, n in ((0, 2), (1, 5)):
        x = read(d / f"in_{case}_0.bin", (n, 16))
        want = read(d / f"out_{case}_0.bin", (n, 4))
        r = server.grpc.infer("relax_mlp", [infer_input(grpcclient, "x", x)])
        assert r.as_numpy("output_0").tobytes() == want.tobytes()
    x = read(d / "in_1_0.bin", (5, 16))
    want = read(d / "out_1_0.bin", (5, 4))
    pending = [
        (k, server.http.async_infer("relax_mlp", [infer_input(httpclient, "x", x[k : k + 1])])) for k in range(5)
    ]
    for k, p in pending:
        assert p.get_result().as_numpy("output_0").tobytes() == want[k : k + 1].tobytes()
    t = FIXTURES / "relax" / "0.27" / "tuple_mixed"
    inputs, outputs = manifest(t)
    answer = server.http.infer("relax_tuple", [infer_input(httpclient, "x", inputs[0][1])])
    for k, w in enumerate(outputs):
        got = answer.as_numpy(f"output_{k}")
        assert got.dtype == w.dtype and got.tobytes() == w.tobytes(), k


def test_an_aot_artefact(server: Server) -> None:
    d = FIXTURES / "aot" / "0.16" / "mlp"
    x = read(d / "in_0.bin", (1, 32))
    got = server.http.infer("aot", [infer_input(httpclient, "data", x)]).as_numpy("output0")
    assert np.array_equal(got, read(d / "out_0.bin", (1, 10)))


def test_requested_outputs_alone(server: Server) -> None:
    d = FIXTURES / "vm" / "0.16" / "mlp_dyn"
    x = read(d / "in_1_0.bin", (3, 16))
    r = server.http.infer(
        "vm", [infer_input(httpclient, "data", x)], outputs=[httpclient.InferRequestedOutput("output_1")]
    )
    assert r.as_numpy("output_0") is None
    assert np.array_equal(r.as_numpy("output_1").reshape(3), read(d / "out_1_1.bin", (3,)))


def test_bad_requests_among_good_ones_are_answered_alone(server: Server) -> None:
    x = read(FIXTURES / "mlp_b8" / "in_0.bin", (8, 1, 28, 28))
    w = read(FIXTURES / "mlp_b8" / "out_0.bin", (8, 10))
    bad_inputs = [
        [infer_input(httpclient, "nope", x[:1])],  # an unknown name
        [infer_input(httpclient, "data", x[:1, :, :, :27].copy())],  # a wrong shape
        [httpclient.InferInput("data", [1, 1, 28, 28], "INT32")],  # a wrong dtype
        [],  # no input
        [infer_input(httpclient, "data", np.zeros((9, 1, 28, 28), np.float32))],  # past max_batch_size
    ]
    bad_inputs[2][0].set_data_from_numpy(np.zeros((1, 1, 28, 28), np.int32))
    pending = []
    for k in range(40):
        if k % 4 == 1:
            pending.append((None, server.http.async_infer("mlpb", bad_inputs[k // 4 % len(bad_inputs)])))
        else:
            pending.append(
                (k % 8, server.http.async_infer("mlpb", [infer_input(httpclient, "data", x[k % 8 : k % 8 + 1])]))
            )
    for row, p in pending:
        if row is None:
            with pytest.raises(InferenceServerException):
                p.get_result()
        else:
            np.testing.assert_allclose(p.get_result().as_numpy("output_0"), w[row : row + 1], rtol=1e-5, atol=1e-6)
    assert server.http.is_model_ready("mlpb")


def test_system_shared_memory_in_and_out(server: Server) -> None:
    x = read(FIXTURES / "mlp_b1" / "in_0.bin", (1, 1, 28, 28))
    want = read(FIXTURES / "mlp_b1" / "out_0.bin", (1, 10))
    key = f"/tvm_triton_test_{os.getpid()}"
    region_in = shm.create_shared_memory_region("tvm_in", key + "_in", x.nbytes)
    region_out = shm.create_shared_memory_region("tvm_out", key + "_out", want.nbytes)
    try:
        shm.set_shared_memory_region(region_in, [x])
        server.http.register_system_shared_memory("tvm_in", key + "_in", x.nbytes)
        server.http.register_system_shared_memory("tvm_out", key + "_out", want.nbytes)
        i = httpclient.InferInput("data", list(x.shape), "FP32")
        i.set_shared_memory("tvm_in", x.nbytes)
        o = httpclient.InferRequestedOutput("output_0", binary_data=True)
        o.set_shared_memory("tvm_out", want.nbytes)
        server.http.infer("mlp", [i], outputs=[o])
        assert np.array_equal(shm.get_contents_as_numpy(region_out, np.float32, [1, 10]), want)
    finally:
        server.http.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region_in)
        shm.destroy_shared_memory_region(region_out)


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("broken", "broken/1/lib.so"),
        ("mismatch", "input 'data': the config's dims [1, 1, 28, 27] but the model takes [1, 1, 28, 28]"),
        ("vm_undeclared", "declare its inputs (data)"),
    ],
)
def test_a_model_that_cannot_load_says_why_and_the_others_serve(server: Server, model: str, says: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        server.http.load_model(model)
    assert says in str(e.value)
    for m in GOOD:
        assert server.http.is_model_ready(m), m
    test_graph_model_over_http_and_grpc_json_and_binary(server)


def test_metrics_count_the_requests(server: Server) -> None:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
    lines = [line for line in text.splitlines() if line.startswith('nv_inference_count{model="mlpb"')]
    assert lines and float(lines[0].split()[-1]) > 0, lines


def cycles_leave_no_trace(server: Server, model: str, check: Callable[[], None]) -> None:
    """`model` unloaded and loaded 20 times (after 3 to settle), `check` answering after each:
    the server grows by less than 4 MB."""

    def cycle() -> None:
        server.http.unload_model(model)
        deadline = time.time() + 30
        while server.http.is_model_ready(model) and time.time() < deadline:
            time.sleep(0.05)
        server.http.load_model(model)
        check()

    for _ in range(3):
        cycle()
    before = server.rss_kb()
    for _ in range(20):
        cycle()
    grown = server.rss_kb() - before
    assert grown < 4096, f"the server grew {grown} KB over 20 load/unload cycles of {model}"


def test_load_and_unload_cycles_free_everything(server: Server) -> None:
    x = read(FIXTURES / "mlp_b8" / "in_0.bin", (8, 1, 28, 28))
    w = read(FIXTURES / "mlp_b8" / "out_0.bin", (8, 10))

    def check() -> None:
        got = server.http.infer("mlpb", [infer_input(httpclient, "data", x[:3])]).as_numpy("output_0")
        np.testing.assert_allclose(got, w[:3], rtol=1e-5, atol=1e-6)

    cycles_leave_no_trace(server, "mlpb", check)


def test_relax_load_and_unload_cycles_free_everything(server: Server) -> None:
    """A Relax model (TVM 0.27, its config completed at each load) unloaded and loaded 20 times:
    answers unchanged, and the server no larger."""
    d = FIXTURES / "relax" / "0.27" / "mlp_bound"
    x = read(d / "in_0_0.bin", (2, 16))
    want = read(d / "out_0_0.bin", (2, 4))

    def check() -> None:
        got = server.http.infer("relax_mlp", [infer_input(httpclient, "x", x)]).as_numpy("output_0")
        assert got.tobytes() == want.tobytes()

    cycles_leave_no_trace(server, "relax_mlp", check)


def test_reload_under_load(server: Server) -> None:
    x = read(FIXTURES / "mlp_b1" / "in_0.bin", (1, 1, 28, 28))
    want = read(FIXTURES / "mlp_b1" / "out_0.bin", (1, 10))
    pending = [server.http.async_infer("mlp", [infer_input(httpclient, "data", x)]) for _ in range(30)]
    server.http.load_model("mlp")  # a reload: the new version serves once ready, the old drains
    pending += [server.http.async_infer("mlp", [infer_input(httpclient, "data", x)]) for _ in range(30)]
    for p in pending:
        assert np.array_equal(p.get_result().as_numpy("output_0"), want)


def test_the_client_on_docs_triton_md_as_written(server: Server) -> None:
    page = (FIXTURES.parents[1] / "docs" / "triton.md").read_text()
    code = page.split("<!-- triton: client -->\n```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("localhost:8001", f"127.0.0.1:{server.grpc_port}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("class ") and 0 <= int(lines[0].split()[1]) < 10, out
    assert "'name': 'data'" in lines[1] and "'dims': ['1', '1', '28', '28']" in lines[1], out


def test_kserve_s_stock_triton_runtime_arguments(tmp_path: Path) -> None:
    """KServe's stock Triton runtime (ClusterServingRuntime kserve-tritonserver) starts
    `tritonserver --model-store=/mnt/models --grpc-port=9000 --http-port=8080 --allow-grpc=true
    --allow-http=true`, every model of the store loaded at start, the storage initializer having
    laid the storageUri's model repository out under /mnt/models. The same arguments here (ports
    free ones, addresses 127.0.0.1, and the backend directory the image's default holds the backend
    in), on a store so laid out: a Relax model and a graph model, answered over the v2 protocol."""
    binary = Path(os.environ["TRITONSERVER"])
    libs = os.environ.get("TRITON_LIBS", str(binary.parents[3] / "nvidia_pytriton.libs"))
    backends = tmp_path / "opt" / "tritonserver" / "backends"
    (backends / "tvm").mkdir(parents=True)
    shutil.copy(Path(os.environ["TRITON_TVM_BACKEND"]), backends / "tvm" / "libtriton_tvm.so")
    store = tmp_path / "mnt" / "models"
    copy_files(FIXTURES / "relax" / "0.27" / "mlp_bound", store / "relax" / "1", ["model.so"])
    write_config(store / "relax", "max_batch_size: 8\n")
    copy_files(FIXTURES / "mlp_b1", store / "mlp" / "1", ["lib.so", "graph.json", "params.bin"])
    write_config(store / "mlp", "")
    http, grpc = free_port(), free_port()
    args = [str(binary), f"--model-store={store}", f"--grpc-port={grpc}", f"--http-port={http}"]
    args += ["--allow-grpc=true", "--allow-http=true", f"--backend-directory={backends}"]
    args += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    args += [f"--metrics-port={free_port()}", "--allow-sagemaker=false", "--allow-vertex-ai=false"]
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LD_LIBRARY_PATH": libs})
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    try:
        deadline = time.time() + 120
        while not (client_ready(client, "relax") and client_ready(client, "mlp")):
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()[-4000:]
            time.sleep(0.2)
        d = FIXTURES / "relax" / "0.27" / "mlp_bound"
        x, want = read(d / "in_1_0.bin", (5, 16)), read(d / "out_1_0.bin", (5, 4))
        r = client.infer("relax", [infer_input(httpclient, "x", x)])
        assert r.as_numpy("output_0").tobytes() == want.tobytes()
        inputs, outputs = manifest(FIXTURES / "mlp_b1")
        r = client.infer("mlp", [infer_input(httpclient, inputs[0][0], inputs[0][1])])
        assert r.as_numpy("output_0").tobytes() == outputs[0].tobytes()
    finally:
        client.close()
        proc.terminate()
        proc.wait(30)


def client_ready(client: Any, model: str) -> bool:
    try:
        return bool(client.is_model_ready(model))
    except Exception:  # not listening yet
        return False
