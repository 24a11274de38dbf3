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


def test_a_plugin_replaced_on_disk_is_not_loaded_twice(tmp_path):
    """A rebuild or an upgrade replaces the plug-in's file; a model made afterwards names the same
    path. Loading the new file too would run its constructors again, registering its globals a
    second time (upstream's registry then aborts the process): the path loaded first counts as
    loaded, as dlopen and ctypes.CDLL treat it, and the change is said once. Run in a child
    process: without this the child dies."""
    import shutil
    import subprocess
    import sys

    path = tmp_path / "plugin.so"
    shutil.copyfile(plugin_path(), path)
    script = f"""
import os, shutil, sys
import numpy as np
sys.path[:0] = {sys.path!r}
import tvmrt
from conftest import load
fx = load("byoc/plugin")
path = {str(path)!r}
[first] = tvmrt.Model(fx.dir, plugins=[path]).run(**fx.inputs)
# The upgrade: a new file at the same path (a new inode, as an install writes it).
shutil.copyfile({plugin_path()!r}, path + ".new")
os.replace(path + ".new", path)
for _ in range(2):
    [again] = tvmrt.Model(fx.dir, plugins=[path]).run(**fx.inputs)
    np.testing.assert_array_equal(again, first)
print("alive")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=os.path.dirname(__file__)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("alive")
    assert done.stderr.count("was replaced since it was loaded") == 1, done.stderr
