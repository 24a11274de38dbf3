"""Dense networks built as AOT artefacts with TVM's unified memory planner (tir.usmp), for the
check that every one either runs right or is refused at load (scripts/usmp_dense.sh): TVM sizes
kernels' vector buffers by their scalar element, so their stores land past the pools it plans.
Each network is data [batch, 64] -> dense(hidden) -> relu -> dense(10); each folder gets lib.so,
inputs.npz and want.npy (numpy's answer, in float64 then rounded).

  eval "$(scripts/tvm_env.sh)"
  TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR $TVM_PYTHON scripts/make_usmp_dense.py OUT
"""

import os
import sys

import numpy as np
import tvm
from tvm import relay
from tvm.relay.backend import Executor, Runtime

TARGETS = {
    "generic": "llvm -mtriple=x86_64-linux-gnu",
    "haswell": "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell",
    "avx512": "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512",
}
# (batch, hidden): the two the review found (1024 at batch 2, 256 at batch 8) and their neighbours.
SHAPES = [(1, 256), (2, 1024), (8, 256), (8, 64), (1, 1024), (4, 512), (3, 100)]


def build(batch, hidden, target, out):
    data = relay.var("data", shape=(batch, 64))
    w1 = relay.var("w1", shape=(hidden, 64))
    w2 = relay.var("w2", shape=(10, hidden))
    fn = relay.Function([data, w1, w2], relay.nn.dense(relay.nn.relu(relay.nn.dense(data, w1)), w2))
    rng = np.random.default_rng(batch * 10000 + hidden)
    w1v = rng.uniform(-0.5, 0.5, (hidden, 64)).astype("float32")
    w2v = rng.uniform(-0.5, 0.5, (10, hidden)).astype("float32")
    x = rng.uniform(-1, 1, (batch, 64)).astype("float32")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(fn))
    executor = Executor("aot", {"interface-api": "packed", "unpacked-api": False})
    with tvm.transform.PassContext(opt_level=3, config={"tir.usmp.enable": True}):
        lib = relay.build(mod, target=target, params={"w1": w1v, "w2": w2v}, executor=executor, runtime=Runtime("cpp"))
    os.makedirs(out, exist_ok=True)
    lib.export_library(os.path.join(out, "lib.so"))
    np.savez(os.path.join(out, "inputs.npz"), data=x)
    x64, w1_64, w2_64 = x.astype("float64"), w1v.astype("float64"), w2v.astype("float64")
    np.save(os.path.join(out, "want.npy"), (np.maximum(x64 @ w1_64.T, 0) @ w2_64.T).astype("float32"))


def main():
    out = sys.argv[1]
    for name, target in TARGETS.items():
        for batch, hidden in SHAPES:
            d = os.path.join(out, name, "b%d_h%d" % (batch, hidden))
            if not os.path.exists(os.path.join(d, "want.npy")):
                build(batch, hidden, target, d)
    print("built %d networks x %d targets in %s" % (len(SHAPES), len(TARGETS), out))


if __name__ == "__main__":
    main()
