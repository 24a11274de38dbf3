"""BYOC test models: a Relay function partitioned for TVM's own C source codegen (`ccompiler`, in
every TVM build) with a Relay constant inside the partition, so the artefact's module tree is
GraphExecutorFactory -> const_loader -> [library, the ccompiler module] and the constant reaches
the generated C++ through `__init_<symbol>`. Outputs from the compiler's own runtime (upstream's).

  eval "$(scripts/tvm_env.sh)"
  TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR $TVM_PYTHON scripts/make_byoc_fixtures.py \\
      --out tests/fixtures/byoc
"""

import argparse
import os

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor


def ccompiler_with_constant():
    x = relay.var("x", shape=(2, 4), dtype="float32")
    c = relay.const(np.arange(8, dtype="float32").reshape(2, 4) - 3.5)
    y = relay.nn.relu(relay.add(relay.multiply(x, c), c))
    return tvm.IRModule.from_expr(relay.Function([x], y))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    # The ops ccompiler takes (its C codegen handles add, subtract and multiply).
    for op in ("add", "multiply"):
        tvm.ir.register_op_attr(op, "target.ccompiler", lambda expr: True)
    mod = relay.transform.InferType()(ccompiler_with_constant())
    mod = relay.transform.AnnotateTarget(["ccompiler"])(mod)
    mod = relay.transform.MergeCompilerRegions()(mod)
    mod = relay.transform.PartitionGraph()(mod)
    target = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    d = os.path.join(a.out, "ccompiler")
    os.makedirs(d, exist_ok=True)
    lib.export_library(os.path.join(d, "lib.so"))
    x = (np.arange(8, dtype="float32").reshape(2, 4) / 4 - 1).astype("float32")
    m = graph_executor.GraphModule(tvm.runtime.load_module(os.path.join(d, "lib.so"))["default"](tvm.cpu()))
    m.set_input("x", x)
    m.run()
    out = m.get_output(0).numpy()
    x.tofile(os.path.join(d, "in_0.bin"))
    out.tofile(os.path.join(d, "out_0.bin"))
    with open(os.path.join(d, "manifest.txt"), "w") as fh:
        fh.write("model ccompiler\nfactory_weights yes\n")
        fh.write("input x float32 2 2 4 in_0.bin\noutput float32 2 2 4 out_0.bin\n")
    print("TVM %s: %s, outputs %s" % (tvm.__version__, d, out.ravel().tolist()))


if __name__ == "__main__":
    main()
