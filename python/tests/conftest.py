"""Fixtures for the package's tests: the compiled models in tests/fixtures (built by TVM 0.16,
with upstream's outputs), read through their manifests. The package under test is the installed
one (a wheel in a fresh venv), never the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tvmrt

# Ray on loopback only: with this (Ray's switch for single-machine clusters), every address Ray
# picks for a node, the driver's connection included, is 127.0.0.1. Read when Ray is imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

FIXTURES = Path(os.environ.get("TVMRT_FIXTURES", Path(__file__).resolve().parents[2] / "tests" / "fixtures"))


def pytest_report_header(config):
    return f"tvmrt {tvmrt.__version__} from {Path(tvmrt.__file__).parent}, numpy {np.__version__}"


def pytest_sessionstart(session):
    if os.environ.get("TVMRT_TEST_SOURCE") != "1":
        assert "site-packages" in tvmrt.__file__, f"testing {tvmrt.__file__}, not an installed package"


@dataclass
class Fixture:
    name: str
    dir: Path
    inputs: dict[str, np.ndarray]
    outputs: list[np.ndarray]
    device: str

    @property
    def lib(self) -> Path:
        return self.dir / "lib.so"


def load(name: str) -> Fixture:
    d = FIXTURES / name
    ins: dict[str, np.ndarray] = {}
    outs: list[np.ndarray] = []
    device = "cpu"
    for line in (d / "manifest.txt").read_text().splitlines():
        w = line.split()
        if w[0] == "input":
            nd = int(w[3])
            shape = tuple(int(x) for x in w[4 : 4 + nd])
            ins[w[1]] = np.fromfile(d / w[4 + nd], dtype=tvmrt_dtype(w[2])).reshape(shape)
        elif w[0] == "output":
            nd = int(w[2])
            shape = tuple(int(x) for x in w[3 : 3 + nd])
            outs.append(np.fromfile(d / w[3 + nd], dtype=tvmrt_dtype(w[1])).reshape(shape))
        elif w[0] == "device":
            device = w[1]
    return Fixture(name, d, ins, outs, device)


def tvmrt_dtype(name: str) -> np.dtype:
    return np.dtype(np.bool_) if name in ("bool", "uint1") else np.dtype(name)


def assert_outputs(got, want, name, exact=True):
    assert len(got) == len(want), name
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, i, g.shape, w.shape, g.dtype, w.dtype)
        if exact:
            assert g.tobytes() == w.tobytes(), f"{name}: output {i} differs from upstream's"
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name}: output {i}")


def have_opencl() -> bool:
    try:
        tvmrt.Model(FIXTURES / "opencl" / "mlp_cl", device="opencl")
        return True
    except tvmrt.TVMRTError as e:
        assert os.environ.get("TVM_RT_REQUIRE_OPENCL") != "1", f"TVM_RT_REQUIRE_OPENCL=1 but: {e}"
        return False


@pytest.fixture(scope="session")
def opencl():
    if not have_opencl():
        pytest.skip("no OpenCL device")


def syslib_so(tmp_path: Path) -> Path:
    """A folder holding the system-lib fixture linked into a shared object (lib.so: its operators
    register themselves by name at load), with its graph and params (skipped without a C compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to link the system-lib objects")
    d = tmp_path / "syslib"
    d.mkdir()
    src = FIXTURES / "mlp_syslib"
    subprocess.check_call([cc, "-shared", "-o", str(d / "lib.so"), str(src / "lib0.o"), str(src / "devc.o")])
    for n in ("graph.json", "params.bin"):
        shutil.copy(src / n, d / n)
    return d
