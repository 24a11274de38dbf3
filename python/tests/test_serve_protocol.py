"""The Open Inference Protocol (KServe v2) of the Serve deployment: Triton's own Python client
(tritonclient, unmodified) against a deployment on 127.0.0.1 (health, metadata, JSON and binary
tensors, concurrent requests with distinct inputs, each answer checked against a direct run), the
protocol's errors for bad requests while good ones go on, and the protocol's reader and writer on
their own. Needs ``tvmrt[serve]`` and ``tritonclient[http]`` (skipped without them)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from conftest import FIXTURES
from test_serve import free_port

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
requests = pytest.importorskip("requests")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

import tvmrt  # noqa: E402
import tvmrt.serve as tserve  # noqa: E402
from tvmrt.serve import _protocol  # noqa: E402
from tvmrt.serve._requests import BadRequest, Limits  # noqa: E402

B1, B8 = FIXTURES / "mlp_unbound_b1", FIXTURES / "mlp_unbound_b8"
LIMITS = Limits(64, 1 << 20)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    port = free_port()
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        tserve.deployment([str(B1), str(B8)], name="mnist", prepared_dir=str(tmp_path_factory.mktemp("prepared"))),
        name="mnist",
        route_prefix="/mnist",
    )
    yield f"127.0.0.1:{port}/mnist"
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def direct():
    return tvmrt.Model(B1, concurrency=1)


def rows_of(direct, x):
    return np.concatenate([direct.run(data=x[i : i + 1])[0] for i in range(len(x))])


def test_health_and_metadata_as_tritonclient_reads_them(app):
    c = httpclient.InferenceServerClient(app)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("mnist")
    assert c.is_model_ready("mnist", "1") and not c.is_model_ready("other")
    assert c.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    meta = c.get_model_metadata("mnist")
    assert meta["name"] == "mnist" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "data", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    [out] = meta["outputs"]
    assert out["datatype"] == "FP32" and out["shape"] == [-1, 10]
    with pytest.raises(InferenceServerException, match="no model named 'other'"):
        c.get_model_metadata("other")
    with pytest.raises(InferenceServerException, match="no version '7'"):
        c.get_model_metadata("mnist", "7")


def test_json_and_binary_tensors_from_many_clients(app, direct):
    out_name = direct.outputs[0].name
    rng = np.random.default_rng(21)
    jobs = [rng.standard_normal((int(rng.integers(1, 13)), 1, 28, 28)).astype("float32") for _ in range(48)]
    got: dict[int, np.ndarray] = {}
    failed: list[str] = []

    def client(k):
        c = httpclient.InferenceServerClient(app)
        for j in range(k, len(jobs), 6):
            x = jobs[j]
            inp = httpclient.InferInput("data", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=j % 2 == 0)
            out = httpclient.InferRequestedOutput(out_name, binary_data=j % 3 == 0)
            try:
                r = c.infer("mnist", [inp], outputs=[out], request_id=f"r{j}")
                assert r.get_response()["id"] == f"r{j}"
                got[j] = r.as_numpy(out_name)
            except Exception as e:  # collected: a thread's assertion would be lost
                failed.append(f"{j}: {e}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    assert len(got) == len(jobs)
    for j, x in enumerate(jobs):
        assert got[j].shape == (len(x), 10) and got[j].dtype == np.float32
        np.testing.assert_allclose(got[j], rows_of(direct, x), rtol=1e-5, atol=1e-6, err_msg=str(j))


def test_every_output_and_the_exact_rows_by_plain_http(app, direct):
    """Without tritonclient: the JSON form with nested data, the answer's x-tvmrt-runs saying which
    build ran the rows, and those rows byte-equal to that build's own run."""
    url = "http://" + app
    x = np.random.default_rng(3).standard_normal((3, 1, 28, 28)).astype("float32")
    tensor = {"name": "data", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    body = {"id": "nested", "inputs": [tensor]}
    r = requests.post(url + "/v2/models/mnist/versions/1/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["model_name"] == "mnist" and doc["model_version"] == "1" and doc["id"] == "nested"
    [out] = doc["outputs"]
    got = np.asarray(out["data"], np.float32).reshape(out["shape"])
    variants = {"mlp_unbound_b1": direct, "mlp_unbound_b8": direct.variant(B8)}
    at = 0
    for build, offset, take, batch in json.loads(r.headers["x-tvmrt-runs"]):
        feed = np.zeros((batch, 1, 28, 28), np.float32)
        feed[offset : offset + take] = x[at : at + take]
        want = variants[build].run(data=feed)[0][offset : offset + take]
        assert got[at : at + take].tobytes() == want.tobytes(), build
        at += take
    assert at == len(x)


def binary_body(x: np.ndarray, size: int | None = None, extra: bytes = b"") -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "data",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes if size is None else size},
                }
            ]
        }
    ).encode()
    return header + x.tobytes() + extra, {"Inference-Header-Content-Length": str(len(header))}


