"""Relay VM models (relay.vm.compile, TVM 0.8 to 0.19) through tvmrt.Model: inputs of any shape,
outputs byte-equal to each compiler's own VM, tuples flattened or nested, both artefact forms,
many threads on one model, memory that follows the shapes."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FIXTURES

import tvmrt

VM = FIXTURES / "vm"
VERSIONS = ["0.8", "0.9", "0.16", "0.19"]


def read_cases(d):
    cases, params = [], []
    for line in (d / "manifest.txt").read_text().splitlines():
        w = line.split()
        if w[0] == "params":
            params = w[1:]
        elif w[0] == "case":
            cases.append(({}, [], ""))
        elif w[0] == "input":
            nd = int(w[3])
            cases[-1][0][w[1]] = np.fromfile(d / w[4 + nd], dtype=w[2]).reshape([int(x) for x in w[4 : 4 + nd]])
        elif w[0] == "output":
            nd = int(w[2])
            cases[-1][1].append(np.fromfile(d / w[3 + nd], dtype=w[1]).reshape([int(x) for x in w[3 : 3 + nd]]))
        elif w[0] == "structure":
            cases[-1] = (cases[-1][0], cases[-1][1], w[1])
    return params, cases


def structure(tree):
    return "(" + "".join(structure(t) for t in tree) + ")" if isinstance(tree, tuple) else "t"


DIRS = [VM / v / m for v in VERSIONS for m in ("mlp_dyn", "seq_dyn", "nms_head", "control", "conv_static")]


@pytest.mark.parametrize("d", DIRS, ids=lambda d: f"{d.parent.name}-{d.name}")
def test_every_version_byte_equal(d):
    params, cases = read_cases(d)
    m = tvmrt.Model(d)
    assert isinstance(m, tvmrt.VMModel)
    assert m.params == params
    for feed, want, nesting in cases:
        got = m.run(feed)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want], d
        assert [g.shape for g in got] == [w.shape for w in want]
        assert structure(m.run(**feed, nested=True)) == nesting
        assert [g.tobytes() for g in m.run(*[feed[p] for p in params])] == [w.tobytes() for w in want]


@pytest.mark.filterwarnings("ignore::tvmrt.UncheckedInputsWarning")  # models loaded without their .meta on purpose
def test_the_split_form_and_one_file():
    d = VM / "0.19" / "mlp_dyn"
    _, cases = read_cases(d)
    for m in (tvmrt.Model(code=d / "code.ro", lib=d / "lib.so"), tvmrt.Model(d / "vm.so")):
        got = m.run(cases[2][0]["data"])
        assert [g.tobytes() for g in got] == [w.tobytes() for w in cases[2][1]]


def test_many_threads_on_one_model_with_shapes_that_move():
    d = VM / "0.16" / "seq_dyn"
    m = tvmrt.Model(d)
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((1, int(n), 8)).astype("float32") for n in rng.integers(1, 40, 24)]
    want = [m.run(x) for x in feeds]
    wrong = []

    def body(k):
        for r in range(30):
            i = (k * 7 + r) % len(feeds)
            if [g.tobytes() for g in m.run(feeds[i])] != [w.tobytes() for w in want[i]]:
                wrong.append(i)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    u = m.memory_usage()
    assert u["constants"] > 0 and u["pools"][0]["bytes"] < 1 << 20, u


def test_profile_benchmark_and_errors():
    d = VM / "0.19" / "conv_static"
    _, cases = read_cases(d)
    m = tvmrt.Model(d, num_threads=1)
    report = m.profile(cases[0][0])
    assert any("conv2d" in c["Name"] for c in report.calls)
    assert m.benchmark(cases[0][0], repeat=2, number=2).mean > 0
    with pytest.raises(tvmrt.InvalidValueError, match="takes 1 inputs"):
        m.run()
    with pytest.raises(tvmrt.InvalidKeyError, match="no input named"):
        m.run(nope=np.zeros(3))
    with pytest.raises(tvmrt.TVMRTError):
        m.run(np.zeros((1, 3, 16), "float32"))  # the wrong rank: the kernels refuse it
    m.close()
    with pytest.raises(tvmrt.RuntimeFailure, match="closed"):
        m.run(cases[0][0])


def test_benchmark_in_every_form():
    d = VM / "0.16" / "mlp_dyn"
    m = tvmrt.Model(d, num_threads=1)
    x = np.ones((2, 16), "float32")
    for r in (
        m.benchmark(x, repeat=2, number=1),
        m.benchmark(data=x, repeat=2, number=1),
        m.benchmark({"data": x}, repeat=2, number=1),
        m.benchmark("cpu", x, func_name="main", repeat=2, number=1, min_repeat_ms=0, end_to_end=True),
        m.benchmark(SimpleNamespace(device_type=1, device_id=0), data=x, repeat=2, number=1, cooldown_interval_ms=0),
        m.benchmark(x, device="cpu", repeat=2, number=1),
        m.benchmark(x, dev="cpu", repeat=2, number=1),
    ):
        assert len(r.results) == 2 and r.mean > 0
    # TVM's defaults, and figures of runs (a run costs microseconds; timing nothing, nanoseconds).
    run_time = min(m.benchmark(x, repeat=1, number=1).mean for _ in range(3))
    assert len(m.benchmark(x).results) == 5 and run_time > 1e-6
    with pytest.raises(tvmrt.InvalidTypeError, match="float32, got float64"):
        m.benchmark(x.astype("float64"))  # inputs as run takes them: no cast
    with pytest.raises(tvmrt.InvalidValueError, match=r"no inputs.*benchmark\(data=\.\.\., repeat=5"):
        m.benchmark(repeat=2)
    with pytest.raises(tvmrt.InvalidValueError, match=r"runs on cpu\(0\), not opencl\(0\)"):
        m.benchmark("opencl", x)
    with pytest.raises(tvmrt.InvalidValueError, match=r"func_name 'run'.*'main'"):
        m.benchmark(x, func_name="run")


def test_a_model_with_no_input_types_says_how_to_give_them(tmp_path):
    src = VM / "0.16" / "mlp_dyn"
    for f in ("code.ro", "lib.so"):
        shutil.copy(src / f, tmp_path / f)
    said_so = r"no input_specs= or \.meta.*input_specs=\{'data': \(\(None"
    with pytest.warns(tvmrt.UncheckedInputsWarning, match=said_so) as said:
        here = sys._getframe().f_lineno + 1
        m = tvmrt.Model(tmp_path)
    assert not m.described
    # Said at the caller's line, through Model's dispatch or directly (under mutmut, whose
    # trampolines are frames of their own between the caller and the package, it cannot be).
    located = "MUTANT_UNDER_TEST" not in os.environ
    assert not located or [(w.filename, w.lineno) for w in said] == [(__file__, here)]
    with pytest.warns(tvmrt.UncheckedInputsWarning) as said:
        here = sys._getframe().f_lineno + 1
        tvmrt.VMModel(tmp_path)
    assert not located or [(w.filename, w.lineno) for w in said] == [(__file__, here)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tvmrt.Model(tmp_path, input_specs={"data": ((None, 16), "float32")})
        tvmrt.Model(src)  # its model.meta


def test_input_specs_check_what_the_executable_cannot():
    d = VM / "0.16" / "mlp_dyn"
    m = tvmrt.Model(d, input_specs={"data": ((None, 16), "float32")})
    assert m.run(np.ones((3, 16), "float32"))[0].shape == (3, 8)
    with pytest.raises(tvmrt.InvalidValueError, match="float32"):
        m.run(np.ones((3, 5), "float32"))  # a size the kernels would read past
    with pytest.raises(tvmrt.InvalidTypeError):
        m.run(np.ones((3, 16), "float64"))
    assert m.run(np.ones((3, 16), "float64"), cast=True)[0].shape == (3, 8)


def test_opencl_vm(opencl):
    d = VM / "opencl" / "mlp_dyn"
    _, cases = read_cases(d)
    m = tvmrt.Model(d)
    assert m.device == tvmrt.model._ffi.Device(4, 0)
    for feed, want, _ in cases:
        assert [g.tobytes() for g in m.run(feed)] == [w.tobytes() for w in want]


def test_constants_mapped_from_one_file_for_every_process(tmp_path, monkeypatch):
    monkeypatch.setenv("TVMRT_PREPARED_DIR", str(tmp_path / "cache"))
    d = VM / "0.16" / "conv_static"
    _, cases = read_cases(d)
    first = tvmrt.Model(d, map_constants=True)
    assert first.made_constants_file and first.constants_file.is_file()
    again = tvmrt.Model(d, map_constants=True)
    assert not again.made_constants_file and again.constants_file == first.constants_file
    for m in (first, again):
        assert [g.tobytes() for g in m.run(cases[0][0])] == [w.tobytes() for w in cases[0][1]]
    # A damaged file is not used: written again.
    data = bytearray(first.constants_file.read_bytes())
    data[len(data) - 100] ^= 0xFF
    first.constants_file.write_bytes(bytes(data))
    third = tvmrt.Model(d, map_constants=True)
    assert third.made_constants_file
    assert [g.tobytes() for g in third.run(cases[0][0])] == [w.tobytes() for w in cases[0][1]]


def _without_meta(d, tmp_path):
    """A copy of the fixture's one-file executable alone: no model.meta beside it."""
    bare = tmp_path / d.name
    bare.mkdir(exist_ok=True)
    (bare / "vm.so").write_bytes((d / "vm.so").read_bytes())
    return bare


