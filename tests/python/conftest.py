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
        self.input_dtypes = {}  # the manifest's dtype names (bfloat16's arrays are its bits, uint16)
        self.outputs = []
        for line in (self.dir / "manifest.txt").read_text().splitlines():
            tok = line.split()
            if tok[0] == "factory_weights":
                self.factory_weights = tok[1] == "yes"
            elif tok[0] == "input":
                self.inputs[tok[1]] = self._tensor(tok[2:])
                self.input_dtypes[tok[1]] = tok[2]
            elif tok[0] == "output":
                self.outputs.append(self._tensor(tok[1:]))

    def _tensor(self, tok):
        dtype, ndim = tok[0], int(tok[1])
        shape = [int(d) for d in tok[2 : 2 + ndim]]
        # numpy has no bfloat16: TVM's package reads and writes it as its bits, uint16.
        data = np.fromfile(self.dir / tok[2 + ndim], dtype="uint16" if dtype == "bfloat16" else dtype)
        return data.reshape(shape)

    def nd_input(self, tvm, name):
        """Input `name` as a TVM NDArray of the manifest's dtype."""
        v = self.inputs[name]
        return tvm.nd.empty(v.shape, self.input_dtypes[name]).copyfrom(v)

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
