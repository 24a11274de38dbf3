"""AOT executor artefacts (tests/fixtures/aot: TVM 0.16 and 0.19, every option of a
Runtime("cpp") build) through tvmrt.Model: outputs equal to the compiler's own runtime's, from
many threads at once; inputs by name as written or as the compiler sanitised them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import FIXTURES, load

import tvmrt

AOT = sorted(f"aot/{v.name}/{m.name}" for v in (FIXTURES / "aot").iterdir() for m in v.iterdir())


@pytest.mark.parametrize("name", AOT)
def test_an_aot_artefact_runs_as_any_model(name):
    fx = load(name)
    model = tvmrt.Model(fx.dir)
    assert isinstance(model, tvmrt.AOTModel)
    assert [t.shape for t in model.inputs] == [v.shape for v in fx.inputs.values()]
    assert [t.shape for t in model.outputs] == [v.shape for v in fx.outputs]
    # Named as the metadata names them, as `tvmrt inspect`, `tvmrt run` and Triton do.
    assert [t.name for t in model.outputs] == [f"output{k}" for k in range(len(fx.outputs))]
    for got, want in zip(model.run(**fx.inputs), fx.outputs):
        np.testing.assert_array_equal(got, want)
    [x] = fx.inputs.values()
    for got, want in zip(model.run(x), fx.outputs):  # positional
        np.testing.assert_array_equal(got, want)


def test_threads_each_get_their_own_answers():
    fx = load("aot/0.16/convnet_usmp")
    model = tvmrt.Model(fx.dir)
    [x] = fx.inputs.values()
    want = model.run(x)
    wrong: list[str] = []

    def worker(k: int) -> None:
        for _ in range(20):
            # Each thread its own input: another thread's would show in the outputs.
            got = model.run(x * (k + 1))
            if k == 0 and not all(np.array_equal(g, w) for g, w in zip(got, want)):
                wrong.append("thread 0")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_bad_inputs_are_errors_that_name_them():
    fx = load("aot/0.16/convnet")
    model = tvmrt.Model(fx.dir)
    [x] = fx.inputs.values()
    with pytest.raises(tvmrt.InvalidKeyError, match="no input named 'data'"):
        model.run(data=x)
    with pytest.raises(tvmrt.InvalidValueError, match=r"float32\[1, 3, 12, 12\], got \[1, 3, 12\]"):
        model.run(x[..., 0])
    with pytest.raises(tvmrt.InvalidValueError, match="CPU alone"):
        tvmrt.Model(fx.dir, device="opencl")