@pytest.mark.filterwarnings("ignore::tvmrt.UncheckedInputsWarning")  # models loaded without their .meta on purpose
def test_inputs_are_described_only_as_far_as_they_are_known(tmp_path):
    d = VM / "0.16" / "mlp_dyn"
    m = tvmrt.Model(d)  # the model.meta the compile route writes
    assert m.described
    assert [(t.name, t.shape, t.dtype) for t in m.inputs] == [("data", (-1, 16), "float32")]
    assert [(t.name, t.shape, t.dtype) for t in m.outputs] == [
        ("output_0", (-1, 8), "float32"),
        ("output_1", (-1,), "float32"),
    ]
    bare = tvmrt.Model(_without_meta(d, tmp_path))
    assert not bare.described
    # Never a shape that is not the model's (once a scalar, shape ()): unknown, and said so.
    assert [(t.name, t.shape, t.dtype) for t in bare.inputs] == [("data", None, "")]
    assert "input_specs=" in repr(bare.inputs[0])
    assert bare.outputs == []
    with pytest.raises(tvmrt.InvalidValueError, match="float32"):
        m.run(np.ones((3, 5), "float32"))


def _empty_shapes():
    out = [()]
    for rank in range(1, 5):
        out += [tuple(0 if a == zero else 3 for a in range(rank)) for zero in range(rank)]
    return out


@pytest.mark.filterwarnings("ignore::tvmrt.UncheckedInputsWarning")  # models loaded without their .meta on purpose
@pytest.mark.parametrize("d", DIRS, ids=lambda d: f"{d.parent.name}-{d.name}")
def test_empty_and_0d_inputs_answer_or_fail_never_crash(d, tmp_path):
    params, cases = read_cases(d)
    feed, want, _ = cases[0]
    # Unchecked (no types known): the kernels and shape functions see each tensor as it is.
    for m in (tvmrt.Model(_without_meta(d, tmp_path)), tvmrt.Model(d)):
        for name in params:
            for shape in _empty_shapes():
                bad = dict(feed)
                bad[name] = np.zeros(shape, feed[name].dtype)
                try:
                    m.run(bad)
                except tvmrt.TVMRTError:
                    pass
        got = m.run(feed)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
