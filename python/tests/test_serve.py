"""The Ray Serve deployment on one local Ray instance, every address on 127.0.0.1: requests of
random sizes from 8 client threads, by handle and by HTTP (JSON and .npy), each answer checked
against a direct run of the same rows on the build that served them; malformed requests among
good ones; a replica killed while requests are in flight. Needs ``tvmrt[serve]`` (skipped without
Ray)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
from conftest import FIXTURES

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
requests = pytest.importorskip("requests")

import tvmrt  # noqa: E402
import tvmrt.serve as tserve  # noqa: E402

B1, B8 = FIXTURES / "mlp_unbound_b1", FIXTURES / "mlp_unbound_b8"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    prepared = tmp_path_factory.mktemp("prepared")
    port = free_port()
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(
        tserve.deployment([str(B1), str(B8)], name="mlp", num_replicas=2, concurrency=2, prepared_dir=str(prepared)),
        name="mlp",
        route_prefix="/mlp",
    )
    yield handle, f"http://127.0.0.1:{port}/mlp", prepared
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def direct():
    """The builds run here, directly: what every served row is compared with."""
    b1 = tvmrt.Model(B1, concurrency=1)
    return {"mlp_unbound_b1": b1, "mlp_unbound_b8": b1.variant(B8)}


def check_answer(direct, x, outputs, runs):
    """Each run's rows equal the same rows run directly on that build at the same place in the
    batch (padding changes no row), and the batch-1 run within the model's tolerance."""
    assert sum(r[2] for r in runs) == len(x), runs
    at = 0
    for build, offset, take, batch in runs:
        m = direct[build]
        feed = np.zeros((batch, *x.shape[1:]), x.dtype)
        feed[offset : offset + take] = x[at : at + take]
        [want] = m.run(data=feed)
        assert outputs[at : at + take].tobytes() == want[offset : offset + take].tobytes(), (build, offset, take)
        at += take
    single = np.concatenate([direct["mlp_unbound_b1"].run(data=x[i : i + 1])[0] for i in range(len(x))])
    np.testing.assert_allclose(outputs, single, rtol=1e-5, atol=1e-6)


def test_a_batch_waits_to_fill_only_where_a_larger_build_costs_less_per_row():
    from tvmrt.serve.server import Build, _fill_wait

    def builds(*costs: tuple[int, float]) -> list[Build]:
        return [Build(f"b{batch}", None, batch, {}, cost) for batch, cost in costs]  # type: ignore[arg-type]

    # A wide MLP: the batch-8 build costs a third per row, so a batch waits up to one batch-1 run.
    assert _fill_wait(builds((1, 0.008), (8, 0.020))) == 0.008
    # ResNet-18 on this CPU: more per row at batch 8; gathering rows saves nothing.
    assert _fill_wait(builds((1, 0.058), (8, 0.627))) == 0.0
    # Less per row, but not by a fifth: not worth a request's wait.
    assert _fill_wait(builds((1, 0.010), (8, 0.070))) == 0.0
    assert _fill_wait(builds((1, 0.010), (4, 0.030), (8, 0.090))) == 0.010
    assert _fill_wait(builds((1, 0.010))) == 0.0


