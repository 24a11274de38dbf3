"""`y = x + c` (x float32[4], c a bound constant) compiled by TVM 0.27: the model
bench/relax_calls.sh times calls of. Usage: relax_add_model.py OUT.so"""

import sys

import numpy as np
import tvm
from tvm import relax

tensor = getattr(relax, "TensorStructInfo", None) or relax.TensorType
x = relax.Var("x", tensor((4,), "float32"))
bb = relax.BlockBuilder()
with bb.function("main", [x]):
    with bb.dataflow():
        y = bb.emit_output(relax.op.add(x, relax.const(np.ones(4, "float32"))))
    bb.emit_func_output(y)
target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"})
tvm.compile(bb.get(), target).export_library(sys.argv[1])
