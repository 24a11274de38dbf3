"""Relax VM models (TVM 0.19 to 0.27, all three ABI generations) through tvmrt.Model: inputs in
order, by name or as a mapping, outputs byte-equal to each version's own runtime, tuples
flattened or nested; the inputs described from the executable's own checks; one model from many
threads; wrong inputs named."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from conftest import FIXTURES
from test_vm import read_cases, structure

import tvmrt
from tvmrt import _ffi

RELAX = FIXTURES / "relax"
VERSIONS = ["0.19", "0.21", "0.25", "0.26", "0.27"]
MODELS = ["mlp_args", "mlp_bound", "conv", "tuple_mixed", "parallel", "control", "runtime_ops"]
DIRS = [RELAX / v / m for v in VERSIONS for m in MODELS]


@pytest.mark.parametrize("d", DIRS, ids=lambda d: f"{d.parent.name}-{d.name}")
def test_every_version_byte_equal(d):
    params, cases = read_cases(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the executable describes its inputs: no unchecked-inputs warning
        m = tvmrt.Model(d)
    assert isinstance(m, tvmrt.VMModel) and m.platform == "tvm_relax_vm"
    assert m.params == params and m.described
    for feed, want, nesting in cases:
        got = m.run(feed)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert [g.shape for g in got] == [w.shape for w in want]
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want], d
        assert structure(m.run(**feed, nested=True)) == nesting
        assert [g.tobytes() for g in m.run(*[feed[p] for p in params])] == [w.tobytes() for w in want]


@pytest.mark.parametrize("d", DIRS, ids=lambda d: f"{d.parent.name}-{d.name}")
def test_quick_requests_answer_as_the_general_path(d):
    """Inputs in order as numpy arrays take one call from C (tvmrt._fast, where it loads) once a
    request of their shapes has run; the answers stay those of the version's own runtime."""
    params, cases = read_cases(d)
    m = tvmrt.Model(d)
    for feed, want, _ in cases:
        for _ in range(3):
            got = m.run(*[feed[p] for p in params])
            assert [(g.dtype, g.shape, g.tobytes()) for g in got] == [(w.dtype, w.shape, w.tobytes()) for w in want], d
    learned = [q for q in m._vm().quick.values() if q is not None]
    assert bool(learned) == (_ffi._fast is not None)


def test_quick_requests_take_what_the_plan_does_not_fit_the_general_way():
    """An output whose shape follows the data (nonzero, unique) differs at the same input shape:
    the answer is read the general way and that shape's quick request dropped. Another dtype, a
    non-contiguous array and bound parameters keep their general behaviour."""
    m = tvmrt.Model(RELAX / "0.27" / "runtime_ops")
    rng = np.random.default_rng(0)
    counts = set()
    for _ in range(8):
        x = rng.random(8, dtype="float32")
        counts.add(int((x > 0.5).sum()))
        got = m.run(x)
        want = m.run({"x": x})  # a mapping: the general path
        assert [(g.dtype, g.shape, g.tobytes()) for g in got] == [(w.dtype, w.shape, w.tobytes()) for w in want]
    assert len(counts) > 1 and m._vm().quick[((8,),)] is None

    d = RELAX / "0.27" / "mlp_args"
    params, cases = read_cases(d)
    feed, want, _ = cases[0]
    m = tvmrt.Model(d)
    ordered = [feed[p] for p in params]
    for _ in range(2):
        assert m.run(*ordered)[0].tobytes() == want[0].tobytes()
    with pytest.raises(tvmrt.InvalidTypeError, match="float64"):
        m.run(ordered[0].astype("float64"), *ordered[1:])
    fortran = [np.asfortranarray(a) for a in ordered]
    assert m.run(*fortran)[0].tobytes() == want[0].tobytes()
    bound = tvmrt.Model(d, params={p: feed[p] for p in ("w1", "b1", "w2")})
    for _ in range(3):
        assert bound.run(feed["x"])[0].tobytes() == want[0].tobytes()
    assert any(q is not None for q in bound._vm().quick.values()) == (_ffi._fast is not None)


def test_inputs_described_from_the_executable():
    m = tvmrt.Model(RELAX / "0.27" / "mlp_args")
    assert [(i.name, i.shape, i.dtype) for i in m.inputs] == [
        ("x", (-1, 16), "float32"),
        ("w1", (16, 32), "float32"),
        ("b1", (32,), "float32"),
        ("w2", (32, 8), "float32"),
    ]
    c = tvmrt.Model(RELAX / "0.27" / "control")
    assert [(i.name, i.shape, i.dtype) for i in c.inputs] == [("x", (-1,), "float32"), ("flag", (), "bool")]


def test_wrong_inputs_are_named():
    d = RELAX / "0.26" / "mlp_args"
    _, cases = read_cases(d)
    m = tvmrt.Model(d)
    feed = dict(cases[0][0])
    feed["w1"] = np.zeros((8, 8), "float32")
    with pytest.raises(tvmrt.InvalidValueError, match="w1"):
        m.run(feed)
    renamed = {("y" if k == "x" else k): v for k, v in cases[0][0].items()}
    with pytest.raises(tvmrt.InvalidKeyError, match="no input named 'y'"):
        m.run(renamed)