def test_requests_of_random_sizes_by_handle_and_http(app, direct):
    handle, url, prepared = app
    rng = np.random.default_rng(11)
    jobs = []
    for i in range(240):
        rows = int(rng.integers(1, 9))
        jobs.append((("handle", "json", "npy")[i % 3], rng.standard_normal((rows, 1, 28, 28)).astype("float32")))
    results: list = [None] * len(jobs)
    errors: list = []

    def client(k):
        session = requests.Session()
        for j in range(k, len(jobs), 8):
            how, x = jobs[j]
            try:
                if how == "handle":
                    a = handle.infer.remote({"data": x}, details=True).result()
                    results[j] = (a.outputs[0], a.runs)
                elif how == "json":
                    r = session.post(url, json={"inputs": {"data": x.tolist()}}, timeout=60)
                    assert r.status_code == 200, r.text
                    doc = r.json()
                    results[j] = (np.asarray(doc["outputs"][0], np.float32), [tuple(r) for r in doc["runs"]])
                else:
                    buf = io.BytesIO()
                    np.save(buf, x)
                    npy = {"content-type": "application/x-npy"}
                    r = session.post(url, data=buf.getvalue(), headers=npy, timeout=60)
                    assert r.status_code == 200, r.text
                    assert r.headers["content-type"] == "application/x-npy"
                    runs = [tuple(x) for x in json.loads(r.headers["x-tvmrt-runs"])]
                    results[j] = (np.load(io.BytesIO(r.content)), runs)
            except Exception as e:
                errors.append((j, how, e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert all(r is not None for r in results), "a request was lost"
    for (how, x), (out, runs) in zip(jobs, results):
        if how == "json":
            # JSON carries float32 through decimal text: the values round-trip exactly.
            out = out.astype(np.float32)
        check_answer(direct, x, out, runs)
    used = {r[0] for _, runs in results for r in runs}
    assert used == {"mlp_unbound_b1", "mlp_unbound_b8"}, used
    # Both replicas mapped the node's one prepared file, made once.
    made = list(prepared.rglob("made.log"))
    assert len(made) == 1 and len(made[0].read_text().splitlines()) == 1, [m.read_text() for m in made]


def npy_bytes(x) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x)
    return buf.getvalue()


def npy_header_only(shape, dtype="<f4") -> bytes:
    """An .npy whose header declares `shape` and that holds no data."""
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


NPY_TYPE = {"content-type": "application/x-npy"}
NPZ_TYPE = {"content-type": "application/x-npz"}


def bad_requests():
    """(what, method, body or JSON, headers, expected status, text the message holds)."""
    z = np.zeros
    return [
        ("unknown input", {"inputs": {"nope": [[1.0]]}}, None, 400, "unknown nope"),
        ("a row of another shape", {"inputs": {"data": [[1.0, 2.0]]}}, None, 400, "takes float32 rows of"),
        ("text for numbers", {"inputs": {"data": "text"}}, None, 400, "data"),
        ("more rows than a request may have", {"inputs": {"data": z((65, 1, 28, 28)).tolist()}}, None, 413, "64"),
        ("no inputs", {"no inputs": 1}, None, 400, "inputs"),
        # Smaller than the builds on an axis they do not vary: not padded, refused.
        ("a 28x27 image", {"inputs": {"data": z((1, 1, 28, 27)).tolist()}}, None, 400, "[1, 28, 28]"),
        ("not JSON", b"{not json", None, 400, "not JSON"),
        ("JSON nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, None, 400, "nested too deeply"),
        ("float64 .npy", npy_bytes(z((2, 1, 28, 28), np.float64)), NPY_TYPE, 400, "float32"),
        ("an .npy declaring a huge shape", npy_header_only((10**9, 1, 28, 28)), NPY_TYPE, 413, "rows"),
        ("an .npy holding less than it declares", npy_header_only((2, 1, 28, 28)), NPY_TYPE, 400, "declares"),
        ("an .npz that is not a zip", b"PK\x03\x04 not really", NPZ_TYPE, 400, "not an .npz"),
        # 20 MB of zeros in a few kB: refused from its member's header, never inflated.
        ("an .npz bomb", npz_bytes(data=z((6400, 1, 28, 28), np.float32)), NPZ_TYPE, 413, "rows"),
        ("an .npz of another input", npz_bytes(other=z((1, 1, 28, 28), np.float32)), NPZ_TYPE, 400, "other"),
    ]


def replica_peak_rss(handle, pid):
    """The peak resident memory of replica `pid` (kB), asked until that replica answers."""
    for _ in range(50):
        s = handle.stats.remote().result()
        if s["pid"] == pid:
            break
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])


