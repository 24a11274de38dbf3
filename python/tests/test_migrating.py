"""What code coming from TVM's GraphModule or ONNX Runtime brings: model folders whose files are
named as other tools name them, the call forms of those runtimes, TVM's benchmark signature,
GraphModule's meaning of its describing calls, kernel threads, params files read and written, the
cast asked for, and bfloat16 through ml_dtypes."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, assert_outputs, load

import tvmrt


def copy_model(src: Path, dst: Path, names: dict[str, str]) -> Path:
    """`src`'s files copied into `dst` under other names (`names`: old -> new; others kept)."""
    dst.mkdir()
    for f in src.iterdir():
        shutil.copy(f, dst / names.get(f.name, f.name))
    return dst


@pytest.mark.parametrize(
    "params_name",
    ["params.bin", "params", "deploy_param.params", "params.params", "model.params", "deploy.params", "weights.bin"],
)
def test_params_found_whatever_their_name(tmp_path, params_name):
    f = load("mlp_unbound_b1")
    d = copy_model(f.dir, tmp_path / "m", {"params.bin": params_name, "in_0.bin": "input_0.bin"})
    m = tvmrt.Model(d)
    assert [t.name for t in m.inputs] == ["data"]
    assert_outputs(m.run(f.inputs), f.outputs, params_name)


def test_dlr_names_for_the_library_and_graph(tmp_path):
    f = load("mlp_unbound_b1")
    d = copy_model(f.dir, tmp_path / "m", {"lib.so": "deploy_lib.so", "graph.json": "deploy_graph.json"})
    assert_outputs(tvmrt.Model(d).run(f.inputs), f.outputs, "dlr names")


def test_several_or_no_params_files_say_what_to_do(tmp_path):
    f = load("mlp_unbound_b1")
    d = copy_model(f.dir, tmp_path / "m", {"params.bin": "a.params"})
    shutil.copy(f.dir / "params.bin", d / "b.params")
    with pytest.raises(tvmrt.InvalidValueError, match=r"several params files \(a.params, b.params\).*params="):
        tvmrt.Model(d)
    assert_outputs(tvmrt.Model(d, params=d / "b.params").run(f.inputs), f.outputs, "named")
    (d / "a.params").unlink()
    (d / "b.params").unlink()
    with pytest.raises(tvmrt.InvalidValueError, match=r"none were found \(looked for params.bin, params, deploy_param"):
        tvmrt.Model(d)


def test_call_forms_of_other_runtimes():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    x = f.inputs["data"]
    for got in (m.run(x), m.run([x]), m.run(None, {"data": x}), m.run({"data": x}), m(data=x)):
        assert_outputs(got, f.outputs, "form")
    # ONNX Runtime's form with output names picks those outputs.
    (only,) = m.run([m.outputs[0].name], {"data": x})
    assert only.tobytes() == f.outputs[0].tobytes()
    # Anything else: the message shows the forms accepted.
    multi = tvmrt.Model(load("multi_io").dir)
    with pytest.raises(tvmrt.TVMRTError, match=r"run\(None, \{'data': x\}\)"):
        multi.run(load("multi_io").inputs["x"])
    with pytest.raises(tvmrt.TVMRTError, match="one array for a model of one input"):
        m.run(x, x)


class TVMDevice:
    """What TVM's Python passes as a device: its fields, no methods this package calls."""

    def __init__(self, device_type: int, device_id: int = 0) -> None:
        self.device_type = device_type
        self.device_id = device_id


def test_benchmark_in_tvms_form():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    for r in (
        m.benchmark(TVMDevice(1), repeat=3, number=2, **f.inputs),
        m.benchmark(TVMDevice(1), "run", 3, 2, None, **f.inputs),
        m.benchmark("cpu", func_name="run", repeat=3, number=2, min_repeat_ms=None, cooldown_interval_ms=0),
        m.benchmark(device=TVMDevice(1), repeat=3, number=2, end_to_end=True),
    ):
        assert len(r.results) == 3 and r.mean > 0
    with pytest.raises(tvmrt.InvalidValueError, match=r"runs on cpu\(0\), not opencl\(0\)"):
        m.benchmark(TVMDevice(4), repeat=1)
    # Every device by TVM's name for it, never by its number.
    with pytest.raises(tvmrt.InvalidValueError, match=r"runs on cpu\(0\), not cuda\(1\)"):
        m.benchmark(TVMDevice(2, 1), repeat=1)
    with pytest.raises(tvmrt.InvalidValueError, match="only 'run'"):
        m.benchmark(TVMDevice(1), "get_output")
    with pytest.raises(tvmrt.InvalidValueError, match="at least 1"):
        m.benchmark(repeat=0)
    with pytest.raises(tvmrt.InvalidValueError, match="TVM's benchmark"):
        m.benchmark(1, 2, 3, True, 1, 9)


