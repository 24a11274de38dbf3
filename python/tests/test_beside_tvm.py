"""This package and TVM's own in one process (each with its own runtime, no symbol clash), and
TVM's own Python running on the library this package bundles. TVM 0.16 comes from the hhb-tvm
wheel (scripts/tvm_env.sh: TVM_PYTHON, TVM_WHEEL_DIR); without it these tests are skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, syslib_so

import tvmrt

TVM_PYTHON = os.environ.get("TVM_PYTHON")
TVM_WHEEL_DIR = os.environ.get("TVM_WHEEL_DIR")

pytestmark = pytest.mark.skipif(not (TVM_PYTHON and TVM_WHEEL_DIR), reason="no TVM 0.16 (scripts/tvm_env.sh)")

BOTH = r"""
import sys, numpy as np
import tvm
from tvm.contrib import graph_executor
import tvmrt
fx = sys.argv[1]
x = np.fromfile(fx + "/in_0.bin", dtype="float32").reshape(1, 1, 28, 28)
want = np.fromfile(fx + "/out_0.bin", dtype="float32").reshape(1, 10)
# TVM's own runtime (the wheel's, loaded globally) ...
m = graph_executor.GraphModule(tvm.runtime.load_module(fx + "/lib.so")["default"](tvm.cpu()))
m.set_input("data", x); m.run()
assert m.get_output(0).numpy().tobytes() == want.tobytes(), "TVM's runtime"
# ... and this package's, loaded locally under a soname of its own, in the same process.
model = tvmrt.Model(fx)
assert model.run(data=x)[0].tobytes() == want.tobytes(), "tvmrt"
# Interleaved: each keeps answering from its own library.
m.run(); assert model.run(data=x)[0].tobytes() == m.get_output(0).numpy().tobytes()
import ctypes
print("TVM", tvm._ffi.base._LIB._name)
print("TVMRT", tvmrt.library_path())
"""

ON_OURS = r"""
import sys, numpy as np
import tvm
from tvm.contrib import graph_executor
fx = sys.argv[1]
x = np.fromfile(fx + "/in_0.bin", dtype="float32").reshape(1, 1, 28, 28)
want = np.fromfile(fx + "/out_0.bin", dtype="float32").reshape(1, 10)
m = graph_executor.GraphModule(tvm.runtime.load_module(fx + "/lib.so")["default"](tvm.cpu()))
m.set_input("data", x); m.run()
assert m.get_output(0).numpy().tobytes() == want.tobytes()
print("TVM", tvm._ffi.base._LIB._name)
"""


def package_only(tmp_path: Path) -> Path:
    """The installed package alone (its folder, not the venv's other packages built for another
    Python), for TVM's interpreter."""
    dst = tmp_path / "pkg"
    shutil.copytree(Path(tvmrt.__file__).parent, dst / "tvmrt")
    return dst


def env(**extra):
    e = {k: v for k, v in os.environ.items() if k not in ("TVM_USE_RUNTIME_LIB", "TVM_LIBRARY_PATH", "TVMRT_LIBRARY")}
    e.update(TVM_FFI="ctypes", **extra)
    return e


def test_tvm_and_tvmrt_in_one_process(tmp_path):
    pkg = package_only(tmp_path)
    out = subprocess.run(
        [TVM_PYTHON, "-c", BOTH, str(FIXTURES / "mlp_b1")],
        capture_output=True,
        text=True,
        env=env(PYTHONPATH=f"{TVM_WHEEL_DIR}:{pkg}"),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["TVMRT"].startswith(str(pkg)), lines
    assert not lines["TVM"].startswith(str(pkg)), lines


def test_tvms_python_runs_on_the_bundled_library():
    lib_dir = str(Path(tvmrt.library_path()).parent)
    out = subprocess.run(
        [TVM_PYTHON, "-c", ON_OURS, str(FIXTURES / "mlp_b1")],
        capture_output=True,
        text=True,
        env=env(PYTHONPATH=TVM_WHEEL_DIR, TVM_USE_RUNTIME_LIB="1", TVM_LIBRARY_PATH=lib_dir),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split(" ", 1)[1].strip().startswith(lib_dir), out.stdout


SYSLIB_ORDERS = r"""
import sys, numpy as np
fx, syslib, first = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.fromfile(fx + "/in_0.bin", dtype="float32").reshape(1, 1, 28, 28)
want = np.fromfile(fx + "/out_0.bin", dtype="float32").reshape(1, 10)

def ours():
    import tvmrt
    assert tvmrt.Model(syslib).run(data=x)[0].tobytes() == want.tobytes(), "tvmrt, system-lib build"

def theirs():
    import tvm
    from tvm.contrib import graph_executor
    m = graph_executor.GraphModule(tvm.runtime.load_module(fx + "/lib.so")["default"](tvm.cpu()))
    m.set_input("data", x); m.run()
    assert m.get_output(0).numpy().tobytes() == want.tobytes(), "TVM's runtime"

for step in ([ours, theirs, ours] if first == "tvmrt" else [theirs, ours, theirs]):
    step()
print("ok")
"""


@pytest.mark.parametrize("first", ["tvmrt", "tvm"])
def test_a_system_lib_build_and_tvm_in_one_process_in_either_order(tmp_path, first):
    """A system-lib build calls the runtime's C API by name: the package answers those names for
    it alone (never by making its runtime global, which TVM's library would then bind to)."""
    syslib = syslib_so(tmp_path)
    pkg = package_only(tmp_path)
    out = subprocess.run(
        [TVM_PYTHON, "-c", SYSLIB_ORDERS, str(FIXTURES / "mlp_b1"), str(syslib), first],
        capture_output=True,
        text=True,
        env=env(PYTHONPATH=f"{TVM_WHEEL_DIR}:{pkg}"),
        timeout=300,
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