def test_a_bad_request_fails_alone(app, direct):
    handle, url, _ = app
    rng = np.random.default_rng(5)
    good = [rng.standard_normal((int(rng.integers(1, 9)), 1, 28, 28)).astype("float32") for _ in range(24)]
    pids = replica_pids(handle)
    peaks = {p: replica_peak_rss(handle, p) for p in pids}
    answers: dict[int, tuple] = {}
    got: dict[str, tuple[int, str]] = {}

    def good_client(k):
        for j in range(k, len(good), 4):
            a = handle.infer.remote({"data": good[j]}, details=True).result()
            answers[j] = (a.outputs[0], a.runs)

    def bad_client():
        for what, body, headers, _, _ in bad_requests():
            if isinstance(body, dict):
                r = requests.post(url, json=body, timeout=60)
            else:
                r = requests.post(url, data=body, headers=headers or {}, timeout=60)
            got[what] = (r.status_code, r.json().get("error", "") if r.content else "")

    threads = [threading.Thread(target=good_client, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=bad_client))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for what, _, _, status, text in bad_requests():
        assert got[what][0] == status and text in got[what][1], (what, got[what])
    assert len(answers) == len(good)
    for j, x in enumerate(good):
        check_answer(direct, x, *answers[j])
    with pytest.raises(Exception, match="unknown nope"):
        handle.infer.remote({"nope": good[0]}).result()
    # The bomb was never inflated: no replica's peak memory grew by its 20 MB.
    for p, before in peaks.items():
        assert replica_peak_rss(handle, p) - before < 15_000, "a replica inflated a refused body"


def test_requests_larger_than_a_batch_are_served(app, direct):
    handle, url, _ = app
    x = np.random.default_rng(9).standard_normal((21, 1, 28, 28)).astype("float32")
    a = handle.infer.remote({"data": x}, details=True).result()
    check_answer(direct, x, a.outputs[0], a.runs)
    r = requests.post(url, json={"inputs": {"data": x.tolist()}}, timeout=60)
    assert r.status_code == 200, r.text


def replica_pids(handle, want=2, within=60):
    pids: set[int] = set()
    deadline = time.time() + within
    while len(pids) < want and time.time() < deadline:
        pids.add(handle.stats.remote().result()["pid"])
    assert len(pids) == want, pids
    return pids


def test_a_replica_killed_in_flight_is_replaced_and_nothing_is_dropped(app):
    handle = app[0]
    victim = sorted(replica_pids(handle))[0]
    x = np.random.default_rng(1).standard_normal((2, 1, 28, 28)).astype("float32")
    sent = answered = failed = 0
    lock = threading.Lock()
    stop = time.time() + 6

    def client():
        nonlocal sent, answered, failed
        while time.time() < stop:
            with lock:
                sent += 1
            try:
                handle.infer.remote({"data": x}).result(timeout_s=60)
                with lock:
                    answered += 1
            except Exception:  # the client sees the error: counted
                with lock:
                    failed += 1

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join()
    assert sent == answered + failed, (sent, answered, failed)
    assert answered > 0
    # Serve replaces the replica: two again, the killed one not among them, both answering.
    deadline = time.time() + 90
    while True:
        try:
            pids = replica_pids(handle, within=10)
            if victim not in pids:
                break
        except AssertionError:
            pass
        assert time.time() < deadline, "the killed replica was not replaced"
        time.sleep(1)
    assert handle.infer.remote({"data": x}).result()[0].shape == (2, 10)
    print(f"in flight when killed: {sent} sent, {answered} answered, {failed} failed (seen by the client)")


def test_health_metrics_and_stats(app):
    handle, _, prepared = app
    s = handle.stats.remote().result()
    assert s["prepared"] and s["prepared"].startswith(str(prepared))
    assert s["builds"] == {"mlp_unbound_b1": 1, "mlp_unbound_b8": 8}
    mem = s["memory"]
    assert mem["weights_mapped"] > 0, mem
    assert mem["arena_pool"]["members"] >= 2, mem["arena_pool"]
    st = serve.status().applications["mlp"]
    assert st.status == "RUNNING", st


