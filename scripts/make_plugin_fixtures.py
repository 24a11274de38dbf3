"""A BYOC artefact holding a plug-in's module: the test plug-in (c_tests/cxx/plugin/test_plugin.cc,
written against TVM's C++ headers) is built for the compiler and loaded into it; a
`relay.ext.tvmrt_test_plugin` codegen registered here returns the plug-in's module for the partition,
so export_library serialises it by the plug-in's own SaveToBinary, under its type key. Loading the
artefact then needs the plug-in's `runtime.module.loadbinary_tvmrt_test_plugin`. The model:
z = relu(x * y + 1), the multiply offloaded to the plug-in. Outputs from the compiler's own runtime.

  eval "$(scripts/tvm_env.sh)"
  TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR $TVM_PYTHON scripts/make_plugin_fixtures.py \\
      --out tests/fixtures/byoc
"""

import argparse
import ctypes
import os
import subprocess
import tempfile

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_plugin_for_compiler(out):
    """The plug-in as the compiler's process loads it: its C++ ABI (the wheel's is the old
    std::string one) and no library named, its TVM symbols answered by the compiler's libtvm.so."""
    wheel = os.path.dirname(tvm.__file__)
    cmd = [
        "c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0",
        "-DDMLC_USE_LOGGING_LIBRARY=<tvm/runtime/logging.h>",
        "-I" + os.path.join(wheel, "include"), "-I" + os.path.join(wheel, "dlpack", "include"),
        "-I" + os.path.join(wheel, "dmlc-core", "include"),
        os.path.join(REPO, "c_tests", "cxx", "plugin", "test_plugin.cc"), "-o", out,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(out, ctypes.RTLD_GLOBAL)


@tvm.register_func("relay.ext.tvmrt_test_plugin")
def codegen(func):
    """The partition's function (one elementwise op on its two parameters) as the plug-in's module."""
    symbol = str(func.attrs["global_symbol"])
    op = func.body.op.name
    return tvm.get_global_func("tvmrt_test_plugin.create")(symbol, op)


def model():
    x = relay.var("x", shape=(2, 4), dtype="float32")
    y = relay.var("y", shape=(2, 4), dtype="float32")
    z = relay.nn.relu(relay.add(relay.multiply(x, y), relay.const(1.0)))
    return tvm.IRModule.from_expr(relay.Function([x, y], z))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plugin = build_plugin_for_compiler(os.path.join(tmp, "plugin.so"))
        tvm.ir.register_op_attr("multiply", "target.tvmrt_test_plugin", lambda expr: True)
        mod = relay.transform.InferType()(model())
        mod = relay.transform.AnnotateTarget(["tvmrt_test_plugin"])(mod)
        mod = relay.transform.MergeCompilerRegions()(mod)
        mod = relay.transform.PartitionGraph()(mod)
        target = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=target)
        d = os.path.join(a.out, "plugin")
        os.makedirs(d, exist_ok=True)
        lib.export_library(os.path.join(d, "lib.so"))
        x = (np.arange(8, dtype="float32").reshape(2, 4) / 4 - 1).astype("float32")
        y = (np.arange(8, dtype="float32").reshape(2, 4)[::-1] - 2.5).astype("float32")
        m = graph_executor.GraphModule(tvm.runtime.load_module(os.path.join(d, "lib.so"))["default"](tvm.cpu()))
        m.set_input("x", x)
        m.set_input("y", y)
        m.run()
        out = m.get_output(0).numpy()
        assert np.allclose(out, np.maximum(x * y + 1, 0)), out
        del m, plugin
    x.tofile(os.path.join(d, "in_0.bin"))
    y.tofile(os.path.join(d, "in_1.bin"))
    out.tofile(os.path.join(d, "out_0.bin"))
    with open(os.path.join(d, "manifest.txt"), "w") as fh:
        fh.write("model plugin\nfactory_weights yes\n")
        fh.write("input x float32 2 2 4 in_0.bin\ninput y float32 2 2 4 in_1.bin\n")
        fh.write("output float32 2 2 4 out_0.bin\n")
    print("TVM %s: %s, outputs %s" % (tvm.__version__, d, out.ravel().tolist()))


if __name__ == "__main__":
    main()
