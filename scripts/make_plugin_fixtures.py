"""A BYOC artefact holding a plug-in's module: the test plug-in (c_tests/cxx/plugin/test_plugin.cc,
written against TVM's C++ headers) is built for the compiler and loaded into it; a
`relay.ext.tvmrt_test_plugin` codegen registered here returns the plug-in's module for the partition,
so export_library serialises it by the plug-in's own SaveToBinary, under its type key. Loading the
artefact then needs the plug-in's `runtime.module.loadbinary_tvmrt_test_plugin`. The model:
z = relu(x * y + 1), the multiply offloaded to the plug-in. Outputs from the compiler's own runtime.

`byoc/json` is the same for a BYOC JSON backend (c_tests/cxx/plugin/json_plugin.cc, a subclass of
upstream's JSONRuntimeBase; TVM_JSON_RUNTIME_INCLUDE from scripts/tvm_env.sh names its header): the
codegen here writes the partition's JSON graph, and its constant reaches the backend through
const_loader and `__init_`.

  eval "$(scripts/tvm_env.sh)"
  TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR $TVM_PYTHON scripts/make_plugin_fixtures.py \\
      --out tests/fixtures/byoc
"""

import argparse
import ctypes
import json
import os
import subprocess
import tempfile

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_plugin_for_compiler(source, out):
    """The plug-in as the compiler's process loads it: its C++ ABI (the wheel's is the old
    std::string ABI) and no library named, its TVM symbols answered by the compiler's libtvm.so."""
    wheel = os.path.dirname(tvm.__file__)
    cmd = [
        "c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=0",
        "-DDMLC_USE_LOGGING_LIBRARY=<tvm/runtime/logging.h>",
        "-I" + os.path.join(wheel, "include"), "-I" + os.path.join(wheel, "dlpack", "include"),
        "-I" + os.path.join(wheel, "dmlc-core", "include"), "-I" + os.environ.get("TVM_JSON_RUNTIME_INCLUDE", "."),
        os.path.join(REPO, "c_tests", "cxx", "plugin", source), "-o", out,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(out, ctypes.RTLD_GLOBAL)


@tvm.register_func("relay.ext.tvmrt_json")
def json_codegen(func):
    """The partition as the JSON graph upstream's JSONRuntimeBase reads: its parameters as input
    nodes, its constants as const nodes (named as the compiler's default constant updater names
    them, `<symbol>_const_<k>` in the order it meets them), its calls as kernel nodes."""
    symbol = str(func.attrs["global_symbol"])
    nodes, const_names, ids = [], [], {}

    def tensor_attrs(t):
        return {"shape": [[[int(d) for d in t.shape]]], "dtype": [[str(t.dtype)]]}

    for p in func.params:
        ids[p] = len(nodes)
        nodes.append({"op": "input", "name": p.name_hint, "attrs": tensor_attrs(p.checked_type)})

    def visit(e):
        if e in ids:
            return ids[e]
        if isinstance(e, relay.Constant):
            name = "%s_const_%d" % (symbol, len(const_names))
            const_names.append(name)
            ids[e] = len(nodes)
            nodes.append({"op": "const", "name": name, "attrs": tensor_attrs(e.checked_type)})
            return ids[e]
        inputs = [[visit(a), 0, 0] for a in e.args]
        ids[e] = len(nodes)
        attrs = {"num_inputs": str(len(inputs)), "num_outputs": "1", **tensor_attrs(e.checked_type)}
        nodes.append({"op": "kernel", "name": e.op.name, "inputs": inputs, "attrs": attrs})
        return ids[e]

    head = visit(func.body)
    graph = {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] in ("input", "const")],
        "heads": [[head, 0, 0]],
        "node_row_ptr": list(range(len(nodes) + 1)),
    }
    return tvm.get_global_func("tvmrt_json.create")(symbol, json.dumps(graph), const_names)


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


def json_model():
    """relu(x * c - y), the multiply and subtract (with the constant) offloaded to the JSON backend."""
    x = relay.var("x", shape=(2, 4), dtype="float32")
    y = relay.var("y", shape=(2, 4), dtype="float32")
    c = relay.const((np.arange(8, dtype="float32").reshape(2, 4) - 3) / 2)
    z = relay.nn.relu(relay.subtract(relay.multiply(x, c), y))
    return tvm.IRModule.from_expr(relay.Function([x, y], z)), c.data.numpy()


def build_json(out):
    with tempfile.TemporaryDirectory() as tmp:
        plugin = build_plugin_for_compiler("json_plugin.cc", os.path.join(tmp, "json_plugin.so"))
        for op in ("multiply", "subtract"):
            tvm.ir.register_op_attr(op, "target.tvmrt_json", lambda expr: True)
        model, c = json_model()
        mod = relay.transform.InferType()(model)
        mod = relay.transform.AnnotateTarget(["tvmrt_json"])(mod)
        mod = relay.transform.MergeCompilerRegions()(mod)
        mod = relay.transform.PartitionGraph()(mod)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
        d = os.path.join(out, "json")
        os.makedirs(d, exist_ok=True)
        lib.export_library(os.path.join(d, "lib.so"))
        x = (np.arange(8, dtype="float32").reshape(2, 4) / 4 - 1).astype("float32")
        y = np.full((2, 4), -0.25, dtype="float32")
        m = graph_executor.GraphModule(tvm.runtime.load_module(os.path.join(d, "lib.so"))["default"](tvm.cpu()))
        m.set_input("x", x)
        m.set_input("y", y)
        m.run()
        got = m.get_output(0).numpy()
        assert np.allclose(got, np.maximum(x * c - y, 0)), got
        del m, plugin
    x.tofile(os.path.join(d, "in_0.bin"))
    y.tofile(os.path.join(d, "in_1.bin"))
    got.tofile(os.path.join(d, "out_0.bin"))
    with open(os.path.join(d, "manifest.txt"), "w") as fh:
        fh.write("model json\nfactory_weights yes\n")
        fh.write("input x float32 2 2 4 in_0.bin\ninput y float32 2 2 4 in_1.bin\n")
        fh.write("output float32 2 2 4 out_0.bin\n")
    print("TVM %s: %s, outputs %s" % (tvm.__version__, d, got.ravel().tolist()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", choices=("plugin", "json"))
    a = p.parse_args()
    if a.only != "plugin":
        build_json(a.out)
    if a.only == "json":
        return
    with tempfile.TemporaryDirectory() as tmp:
        plugin = build_plugin_for_compiler("test_plugin.cc", os.path.join(tmp, "plugin.so"))
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