def test_a_relay_vm_model_serves_any_batch_as_it_is(app):
    """A VM model (relay.vm.compile): no builds, no padding; every request runs at its own size."""
    vm_dir = FIXTURES / "vm" / "0.19" / "mlp_dyn"
    app_ = tserve.deployment(str(vm_dir), name="vm", concurrency=2, ray_actor_options={"num_cpus": 0})
    handle = serve.run(app_, name="vm", route_prefix="/vm")
    url = app[1].rsplit("/", 1)[0] + "/vm"
    direct = tvmrt.Model(vm_dir)
    rng = np.random.default_rng(4)
    for rows in (1, 3, 17, 40):
        x = rng.standard_normal((rows, 16)).astype("float32")
        want = direct.run(x)
        got = handle.infer.remote({"data": x}).result()
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want], rows
        r = requests.post(url, json={"inputs": {"data": x.tolist()}}, timeout=60)
        assert r.status_code == 200, r.text
        np.testing.assert_array_equal(np.asarray(r.json()["outputs"][0], np.float32), want[0])
    r = requests.post(url, json={"inputs": {"data": "text"}}, timeout=60)
    assert r.status_code == 400
    assert handle.stats.remote().result()["builds"] == {"vm": 0}
    # The protocol's metadata: what the model.meta beside the executable records, outputs too.
    meta = requests.get(url + "/v2/models/vm", timeout=60).json()
    assert meta["inputs"] == [{"name": "data", "datatype": "FP32", "shape": [-1, 16]}]
    assert [(o["name"], o["shape"]) for o in meta["outputs"]] == [("output_0", [-1, 8]), ("output_1", [-1])]
    # Requests built against other shapes and dtypes are the client's mistake (400, the input
    # named), while others go on; never a crash of the replica.
    bad = [
        ("data", [], "FP32", [1.0]),
        ("data", [2, 0], "FP32", []),
        ("data", [2, 16], "INT32", [1] * 32),
        ("data", [2, 3, 16], "FP32", [0.5] * 96),
    ]
    for name, shape, datatype, data in bad:
        body = {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}
        r = requests.post(url + "/v2/models/vm/infer", json=body, timeout=60)
        assert r.status_code == 400 and "'data'" in r.json()["error"], (shape, datatype, r.text)
        assert len(handle.infer.remote({"data": np.ones((2, 16), "float32")}).result()) == 2
    # No rows is a shape the model takes: an answer of no rows.
    body = {"inputs": [{"name": "data", "shape": [0, 16], "datatype": "FP32", "data": []}]}
    r = requests.post(url + "/v2/models/vm/infer", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [0, 8], r.text
    serve.delete("vm")


def test_relax_models_serve_and_answer_as_their_compilers(app, tmp_path_factory):
    """Relax executables (TVM 0.19, 0.21, 0.27): the protocol's metadata from the executable's own
    checks (a symbolic batch as -1), requests at any batch its function takes, every fixture case
    answered as that version's runtime answered it."""
    relax = FIXTURES / "relax"
    url_base = app[1].rsplit("/", 1)[0]
    for version in ("0.19", "0.21", "0.27"):
        d = relax / version / "mlp_bound"
        name = "relax" + version.replace(".", "")
        handle = serve.run(
            tserve.deployment(str(d), name=name, concurrency=2, ray_actor_options={"num_cpus": 0}),
            name=name,
            route_prefix="/" + name,
        )
        url = f"{url_base}/{name}"
        meta = requests.get(f"{url}/v2/models/{name}", timeout=60).json()
        assert meta["platform"] == "tvm_relax_vm", meta
        assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}], meta
        direct = tvmrt.Model(d)
        for case in (d / "manifest.txt").read_text().split("case ")[1:]:
            lines = [line.split() for line in case.splitlines()[1:]]
            x_line = next(t for t in lines if t[0] == "input")
            out_line = next(t for t in lines if t[0] == "output")
            shape = [int(v) for v in x_line[4 : 4 + int(x_line[3])]]
            x = np.fromfile(d / x_line[-1], dtype="float32").reshape(shape)
            want = np.fromfile(d / out_line[-1], dtype="float32")
            got = handle.infer.remote({"x": x}).result()
            assert got[0].tobytes() == want.tobytes(), (version, shape)
            body = {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": x.ravel().tolist()}]}
            r = requests.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)
            assert r.status_code == 200, r.text
            answer = np.asarray(r.json()["outputs"][0]["data"], np.float32)
            np.testing.assert_array_equal(answer, direct.run(x)[0].ravel())
        # A request of another width is the client's mistake, named.
        body = {"inputs": [{"name": "x", "shape": [2, 15], "datatype": "FP32", "data": [0.5] * 30}]}
        r = requests.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)
        assert r.status_code == 400 and "'x'" in r.json()["error"], r.text
        serve.delete(name)
    # An nn.Module-style export: its weights are parameters, bound once from an .npz (params=);
    # requests and the metadata carry the data alone.
    d = relax / "0.27" / "mlp_args"
    lines = [line.split() for line in (d / "manifest.txt").read_text().splitlines()]
    arrays = {}
    for t in lines[: next(i for i, t in enumerate(lines) if t[0] == "output")]:
        if t[0] == "input":
            arrays[t[1]] = np.fromfile(d / t[-1], dtype=t[2]).reshape([int(v) for v in t[4 : 4 + int(t[3])]])
    weights = tmp_path_factory.mktemp("relax") / "w.npz"
    np.savez(weights, **{k: v for k, v in arrays.items() if k != "x"})
    out_line = next(t for t in lines if t[0] == "output")
    want = np.fromfile(d / out_line[-1], dtype="float32")
    handle = serve.run(
        tserve.deployment(str(d), name="relax_args", params=str(weights), ray_actor_options={"num_cpus": 0}),
        name="relax_args",
        route_prefix="/relax_args",
    )
    meta = requests.get(f"{url_base}/relax_args/v2/models/relax_args", timeout=60).json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}], meta
    assert handle.infer.remote({"x": arrays["x"]}).result()[0].tobytes() == want.tobytes()
    serve.delete("relax_args")


