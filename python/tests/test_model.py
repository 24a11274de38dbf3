"""Loading, describing and running models: outputs byte-equal to upstream's on every fixture, by
every route (folder, one file, explicit paths, params as bytes or mapped), TVM's GraphModule calls,
DLPack in and out, variants sharing weights, prepared params, benchmark and profile."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, assert_outputs, load

import tvmrt

CPU_FIXTURES = [
    "mlp_b1",
    "mlp_b8",
    "mlp_unbound_b1",
    "mlp_unbound_b8",
    "convnet",
    "multi_io",
    "int8_dense",
    "mlp_fp16",
    "lstm_seq8",
    "lstm_seq16",
    "sort_ops",
    "mlp_link_params",
]


@pytest.mark.parametrize("name", CPU_FIXTURES)
def test_outputs_are_upstreams_on_every_fixture(name):
    f = load(name)
    m = tvmrt.Model(f.dir)
    assert [t.name for t in m.inputs] == list(f.inputs)
    assert_outputs(m.run(f.inputs), f.outputs, name)
    # Again, and by keywords: the same bytes.
    assert_outputs(m.run(**f.inputs), f.outputs, name + " (again)")


def test_one_library_file_carries_graph_and_weights():
    f = load("mlp_b1")
    m = tvmrt.Model(f.lib)
    assert m.inputs == [tvmrt.TensorInfo("data", (1, 1, 28, 28), "float32")]
    assert m.outputs == [tvmrt.TensorInfo("output_0", (1, 10), "float32")]
    assert [w.name for w in m.weights] and all(w.name != "data" for w in m.weights)
    assert_outputs(m.run(f.inputs), f.outputs, "one file")


def test_explicit_paths_bytes_and_graph_text():
    f = load("mlp_unbound_b1")
    graph = (f.dir / "graph.json").read_text()
    params = (f.dir / "params.bin").read_bytes()
    for m in (
        tvmrt.Model(lib=f.lib, graph=f.dir / "graph.json", params=f.dir / "params.bin"),
        tvmrt.Model(lib=str(f.lib), graph=graph, params=params),
        tvmrt.Model(f.dir, params=params),
    ):
        assert_outputs(m.run(f.inputs), f.outputs, "explicit")
        assert sorted(w.name for w in m.weights) == sorted(n for n in graph_inputs(graph) if n not in f.inputs)


def graph_inputs(text):
    g = json.loads(text)
    return [g["nodes"][n]["name"] for n in g["arg_nodes"]]


def test_the_tvm_graphmodule_calls():
    f = load("multi_io")
    m = tvmrt.Model(f.dir)
    for i, (k, v) in enumerate(f.inputs.items()):
        if i == 0:
            m.set_input(k, v)
        else:
            m.set_input(**{k: v})
    m.run()
    got = [m.get_output(i).numpy() for i in range(m.get_num_outputs())]
    assert_outputs(got, f.outputs, "GraphModule calls")
    assert m.get_num_inputs() == len(m.inputs) + len(m.weights)
    assert m.get_input_index("x") == 0 and m.get_input_index("nope") == -1
    shapes, dtypes = m.get_input_info()
    assert shapes["x"] == (2, 3) and dtypes["y"] == "int32"
    out = np.empty_like(f.outputs[0])
    m.get_output(0, out)
    assert out.tobytes() == f.outputs[0].tobytes()
    np.testing.assert_array_equal(m.get_input("x").numpy(), f.inputs["x"])
    t = m.get_output("output_2")
    assert t.dtype == "bool" and t.shape == (2, 3)


def test_inputs_from_dlpack_producers_and_outputs_exported():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)

    class Producer:
        """A DLPack producer that is not a numpy array (as a torch or JAX CPU tensor is)."""

        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    [y] = m.run(data=Producer(f.inputs["data"]))
    assert y.tobytes() == f.outputs[0].tobytes()
    # Outputs are numpy arrays (DLPack producers themselves); the GraphModule-style Tensor too.
    assert np.from_dlpack(y).tobytes() == y.tobytes()
    m.set_input("data", f.inputs["data"])
    m.run()
    assert np.from_dlpack(m.get_output(0)).tobytes() == y.tobytes()
    # A list is taken in the input's dtype; a non-contiguous array is made contiguous.
    [z] = m.run(data=f.inputs["data"].tolist())
    assert z.tobytes() == y.tobytes()
    wide = np.zeros((1, 1, 28, 56), np.float32)
    wide[..., ::2] = f.inputs["data"]
    [w] = m.run(data=wide[..., ::2])
    assert w.tobytes() == y.tobytes()


def test_outputs_are_copies_unless_asked():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    [a] = m.run(f.inputs)
    other = np.ones_like(f.inputs["data"])
    [b] = m.run(data=other)
    assert a.tobytes() == f.outputs[0].tobytes(), "a copy never changes under the caller"
    with m.session() as s:
        [v] = s.run(f.inputs, copy=False)
        assert not v.flags.owndata
        assert v.tobytes() == f.outputs[0].tobytes()
        s.run(data=other)
        assert v.tobytes() == b.tobytes(), "a view follows the session's next run"
        [v2] = s.run(f.inputs, copy=False)
    del m, s
    assert v2.tobytes() == f.outputs[0].tobytes(), "the view keeps its memory alive"


def test_variants_share_the_weights_loaded():
    b1, b8 = load("mlp_unbound_b1"), load("mlp_unbound_b8")
    m1 = tvmrt.Model(b1.dir)
    m8 = m1.variant(b8.dir)
    assert_outputs(m8.run(b8.inputs), b8.outputs, "batch 8 on batch 1's weights")
    assert_outputs(m1.run(b1.inputs), b1.outputs, "batch 1")
    u1, u8 = m1.memory_usage(), m8.memory_usage()
    assert u1["weights"] > 0
    assert u8["holder"]["weights_owned"] == 0, u8
    assert u8["holder"]["weights_shared"] == u1["weights"], (u1, u8)
    # A variant whose library embeds its own weights holds the other's instead.
    e1, e8 = load("mlp_b1"), load("mlp_b8")
    n1 = tvmrt.Model(e1.dir)
    n8 = n1.variant(e8.dir)
    assert_outputs(n8.run(e8.inputs), e8.outputs, "embedded batch 8 on batch 1's weights")
    assert n8.memory_usage()["holder"]["weights_owned"] == 0
    # Another network is no variant: the message says so, not which internal parameter differs first.
    with pytest.raises(tvmrt.InvalidValueError, match=r"not a build of the same network as .*mlp_b1.*Model of its own"):
        n1.variant(load("convnet").dir)
    with pytest.raises(tvmrt.InvalidValueError, match="Relay VM model is no variant"):
        n1.variant(FIXTURES / "vm" / "0.16" / "mlp_dyn")


def test_prepared_params_written_and_mapped(tmp_path):
    f = load("convnet")
    m = tvmrt.Model(f.dir)
    prepared = tmp_path / "convnet.prepared"
    m.prepare_params(prepared)
    assert [p.name for p in tmp_path.iterdir()] == ["convnet.prepared"], "no temporary file left"
    mapped = tvmrt.Model(f.dir, params=prepared, map_params=True)
    assert_outputs(mapped.run(f.inputs), f.outputs, "mapped prepared params")
    u = mapped.memory_usage()
    assert u["weights_mapped"] > 0, u
    assert u["holder"].get("prepared_params", "").startswith("used"), u


def test_executors_sharing_a_prepared_file_run_folded(tmp_path):
    """The executors a model runs on share the holder's mapped weights: they take the file's
    derived weights too, so each run is the folded one (not the weight-only operators again)."""
    f = load("mlp_unbound_b1")
    prepared = tmp_path / "mlp.prepared"
    tvmrt.Model(f.dir).prepare_params(prepared)
    mapped = tvmrt.Model(f.dir, params=prepared, map_params=True)
    assert_outputs(mapped.run(f.inputs), f.outputs, "prepared params, run by a sharing executor")
    u = mapped.memory_usage()
    assert u["holder"]["ops_folded"] > 0, u
    # The runs' arenas are the folded layout's, as the holder's: unfolded they would also hold
    # what the weight-only operators compute (about 400 kB here, against under 1 kB).
    assert u["arena_pool"]["arena_bytes"] == u["holder"]["activation_arena"], u


def test_benchmark_returns_figures():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    r = m.benchmark(repeat=4, number=3, **f.inputs)
    assert len(r.results) == 4 and all(x > 0 for x in r.results)
    assert r.min <= r.median <= r.max and r.std >= 0
    assert set(r.as_dict()) == {"results", "mean", "median", "std", "min", "max"}
    e2e = m.benchmark(repeat=2, number=2, end_to_end=True, **f.inputs)
    assert len(e2e.results) == 2 and e2e.mean > 0
    assert "mean (ms)" in repr(r)


def test_profile_returns_upstreams_report():
    f = load("convnet")
    m = tvmrt.Model(f.dir)
    report = m.profile(f.inputs)
    names = [c["Name"] for c in report.calls]
    assert any("conv2d" in n for n in names), names
    assert all(c["Duration (us)"] > 0 for c in report.calls)
    assert "cpu0" in report.device_metrics
    table = report.table()
    assert "Duration (us)" in table and "conv2d" in table
    assert report.csv().splitlines()[0].startswith("Argument Shapes") or "Name" in report.csv().splitlines()[0]
    again = tvmrt.Report.from_json(report.json())
    assert [c["Name"] for c in again.calls] == names
    # The thread's current inputs when none are given.
    m.set_input(**f.inputs)
    assert len(m.profile().calls) == len(report.calls)
    # The profile ran on a debug executor sharing the weights: the model's outputs are unchanged.
    assert_outputs(m.run(f.inputs), f.outputs, "after profile")


def test_a_folder_copied_elsewhere_runs(tmp_path):
    f = load("mlp_unbound_b1")
    dst = tmp_path / "model"
    shutil.copytree(f.dir, dst)
    m = tvmrt.Model(dst)
    assert_outputs(m.run(f.inputs), f.outputs, "copied folder")
    assert tvmrt.__version__.count(".") == 2
    assert FIXTURES.is_dir()


def test_one_prepared_file_for_two_builds(tmp_path):
    b1, b8 = load("mlp_unbound_b1"), load("mlp_unbound_b8")
    path = tmp_path / "mlp.prepared"
    tvmrt.Model(b1.dir).prepare_params(path)
    tvmrt.Model(b8.dir, params=path).prepare_params(path)
    m1 = tvmrt.Model(b1.dir, params=path, map_params=True)
    m8 = tvmrt.Model(b8.dir, params=path, map_params=True, pool_with=m1)
    for m, f in ((m1, b1), (m8, b8)):
        assert_outputs(m.run(f.inputs), f.outputs, f.name)
        u = m.memory_usage()
        assert u["holder"]["prepared_params"] == "used", u
        assert u["weights_mapped"] > 0 and u["holder"]["weights_owned"] == 0, u
    # One pool for both builds: each build's weights holder and the executor this thread ran.
    assert m8.memory_usage()["arena_pool"]["members"] == 4, "one pool for both builds"


def test_a_closed_or_dropped_model_frees_its_memory():
    import gc
    import weakref

    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    m.run(f.inputs)
    with m.session() as s:
        s.run(f.inputs)
    ref = weakref.ref(m)
    del m, s
    assert ref() is None, "a model nobody holds is freed at once (no reference cycle)"
    gc.collect()
    m = tvmrt.Model(f.dir)
    m.close()
    with pytest.raises(tvmrt.TVMRTError):
        m.run(f.inputs)


def test_request_cost_reports_the_request_the_run_and_their_difference():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    c = m.request_cost(seconds=0.05, **f.inputs)
    assert set(c) == {"request", "run", "overhead"}
    assert c["request"] > 0 and c["run"] > 0
    assert c["overhead"] == pytest.approx(c["request"] - c["run"])
    with pytest.raises(tvmrt.InvalidValueError):
        m.request_cost(repeat=0, **f.inputs)


def test_run_into_writes_the_outputs_given():
    f = load("multi_io")
    m = tvmrt.Model(f.dir)
    outs = [t.empty() for t in m.outputs]
    got = m.run_into(outs, f.inputs)
    assert all(g is o for g, o in zip(got, outs))
    assert_outputs(outs, f.outputs, "run_into")
    # Every form run takes; each call writes the same arrays again.
    for o in outs:
        o.fill(0)
    m.run_into(outs, **f.inputs)
    assert_outputs(outs, f.outputs, "run_into by keyword")
    with pytest.raises(tvmrt.InvalidValueError, match=r"run_into takes a list of 7 output arrays"):
        m.run_into(outs[:-1], f.inputs)
    bad = list(outs)
    bad[0] = np.empty(outs[0].shape, "float64")
    said = r"output 'output_0' is float32\[2, 3\]: run_into takes a writable, C-contiguous numpy array"
    with pytest.raises(tvmrt.InvalidValueError, match=said):
        m.run_into(bad, f.inputs)
    bad[0] = np.empty(outs[0].shape, outs[0].dtype)
    bad[0].flags.writeable = False
    with pytest.raises(tvmrt.InvalidValueError, match="writable"):
        m.run_into(bad, f.inputs)


def test_the_compiled_call_and_ctypes_give_the_same_bytes(monkeypatch):
    from tvmrt import _ffi

    f = load("multi_io")
    fast = tvmrt.Model(f.dir)
    monkeypatch.setattr(_ffi, "_fast", None)
    slow = tvmrt.Model(f.dir)
    assert slow._thread_session()._ex().fused((0,))[1] is None
    for a, b in zip(fast.run(f.inputs), slow.run(f.inputs)):
        assert a.tobytes() == b.tobytes()
    assert_outputs(slow.run(f.inputs), f.outputs, "by ctypes")


def test_the_plainest_request_and_everything_else_give_the_same_answers():
    f = load("multi_io")
    m = tvmrt.Model(f.dir)
    want = m.run(f.inputs)
    names = list(f.inputs)
    # Keywords in another order, a dict, ONNX Runtime's form: the same outputs.
    for got in (
        m.run(**{k: f.inputs[k] for k in reversed(names)}),
        m.run(dict(f.inputs)),
        m.run(None, dict(f.inputs)),
        m.run_into([t.empty() for t in m.outputs], **f.inputs),
    ):
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    # Arrays the compiled call cannot take as they are go the general way, to the same answer:
    # a strided view, a read-only array, another dtype with cast=True.
    x = names[0]
    strided = np.ascontiguousarray(np.repeat(f.inputs[x][..., None], 2, axis=-1))[..., 0]
    assert not strided.flags.c_contiguous
    frozen = f.inputs[x].copy()
    frozen.flags.writeable = False
    for v in (strided, frozen):
        got = m.run(**{**f.inputs, x: v})
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    # An input left out keeps what this thread set before; a fresh thread has none.
    partial = m.run(**{k: f.inputs[k] for k in names[1:]})
    assert [g.tobytes() for g in partial] == [w.tobytes() for w in want]
    fresh = tvmrt.Model(f.dir)
    with pytest.raises(tvmrt.InvalidKeyError, match="inputs never set"):
        fresh.run(**{k: f.inputs[k] for k in names[1:]})
    # A read-only output array is refused, never written.
    outs = [t.empty() for t in m.outputs]
    outs[0].flags.writeable = False
    with pytest.raises(tvmrt.InvalidValueError, match="writable"):
        m.run_into(outs, **f.inputs)


def test_a_compiled_call_module_that_does_not_load_is_an_error_where_required(tmp_path):
    """A wheel whose tvmrt._fast is for another machine imports as if it had none: the package
    then runs on ctypes, which is right for a source build without Python's headers and wrong for a
    release wheel. TVMRT_REQUIRE_FAST_CALLS=1 makes that an ImportError naming the module."""
    import os
    import subprocess
    import sys

    import tvmrt as pkg

    copy = tmp_path / "tvmrt"
    shutil.copytree(os.path.dirname(pkg.__file__), copy, ignore=shutil.ignore_patterns("_fast*.so", "__pycache__"))
    # Another machine's module: an ELF header for aarch64 on x86_64 (and x86_64 elsewhere).
    machine = 62 if os.uname().machine == "aarch64" else 183
    (copy / "_fast.abi3.so").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(44))
    probe = "from tvmrt import _ffi; print(_ffi._fast is None)"

    def run(require: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(tmp_path), "TVMRT_REQUIRE_FAST_CALLS": require}
        env.pop("TVMRT_NO_FAST_CALLS", None)
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)

    quiet = run("0")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "True", quiet.stderr
    loud = run("1")
    assert loud.returncode != 0
    assert "tvmrt._fast" in loud.stderr and "TVMRT_REQUIRE_FAST_CALLS" in loud.stderr, loud.stderr