def bad_requests():
    """(what, body, headers, path, status, text in the error)."""
    x = np.zeros((2, 1, 28, 28), np.float32)
    good_json = {"inputs": [{"name": "data", "shape": [2, 1, 28, 28], "datatype": "FP32", "data": x.ravel().tolist()}]}
    body, headers = binary_body(x)
    cut, cut_headers = body[:-100], headers
    lying = dict(headers, **{"Inference-Header-Content-Length": str(len(body) + 10)})
    return [
        ("unknown model", good_json, None, "/v2/models/other/infer", 404, "no model named 'other'"),
        ("unknown path", good_json, None, "/v2/models/mnist/explain", 404, "not an endpoint"),
        (
            "wrong datatype",
            {"inputs": [{"name": "data", "shape": [2, 1, 28, 28], "datatype": "INT64", "data": [0] * 1568}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "input 'data' is float32, got int64",
        ),
        (
            "a narrower datatype, converted by nobody",
            {"inputs": [{"name": "data", "shape": [2, 1, 28, 28], "datatype": "FP16", "data": [0.5] * 1568}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "input 'data' is float32, got float16",
        ),
        (
            "a float outside FP32",
            {"inputs": [{"name": "data", "shape": [2, 1, 28, 28], "datatype": "FP32", "data": [1e300] + [0.0] * 1567}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "outside FP32's range",
        ),
        (
            "an integer no float holds",
            {
                "inputs": [
                    {"name": "data", "shape": [2, 1, 28, 28], "datatype": "FP32", "data": [10**400] + [0.0] * 1567}
                ]
            },
            None,
            "/v2/models/mnist/infer",
            400,
            "outside FP32's range",
        ),
        (
            "wrong shape",
            {"inputs": [{"name": "data", "shape": [2, 1, 28, 27], "datatype": "FP32", "data": [0.0] * 1512}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "got rows of [1, 28, 27]",
        ),
        (
            "count off",
            {"inputs": [{"name": "data", "shape": [2, 1, 28, 28], "datatype": "FP32", "data": [0.0] * 5}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "data holds 5 values",
        ),
        (
            "strings",
            {"inputs": [{"name": "data", "shape": [1], "datatype": "BYTES", "data": ["a"]}]},
            None,
            "/v2/models/mnist/infer",
            400,
            "datatype 'BYTES' is none of",
        ),
        ("truncated binary", cut, cut_headers, "/v2/models/mnist/infer", 400, "left in the body"),
        ("header past the body", body, lying, "/v2/models/mnist/infer", 400, "within the body"),
        (
            "unknown output",
            dict(good_json, outputs=[{"name": "nope"}]),
            None,
            "/v2/models/mnist/infer",
            400,
            "no output named 'nope'",
        ),
        ("not JSON", b"{inputs", {"Content-Type": "application/json"}, "/v2/models/mnist/infer", 400, "not JSON"),
        (
            "unknown input",
            {"inputs": [dict(good_json["inputs"][0], name="pixels")]},
            None,
            "/v2/models/mnist/infer",
            400,
            "unknown pixels",
        ),
    ]


def test_bad_requests_get_the_protocols_errors_and_others_go_on(app, direct):
    url = "http://" + app
    rng = np.random.default_rng(8)
    good = [rng.standard_normal((int(rng.integers(1, 9)), 1, 28, 28)).astype("float32") for _ in range(16)]
    answers: dict[int, np.ndarray] = {}
    got: dict[str, tuple[int, str]] = {}

    def good_client(k):
        c = httpclient.InferenceServerClient(app)
        for j in range(k, len(good), 3):
            inp = httpclient.InferInput("data", list(good[j].shape), "FP32")
            inp.set_data_from_numpy(good[j])
            answers[j] = c.infer("mnist", [inp]).as_numpy(direct.outputs[0].name)

    def bad_client():
        for what, body, headers, path, _, _ in bad_requests():
            if isinstance(body, dict):
                r = requests.post(url + path, json=body, timeout=60)
            else:
                r = requests.post(url + path, data=body, headers=headers, timeout=60)
            got[what] = (r.status_code, r.json().get("error", ""))

    threads = [threading.Thread(target=good_client, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=bad_client))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for what, _, _, _, status, text in bad_requests():
        assert got[what][0] == status and text in got[what][1], (what, got[what])
    for j, x in enumerate(good):
        np.testing.assert_allclose(answers[j], rows_of(direct, x), rtol=1e-5, atol=1e-6)
    # tritonclient raises the server's message.
    c = httpclient.InferenceServerClient(app)
    inp = httpclient.InferInput("data", [1, 1, 28, 28], "FP64")
    inp.set_data_from_numpy(np.zeros((1, 1, 28, 28)))
    with pytest.raises(InferenceServerException, match="float32, got float64") as refused:
        c.infer("mnist", [inp])
    # A client of the protocol is not told what to do in Python.
    assert "astype" not in str(refused.value) and "cast=" not in str(refused.value), refused.value


def test_the_older_forms_still_answer(app):
    url = "http://" + app
    x = np.zeros((2, 1, 28, 28), np.float32)
    r = requests.post(url, json={"inputs": {"data": x.tolist()}}, timeout=60)
    assert r.status_code == 200 and np.asarray(r.json()["outputs"][0]).shape == (2, 10)


# The reader and writer alone.


def test_json_data_flat_or_nested_and_every_kind():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    for data in (x.ravel().tolist(), x.tolist()):
        body = json.dumps({"inputs": [{"name": "a", "shape": [2, 3], "datatype": "INT32", "data": data}]}).encode()
        req = _protocol.read_infer(body, None, LIMITS)
        assert req.inputs["a"].dtype == np.int32 and req.inputs["a"].tobytes() == x.tobytes()
    cases = [
        ("BOOL", [True, False], np.array([True, False])),
        ("UINT8", [0, 255], np.array([0, 255], np.uint8)),
        ("INT64", [-(2**63), 2**63 - 1], np.array([-(2**63), 2**63 - 1], np.int64)),
        ("FP16", [0.5, -2], np.array([0.5, -2], np.float16)),
        ("FP64", [1e300, 2], np.array([1e300, 2], np.float64)),
    ]
    for datatype, data, want in cases:
        body = json.dumps({"inputs": [{"name": "a", "shape": [2], "datatype": datatype, "data": data}]}).encode()
        got = _protocol.read_infer(body, None, LIMITS).inputs["a"]
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), datatype
    refused = [
        ("FP32", [1e300, 0], "outside FP32's range"),
        ("FP32", [-1e39, 0], "outside FP32's range"),
        ("FP16", [70000, 0], "outside FP16's range"),
        ("FP64", [10**400, 0], "outside FP64's range"),
        ("FP32", [10**400, 0], "outside FP32's range"),
        ("BOOL", [1, 0], "true and false"),
        ("UINT8", [256, 0], "outside UINT8's range"),
        ("INT32", [1.5, 2], "integers"),
        ("FP32", ["1", 2], "numbers"),
        ("INT32", [True, 2], "numbers"),
    ]
    for datatype, data, text in refused:
        body = json.dumps({"inputs": [{"name": "a", "shape": [2], "datatype": datatype, "data": data}]}).encode()
        with pytest.raises(BadRequest, match=text):
            _protocol.read_infer(body, None, LIMITS)


def test_datatypes_must_be_the_models():
    meta = _protocol.ModelMeta("m", "tvm", [_protocol.TensorMeta("a", "FP32", [-1, 2])], [])
    for datatype in ("FP16", "INT8", "UINT8", "BOOL", "FP64"):
        data = [True, False] if datatype == "BOOL" else [1, 0]
        body = json.dumps({"inputs": [{"name": "a", "shape": [1, 2], "datatype": datatype, "data": data}]}).encode()
        req = _protocol.read_infer(body, None, LIMITS)
        with pytest.raises(BadRequest, match=f"datatype {datatype} where the model takes FP32"):
            _protocol.check_datatypes(req, meta)
    body = json.dumps({"inputs": [{"name": "a", "shape": [1, 2], "datatype": "FP32", "data": [1, 0]}]}).encode()
    _protocol.check_datatypes(_protocol.read_infer(body, None, LIMITS), meta)


def test_binary_inputs_and_outputs_as_declared():
    a, b = np.arange(4, dtype=np.float32), np.array([[1, 2]], np.int16)
    header = json.dumps(
        {
            "id": "7",
            "parameters": {"binary_data_output": True},
            "inputs": [
                {"name": "a", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
                {"name": "b", "shape": [1, 2], "datatype": "INT16", "parameters": {"binary_data_size": 4}},
            ],
            "outputs": [{"name": "y"}, {"name": "z", "parameters": {"binary_data": False}}],
        }
    ).encode()
    req = _protocol.read_infer(header + a.tobytes() + b.tobytes(), str(len(header)), LIMITS)
    assert req.inputs["a"].tobytes() == a.tobytes() and req.inputs["b"].tobytes() == b.tobytes()
    assert req.outputs == [("y", True), ("z", False)] and req.id == "7"
    data, headers = _protocol.write_infer("m", "1", req, ["z", "y"], [np.array([3.5]), np.eye(2, dtype=np.uint8)])
    split = int(headers["inference-header-content-length"])
    doc = json.loads(data[:split])
    assert doc["id"] == "7" and doc["model_name"] == "m"
    y, z = doc["outputs"]
    assert y == {"name": "y", "datatype": "UINT8", "shape": [2, 2], "parameters": {"binary_data_size": 4}}
    assert z == {"name": "z", "datatype": "FP64", "shape": [1], "data": [3.5]}
    assert data[split:] == np.eye(2, dtype=np.uint8).tobytes()
    # Sizes that do not add up are refused before any array is made.
    for size, body_extra, text in ((15, b"", "binary_data_size 15"), (16, b"x", "bytes after the last")):
        h = json.dumps(
            {"inputs": [{"name": "a", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": size}}]}
        ).encode()
        with pytest.raises(BadRequest, match=text):
            _protocol.read_infer(h + a.tobytes() + body_extra, str(len(h)), LIMITS)
    huge = json.dumps({"inputs": [{"name": "a", "shape": [1 << 40], "datatype": "FP32", "data": []}]}).encode()
    with pytest.raises(BadRequest) as e:
        _protocol.read_infer(huge, None, LIMITS)
    assert e.value.status == 413
    for bad in ("-1", "abc", "999999"):
        with pytest.raises(BadRequest, match="Inference-Header-Content-Length"):
            _protocol.read_infer(header, bad, LIMITS)


def test_routes():
    r = _protocol.route
    assert r("GET", "/v2/health/live").kind == "live"
    assert r("GET", "/v2").kind == "server"
    m = r("GET", "/v2/models/x/versions/3")
    assert (m.kind, m.model, m.version) == ("model", "x", "3")
    assert r("GET", "/v2/models/x/ready").kind == "model_ready"
    assert r("POST", "/v2/models/x/infer").kind == "infer"
    assert r("POST", "/") is None and r("GET", "/v1/models/x") is None
    for method, path in (("GET", "/v2/models/x/infer"), ("POST", "/v2/health/live"), ("GET", "/v2/models")):
        with pytest.raises(BadRequest) as e:
            r(method, path)
        assert e.value.status == 404


def test_the_default_shape_is_one_replica_filling_the_node(app):
    """With no shape given: one replica per node (here one), its runs in flight times its kernel
    threads the node's CPUs (this replica's: those Ray lets the process use)."""
    import os

    status = serve.status().applications["mnist"].deployments["mnist"]
    assert status.replica_states == {"RUNNING": 1}, status.replica_states
    stats = serve.get_app_handle("mnist").stats.remote().result()
    cpus = len(os.sched_getaffinity(0))
    assert (stats["runs_in_flight"], stats["kernel_threads"]) == (cpus, 1), stats
    assert stats["memory"]["arena_pool"]["capacity"] == cpus, stats["memory"]["arena_pool"]
