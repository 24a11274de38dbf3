"""TVM 0.21 (xtc-tvm-python-bindings 0.21.0.8): the same Python API as 0.19's (v0_19.py), over
the in-tree ffi."""

import sys

import tvm
from tvm import relax

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common
from v0_19 import Api

if __name__ == "__main__":
    common.main(tvm, relax, Api)