def test_graphmodule_describing_calls_keep_their_meaning():
    f = load("mlp_unbound_b1")
    m = tvmrt.Model(f.dir)
    # GraphModule's counts are over every graph input, weights included; `inputs` the data ones.
    assert m.get_num_inputs() == len(m.inputs) + len(m.weights)
    assert [t.name for t in m.inputs] == ["data"]
    shapes, dtypes = m.get_input_info()
    assert shapes == {"data": (1, 1, 28, 28)} and dtypes == {"data": "float32"}
    assert m.get_input_index("data") == 0 and m.get_num_outputs() == 1
    # An error lists the data inputs first, not every weight.
    with pytest.raises(KeyError) as e:
        m.run(dat=f.inputs["data"])
    message = str(e.value)
    assert "data" in message and message.index("data") < 200, message


def test_num_threads_and_the_same_answer():
    f = load("convnet")
    for n in (1, 2):
        assert_outputs(tvmrt.Model(f.dir, num_threads=n).run(f.inputs), f.outputs, f"threads {n}")
    with pytest.raises(tvmrt.InvalidValueError):
        tvmrt.Model(f.dir, num_threads=0)


def test_params_files_read_written_and_loaded():
    f = load("mlp_unbound_b1")
    weights = tvmrt.load_params(f.dir / "params.bin")
    from_bytes = tvmrt.load_params((f.dir / "params.bin").read_bytes())
    assert list(from_bytes) == list(weights) and all(from_bytes[n].tobytes() == w.tobytes() for n, w in weights.items())
    m = tvmrt.Model(f.dir)
    assert {n: (w.shape, str(w.dtype)) for n, w in weights.items()} == {w.name: (w.shape, w.dtype) for w in m.weights}
    blob = tvmrt.save_params(weights)
    assert struct.unpack_from("<Q", blob)[0] == 0xF7E58D4F05049CB7
    back = tvmrt.load_params(blob)
    assert all(back[n].tobytes() == w.tobytes() for n, w in weights.items())
    # load_params from bytes changes the answer as TVM's does, and back again.
    m.load_params(tvmrt.save_params({n: w * 0 for n, w in weights.items()}))
    assert not m.run(f.inputs)[0].tobytes() == f.outputs[0].tobytes()
    m.load_params(blob)
    assert_outputs(m.run(f.inputs), f.outputs, "reloaded")
    with pytest.raises(tvmrt.InvalidValueError, match="magic"):
        tvmrt.load_params(b"\0" * 24)


def test_the_cast_is_asked_for_and_the_refusal_says_how():
    f = load("mlp_b1")
    m = tvmrt.Model(f.dir)
    x64 = f.inputs["data"].astype("float64")
    with pytest.raises(tvmrt.InvalidTypeError, match="cast=True"):
        m.run(data=x64)
    assert_outputs(m.run(data=x64, cast=True), f.outputs, "cast")


def test_bfloat16_in_and_out():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    d = FIXTURES / "bf16_io"
    bits = np.fromfile(d / "in_0.bin", dtype=np.uint16).reshape(2, 8)
    want0 = np.fromfile(d / "out_0.bin", dtype=np.uint16).reshape(2, 4)
    want1 = np.fromfile(d / "out_1.bin", dtype=np.float32)
    m = tvmrt.Model(d)
    assert m.inputs[0].dtype == "bfloat16" and m.outputs[0].dtype == "bfloat16"
    y, s = m.run(x=bits.view(ml_dtypes.bfloat16))
    assert y.dtype == ml_dtypes.bfloat16 and y.view(np.uint16).tobytes() == want0.tobytes()
    assert s.tobytes() == want1.tobytes()
    # float32 values are taken when asked to cast (rounded to bfloat16), never silently.
    with pytest.raises(tvmrt.InvalidTypeError):
        m.run(x=bits.view(ml_dtypes.bfloat16).astype(np.float32))
    y2, _ = m.run(x=bits.view(ml_dtypes.bfloat16).astype(np.float32), cast=True)
    assert y2.view(np.uint16).tobytes() == want0.tobytes()
