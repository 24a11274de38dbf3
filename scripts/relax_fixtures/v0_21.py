"""TVM 0.21 (xtc-tvm-python-bindings 0.21.0.8): struct infos, relax.build, tvm.nd; the in-tree ffi."""

import sys

import tvm
from tvm import relax

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common


class Api:
    tir = tvm.tir

    @staticmethod
    def tensor(shape, dtype):
        return relax.TensorStructInfo(shape, dtype)

    @staticmethod
    def schedule(func):
        return tvm.tir.Schedule(func)

    @staticmethod
    def var(name, info):
        return relax.Var(name, info)

    @staticmethod
    def sym(name):
        return tvm.tir.Var(name, "int64")

    @staticmethod
    def build(mod, target):
        return relax.build(mod, target)

    @staticmethod
    def array(a):
        return tvm.nd.array(a)


if __name__ == "__main__":
    common.main(tvm, relax, Api)