def test_every_relax_fixture_answers_as_its_compiler(app):
    """Every Relax fixture of TVM 0.19 (the classic ABI) and 0.27 (tvm-ffi) deployed as it is:
    each case answered byte for byte as that version's own runtime answered it (tuples flattened
    in order), by a Python handle."""
    from test_vm import read_cases

    for version in ("0.19", "0.27"):
        for d in sorted((FIXTURES / "relax" / version).iterdir()):
            _, cases = read_cases(d)
            name = f"rx{version.replace('.', '')}{d.name}"
            handle = serve.run(
                tserve.deployment(str(d), name=name, concurrency=1, ray_actor_options={"num_cpus": 0}),
                name=name,
                route_prefix="/" + name,
            )
            for feed, want, _ in cases:
                got = handle.infer.remote(feed).result()
                assert [(g.dtype, g.shape, g.tobytes()) for g in got] == [
                    (w.dtype, w.shape, w.tobytes()) for w in want
                ], (version, d.name)
            serve.delete(name)


def test_relax_requests_batch_along_the_symbolic_batch(app):
    """A Relax function whose inputs and outputs follow one symbolic batch: requests in flight
    together run as one batch (their rows stacked), each answered with its own rows, as a run of
    its own answers; a model whose outputs do not follow its batch runs each request alone."""
    from tvmrt.serve.server import _symbolic_rows

    relax = FIXTURES / "relax"
    assert _symbolic_rows(tvmrt.Model(relax / "0.27" / "mlp_bound")) == {"x": (16,)}
    assert _symbolic_rows(tvmrt.Model(relax / "0.27" / "runtime_ops")) is None  # nonzero's rows are data
    assert _symbolic_rows(tvmrt.Model(relax / "0.27" / "control")) is None  # a flag without rows
    d = relax / "0.27" / "mlp_bound"
    handle = serve.run(
        tserve.deployment(
            str(d),
            name="relaxb",
            concurrency=1,
            max_batch_size=8,
            batch_wait_timeout_s=0.05,
            ray_actor_options={"num_cpus": 0},
        ),
        name="relaxb",
        route_prefix="/relaxb",
    )
    # The executable's constants come from one file every replica of the node maps.
    prepared = handle.stats.remote().result()["prepared"]
    assert prepared and prepared.endswith(".vmconst"), prepared
    direct = tvmrt.Model(d)
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal((rows, 16)).astype("float32") for rows in (1, 2, 3, 1, 2, 1, 20)]
    answers = [f.result() for f in [handle.infer.remote({"x": x}, details=True) for x in xs]]
    for x, a in zip(xs, answers):
        assert a.outputs[0].tobytes() == direct.run(x)[0].tobytes()
        assert [r[2] for r in a.runs] == [x.shape[0]]
    assert any(a.runs[0][3] > a.runs[0][2] for a in answers[:-1]), [a.runs for a in answers]
    assert answers[-1].runs == [("vm", 0, 20, 20)]  # more rows than a batch: alone
    url = app[1].rsplit("/", 1)[0] + "/relaxb/v2/models/relaxb/infer"
    body = {"inputs": [{"name": "x", "shape": [2, 15], "datatype": "FP32", "data": [0.5] * 30}]}
    r = requests.post(url, json=body, timeout=60)
    assert r.status_code == 400 and "'x'" in r.json()["error"], r.text
    serve.delete("relaxb")


