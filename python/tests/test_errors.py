"""Every mistake a caller can make raises a subclass of the built-in a caller would catch (KeyError,
ValueError, TypeError, IndexError), with the runtime's message, never a bare RuntimeError; and the
model is unchanged after each."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, assert_outputs, load

import tvmrt


def raised(exc_type, f, *args, **kwargs):
    with pytest.raises(exc_type) as e:
        f(*args, **kwargs)
    assert isinstance(e.value, tvmrt.TVMRTError)
    assert type(e.value) is not RuntimeError
    return str(e.value)


@pytest.fixture(scope="module")
def mlp():
    f = load("mlp_b1")
    return f, tvmrt.Model(f.dir)


def test_wrong_names_are_key_errors(mlp):
    f, m = mlp
    msg = raised(KeyError, m.run, {"nope": f.inputs["data"]})
    assert "nope" in msg and not msg.startswith("'"), msg
    raised(KeyError, m.set_input, "nope", f.inputs["data"])
    raised(KeyError, m.get_output, "nope")
    raised(KeyError, m.get_input, "nope")


def test_wrong_shapes_are_value_errors(mlp):
    _, m = mlp
    msg = raised(ValueError, m.run, data=np.zeros((1, 1, 28, 27), np.float32))
    assert "data" in msg and "[1, 1, 28, 28]" in msg and "[1, 1, 28, 27]" in msg, msg
    raised(ValueError, m.run, data=np.zeros((2, 1, 28, 28), np.float32))


def test_wrong_dtypes_are_type_errors(mlp):
    f, m = mlp
    msg = raised(TypeError, m.run, data=f.inputs["data"].astype(np.float64))
    assert "float32" in msg and "float64" in msg, msg
    raised(TypeError, m.run, data=f.inputs["data"].view(np.int32))
    raised(TypeError, m.run, data=np.zeros((1, 1, 28, 28), np.complex64))


def test_indices_out_of_range_are_index_errors(mlp):
    f, m = mlp
    assert f.inputs
    raised(IndexError, m.get_output, 5)
    raised(IndexError, m.set_input, 99, f.inputs["data"])


def test_inputs_never_set_are_key_errors():
    f = load("multi_io")
    m = tvmrt.Model(f.dir)
    msg = raised(KeyError, m.run, x=f.inputs["x"])
    assert "y" in msg and "z" in msg, msg


def test_bad_models_and_options_are_value_errors(tmp_path):
    raised(ValueError, tvmrt.Model, tmp_path / "missing")
    raised(ValueError, tvmrt.Model, tmp_path)
    (tmp_path / "lib.so").write_bytes(b"not a library")
    raised(ValueError, tvmrt.Model, tmp_path / "lib.so")
    f = load("mlp_unbound_b1")
    # A shared library that is no model: it carries no graph, and none was given.
    libm = next(
        p
        for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6", "/lib64/libm.so.6")
        if os.path.exists(p)
    )
    shutil.copyfile(libm, tmp_path / "notamodel.so")
    assert "carries no graph" in raised(ValueError, tvmrt.Model, tmp_path / "notamodel.so")
    raised(ValueError, tvmrt.Model, f.dir, device="tpu")
    raised(ValueError, tvmrt.Model, f.dir, concurrency=0)
    raised(ValueError, tvmrt.Model, f.dir, params=b"garbage")
    truncated = (f.dir / "params.bin").read_bytes()[:100]
    raised(ValueError, tvmrt.Model, f.dir, params=truncated)
    raised(ValueError, tvmrt.Model, f.dir, params=tmp_path / "nothing.bin")
    # Weights of another model: the runtime's message names the weight.
    other = load("convnet")
    msg = raised(KeyError, tvmrt.Model, f.dir, params=other.dir / "params.bin")
    assert "the graph has no input for" in msg, msg


def test_the_model_is_unchanged_after_each_mistake(mlp):
    f, m = mlp
    for bad in ({"nope": 1}, {"data": np.zeros(3, np.float32)}, {"data": f.inputs["data"].astype(np.float64)}):
        with pytest.raises(tvmrt.TVMRTError):
            m.run(bad)
    assert_outputs(m.run(f.inputs), f.outputs, "after mistakes")
    assert FIXTURES.is_dir()


def test_a_closed_session_says_so(mlp):
    f, m = mlp
    s = m.session()
    s.close()
    raised(RuntimeError, s.run, f.inputs)


def test_a_params_header_declaring_more_than_the_file_holds_is_refused_from_the_header(tmp_path):
    """A file of 300 MB (sparse here) whose header declares more names than it could hold: refused
    from its first 24 bytes, by every reader, before the rest is read or walked."""
    import struct

    from tvmrt._artifacts import read_param_names

    p = tmp_path / "huge.params"
    for count in (1 << 40, (300 << 20) // 48 + 1):
        with open(p, "wb") as f:
            f.write(struct.pack("<QQQ", 0xF7E58D4F05049CB7, 0, count))
            f.truncate(300 << 20)
        for read in (tvmrt.load_params, read_param_names):
            with pytest.raises(tvmrt.InvalidValueError, match=f"declaring {count} parameters"):
                read(p)
        with pytest.raises(tvmrt.InvalidValueError, match=f"declaring {count} parameters"):
            tvmrt.Model(FIXTURES / "mlp_b1", params=p)


def test_a_prepared_file_whose_weights_changed_is_refused(tmp_path):
    """A bit flipped in a weight of a prepared file: no loader answers from it (mapped or read),
    and the message says how to run edited weights on purpose."""
    from tvmrt._artifacts import read_params

    d = FIXTURES / "convnet"
    model = tvmrt.Model(d)
    prepared = tmp_path / "conv.prepared"
    model.prepare_params(prepared)
    blob = bytearray(prepared.read_bytes())
    weights = read_params(bytes(blob))
    first = next(iter(weights.values())).tobytes()
    blob[bytes(blob).find(first[:64]) + 8] ^= 0x10
    flipped = tmp_path / "conv.flipped"
    flipped.write_bytes(blob)
    for mapped in (True, False):
        with pytest.raises(tvmrt.TVMRTError, match="not the ones written"):
            tvmrt.Model(d, params=flipped, map_params=mapped)
    # Saved as plain params on purpose, the edited weights run.
    plain = tmp_path / "conv.plain"
    plain.write_bytes(tvmrt.save_params(tvmrt.load_params(flipped)))
    x = np.zeros(model.inputs[0].shape, "float32")
    assert tvmrt.Model(d, params=plain).run(x)[0].shape == model.run(x)[0].shape


def test_messages_keep_python_advice_apart_and_lose_only_the_class_prefix():
    from tvmrt import errors

    e = errors.InvalidTypeError("input 'x' is float32, got float64", advice="convert it")
    assert (str(e), e.message, e.advice) == ("input 'x' is float32, got float64: convert it", e.args[0], "convert it")
    assert errors.client_message(e) == "input 'x' is float32, got float64"
    assert errors.client_message(ValueError("plain")) == "plain"
    assert str(errors.InvalidKeyError("no input named 'q'")) == "no input named 'q'"  # not quoted, as KeyError's
    # The runtime's C API puts its class first: only that prefix goes.
    got = errors.from_runtime("InternalError: KeyError: no input named 'q'", "KeyError")
    assert type(got) is errors.InvalidKeyError and got.message == "KeyError: no input named 'q'"
    assert errors.from_runtime("TVMError: x: y", "").message == "x: y"
    assert errors.from_runtime("InternalErrorx: y", "").message == "InternalErrorx: y"
