"""Runtime plug-ins through the package: the test plug-in (c_tests/cxx/plugin/test_plugin.cc,
written against TVM's C++ headers, built by CMake: TVMRT_TEST_PLUGIN names it) loaded with
`tvmrt.load_plugin` or `plugins=`, then an artefact whose module blob holds the plug-in's module
(tests/fixtures/byoc/plugin) runs as any model; a BYOC artefact whose generated C++ needs the
runtime's C++ symbols runs too."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import load

import tvmrt


def plugin_path() -> str:
    path = os.environ.get("TVMRT_TEST_PLUGIN", "")
    if not os.path.exists(path):
        assert os.environ.get("TVM_RT_REQUIRE_UPSTREAM_LIB") != "1", f"no test plug-in at {path!r}"
        pytest.skip("the test plug-in is built by CMake (TVMRT_TEST_PLUGIN names it)")
    return path


def test_a_plugins_artefact_runs_once_the_plugin_is_loaded():
    fx = load("byoc/plugin")
    model = tvmrt.Model(fx.dir, plugins=[plugin_path()])
    [out] = model.run(**fx.inputs)
    np.testing.assert_array_equal(out, fx.outputs[0])
    np.testing.assert_array_equal(out, np.maximum(fx.inputs["x"] * fx.inputs["y"] + np.float32(1), 0))
    # Loading it again does nothing more.
    tvmrt.load_plugin(plugin_path())
    [again] = tvmrt.Model(fx.dir).run(**fx.inputs)
    np.testing.assert_array_equal(again, out)


def test_a_plugin_that_is_not_there_is_an_error_naming_it(tmp_path):
    with pytest.raises(tvmrt.TVMRTError, match=r"no-such-plugin\.so"):
        tvmrt.load_plugin(tmp_path / "no-such-plugin.so")
    bad = tmp_path / "not-a-library.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(tvmrt.TVMRTError, match=r"not-a-library\.so"):
        tvmrt.Model(load("mlp_b1").dir, plugins=bad)


def test_generated_cpp_that_needs_the_runtimes_cpp_symbols_runs():
    fx = load("byoc/ccompiler")
    [out] = tvmrt.Model(fx.dir).run(**fx.inputs)
    np.testing.assert_array_equal(out, fx.outputs[0])