def test_an_aot_model_serves_its_shape_and_describes_itself(app):
    """An AOT artefact (Executor("aot")): served as it is built, its inputs and outputs in the
    protocol's metadata from the library's own, a request of another shape the client's mistake."""
    aot_dir = FIXTURES / "aot" / "0.16" / "convnet_usmp"
    app_ = tserve.deployment(str(aot_dir), name="aot", concurrency=2, ray_actor_options={"num_cpus": 0})
    handle = serve.run(app_, name="aot", route_prefix="/aot")
    url = app[1].rsplit("/", 1)[0] + "/aot"
    direct = tvmrt.Model(aot_dir)
    x = np.random.default_rng(5).standard_normal((1, 3, 12, 12)).astype("float32")
    want = direct.run(x)
    got = handle.infer.remote({"input_1": x}).result()
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    meta = requests.get(url + "/v2/models/aot", timeout=60).json()
    assert meta["platform"] == "tvm_aot", meta
    assert meta["inputs"] == [{"name": "input_1", "datatype": "FP32", "shape": [1, 3, 12, 12]}]
    assert [o["shape"] for o in meta["outputs"]] == [[1, 10], [1, 10]]
    body = {"inputs": [{"name": "input_1", "shape": [1, 3, 12, 12], "datatype": "FP32", "data": x.ravel().tolist()}]}
    r = requests.post(url + "/v2/models/aot/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.asarray(r.json()["outputs"][1]["data"], np.float32), want[1].ravel())
    body["inputs"][0]["shape"], body["inputs"][0]["data"] = [2, 3, 12, 12], x.ravel().tolist() * 2
    r = requests.post(url + "/v2/models/aot/infer", json=body, timeout=60)
    assert r.status_code == 400 and "input_1" in r.json()["error"], r.text
    serve.delete("aot")


def test_a_relay_vm_model_with_no_types_says_so(app, tmp_path):
    """A VM executable records no input types: without input_specs or a .meta, the protocol's
    metadata is refused (never a shape that is not the model's) and requests still run."""
    bare = tmp_path / "bare_vm"
    bare.mkdir()
    (bare / "vm.so").write_bytes((FIXTURES / "vm" / "0.16" / "mlp_dyn" / "vm.so").read_bytes())
    handle = serve.run(
        tserve.deployment(str(bare), name="bare", ray_actor_options={"num_cpus": 0}), name="bare", route_prefix="/bare"
    )
    url = app[1].rsplit("/", 1)[0] + "/bare"
    r = requests.get(url + "/v2/models/bare", timeout=60)
    assert r.status_code == 400 and "input_specs=" in r.json()["error"], r.text
    # Another rank or dtype is the kernels' to refuse, and still the client's mistake: a 400.
    for shape, datatype, data in (([2, 3, 16], "FP32", [0.5] * 96), ([2, 16], "INT32", [1] * 32)):
        body = {"inputs": [{"name": "data", "shape": shape, "datatype": datatype, "data": data}]}
        r = requests.post(url + "/v2/models/bare/infer", json=body, timeout=60)
        assert r.status_code == 400 and "input 'data'" in r.json()["error"], r.text
    assert len(handle.infer.remote({"data": np.ones((2, 16), "float32")}).result()) == 2
    serve.delete("bare")
