"""TVM 0.25 to 0.27 (apache-tvm wheels; 0.25 with apache-tvm-ffi 0.1.12 pinned): tvm.compile,
tvm.runtime.tensor; 0.27 renamed struct infos to types (relax.TensorType) and tvm.tir to tvm.tirx."""

import sys

import tvm
from tvm import relax

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import common

TIR = getattr(tvm, "tirx", None) or tvm.tir


class Api:
    tir = TIR

    @staticmethod
    def tensor(shape, dtype):
        # 0.25's relax.TensorType is the old type; struct infos are what it builds with.
        make = getattr(relax, "TensorStructInfo", None) or relax.TensorType
        return make(shape, dtype)

    @staticmethod
    def schedule(func):
        from tvm import s_tir

        return s_tir.Schedule(func)

    @staticmethod
    def var(name, info):
        return relax.Var(name, info)

    @staticmethod
    def sym(name):
        return TIR.Var(name, "int64")

    @staticmethod
    def build(mod, target):
        try:
            return tvm.compile(mod, target)
        except ValueError:  # 0.27 takes a target as a dict only
            t = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"})
            return tvm.compile(mod, t)

    @staticmethod
    def array(a):
        return tvm.runtime.tensor(a)


if __name__ == "__main__":
    common.main(tvm, relax, Api)
