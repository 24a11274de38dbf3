"""TVM's Python package on this project's libtvm_runtime.so. Run through scripts/test_python.sh,
which sets TVM_FFI=ctypes, TVM_USE_RUNTIME_LIB=1, TVM_LIBRARY_PATH and PYTHONPATH before Python
starts (the package reads them at import)."""
import os
import pathlib

import numpy as np
import pytest

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"


class Fixture:
    def __init__(self, name):
        self.name = name
        self.dir = FIXTURES / name
        self.factory_weights = True
        self.inputs = {}
        self.outputs = []
        for line in (self.dir / "manifest.txt").read_text().splitlines():
            tok = line.split()
            if tok[0] == "factory_weights":
                self.factory_weights = tok[1] == "yes"
            elif tok[0] == "input":
                self.inputs[tok[1]] = self._tensor(tok[2:])
            elif tok[0] == "output":
                self.outputs.append(self._tensor(tok[1:]))

    def _tensor(self, tok):
        dtype, ndim = tok[0], int(tok[1])
        shape = [int(d) for d in tok[2 : 2 + ndim]]
        data = np.fromfile(self.dir / tok[2 + ndim], dtype="bool" if dtype == "bool" else dtype)
        return data.reshape(shape)

    @property
    def lib_path(self):
        return str(self.dir / "lib.so")

    def params(self):
        return (self.dir / "params.bin").read_bytes()

    def graph_json(self):
        return (self.dir / "graph.json").read_text()


def all_fixtures():
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "lib.so").exists())


@pytest.fixture(scope="session")
def tvm():
    import tvm as tvm_module

    lib_path = os.path.realpath(tvm_module._ffi.base._LIB._name)
    expected = os.path.realpath(os.path.join(os.environ["TVM_LIBRARY_PATH"], "libtvm_runtime.so"))
    assert lib_path == expected, f"Python loaded {lib_path}, not this project's library"
    return tvm_module