def test_one_model_from_threads():
    d = RELAX / "0.27" / "parallel"
    _, cases = read_cases(d)
    m = tvmrt.Model(d)
    failures: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(100):
                feed, want, _ = cases[(t + i) % len(cases)]
                got = m.run(feed)
                assert got[0].tobytes() == want[0].tobytes()
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


@pytest.mark.parametrize("version", ["0.19", "0.21", "0.27"])
def test_profile(version: str) -> None:
    """Model.profile on a Relax model: each kernel and builtin call of one run, by name, as
    upstream's profiler VM reports them; the model still runs right after."""
    d = RELAX / version / "mlp_args"
    _, cases = read_cases(d)
    m = tvmrt.Model(d)
    feed, want, _ = cases[0]
    report = m.profile(feed)
    names = [c["Name"] for c in report.calls]
    kernels = [n for n in names if not n.startswith("vm.builtin.")]
    assert {"matmul", "add", "relu", "matmul1"} <= set(kernels), names
    assert "vm.builtin.alloc_storage" in names, names
    assert m.run(feed)[0].tobytes() == want[0].tobytes()


def test_num_threads() -> None:
    """num_threads= sets the VM's kernel threads (Serve's replicas pass it); answers unchanged."""
    d = RELAX / "0.27" / "parallel"
    _, cases = read_cases(d)
    for n in (1, 2):
        m = tvmrt.Model(d, num_threads=n)
        for feed, want, _ in cases:
            assert m.run(feed)[0].tobytes() == want[0].tobytes()


def test_constants_mapped_from_one_file(tmp_path, monkeypatch) -> None:
    """map_constants=True: the weights from one aligned file every process maps (written by the
    first load, used by the next), answers unchanged; a damaged file is written again."""
    monkeypatch.setenv("TVMRT_PREPARED_DIR", str(tmp_path / "cache"))
    for version in ("0.19", "0.27"):
        d = RELAX / version / "mlp_bound"
        _, cases = read_cases(d)
        first = tvmrt.Model(d, map_constants=True)
        assert first.made_constants_file and first.constants_file is not None and first.constants_file.is_file()
        again = tvmrt.Model(d, map_constants=True)
        assert not again.made_constants_file and again.constants_file == first.constants_file
        for m in (first, again):
            for feed, want, _ in cases:
                assert m.run(feed)[0].tobytes() == want[0].tobytes()
        data = bytearray(first.constants_file.read_bytes())
        data[len(data) - 100] ^= 0xFF
        first.constants_file.write_bytes(bytes(data))
        third = tvmrt.Model(d, map_constants=True)
        assert third.made_constants_file
        assert third.run(cases[0][0])[0].tobytes() == cases[0][1][0].tobytes()
        # Graph models' spelling, map_params=True, maps the same file.
        fourth = tvmrt.Model(d, map_params=True)
        assert fourth.constants_file == first.constants_file and not fourth.made_constants_file


def test_parameters_bound_once(tmp_path) -> None:
    """params= binds an nn.Module export's weights (its trailing parameters) once for every VM:
    from a mapping, an .npz, a params file or MLC's tensor-cache.json with its shard; run then
    takes the data alone, inputs describe it alone, answers unchanged; wrong names and shapes
    are refused naming them."""
    d = RELAX / "0.27" / "mlp_args"
    _, cases = read_cases(d)
    weights = {name: cases[0][0][name] for name in ("w1", "b1", "w2")}
    np.savez(tmp_path / "w.npz", **weights)
    (tmp_path / "w.params").write_bytes(tvmrt.save_params(weights))
    shard = b"".join(w.tobytes() for w in weights.values())
    (tmp_path / "mlc").mkdir()
    (tmp_path / "mlc" / "params_shard_0.bin").write_bytes(shard)
    records, at = [], 0
    for name, w in weights.items():
        records.append(
            {
                "name": name,
                "shape": list(w.shape),
                "dtype": "float32",
                "format": "raw",
                "nbytes": w.nbytes,
                "byteOffset": at,
            }
        )
        at += w.nbytes
    index = {
        "metadata": {},
        "records": [{"dataPath": "params_shard_0.bin", "format": "raw-shard", "nbytes": at, "records": records}],
    }
    import json

    (tmp_path / "mlc" / "tensor-cache.json").write_text(json.dumps(index))
    for given in (weights, tmp_path / "w.npz", tmp_path / "w.params", tmp_path / "mlc"):
        m = tvmrt.Model(d, params=given)
        assert [i.name for i in m.inputs] == ["x"] and m.inputs[0].shape == (-1, 16)
        for feed, want, _ in cases:
            assert m.run(feed["x"])[0].tobytes() == want[0].tobytes(), given
            assert m.run(x=feed["x"])[0].tobytes() == want[0].tobytes()
    with pytest.raises(tvmrt.InvalidKeyError, match="'w3'"):
        tvmrt.Model(d, params={**weights, "w3": weights["w1"]})
    with pytest.raises(tvmrt.InvalidValueError, match="'w1'"):
        tvmrt.Model(d, params={**weights, "w1": np.zeros((3, 3), "float32")})
    with pytest.raises(tvmrt.InvalidValueError, match="takes 1 inputs"):
        tvmrt.Model(d, params=weights).run(*cases[0][0].values())
