"""AOT executor artefacts (`relay.build(..., executor=Executor("aot"), runtime=Runtime("cpp"))` and
export_library), one folder per option a C++-runtime build takes: the default (constants linked
into the library), link-params off (the weights travel in the factory), workspace alignments 64 and
128, the unified memory planner (USMP: workspace and constant pools the executor allocates; its
MLP's kernels store past the end of the workspace pool it plans (src/aot/overrun.rs): TVM 0.16's runtime records the
outputs, then aborts on its corrupted heap), and a module name other than `default`. Two small
networks: an MLP and a conv net. Outputs from the compiler's own runtime (upstream's AotModule).

  eval "$(scripts/tvm_env.sh)"
  TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR $TVM_PYTHON scripts/make_aot_fixtures.py \\
      --out tests/fixtures/aot/0.16

TVM 0.19 (`pip install "xtc-tvm-python-bindings==0.19.0.12"` in a CPython 3.11 venv) builds the same
with `--target "llvm -mcpu=haswell"`.
"""

import argparse
import os

import numpy as np
import tvm
from tvm import relay
from tvm.relay.backend import Executor, Runtime


def mlp():
    data = relay.var("data", shape=(1, 32))
    w1 = relay.var("fc1_weight", shape=(24, 32))
    w2 = relay.var("fc2_weight", shape=(10, 24))
    x = relay.nn.relu(relay.nn.dense(data, w1))
    x = relay.nn.softmax(relay.nn.dense(x, w2))
    return relay.Function([data, w1, w2], x), {"fc1_weight": (24, 32), "fc2_weight": (10, 24)}, {"data": (1, 32)}


def convnet():
    data = relay.var("input.1", shape=(1, 3, 12, 12))
    w1 = relay.var("conv_weight", shape=(6, 3, 3, 3))
    wd = relay.var("fc_weight", shape=(10, 6))
    x = relay.nn.relu(relay.nn.conv2d(data, w1, padding=(1, 1), channels=6, kernel_size=(3, 3)))
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    x = relay.nn.dense(x, wd)
    # Two outputs: the logits and their softmax.
    out = relay.Tuple([x, relay.nn.softmax(x)])
    shapes = {"conv_weight": (6, 3, 3, 3), "fc_weight": (10, 6)}
    return relay.Function([data, w1, wd], out), shapes, {"input.1": (1, 3, 12, 12)}


VARIANTS = {
    # name: (network, executor options, pass config, module name)
    "mlp": (mlp, {}, {}, "default"),
    "mlp_unlinked": (mlp, {"link-params": False}, {}, "default"),
    "convnet": (convnet, {}, {}, "default"),
    "convnet_ws64": (convnet, {"workspace-byte-alignment": 64}, {}, "default"),
    "convnet_ws128": (convnet, {"workspace-byte-alignment": 128}, {}, "default"),
    "convnet_usmp": (convnet, {}, {"tir.usmp.enable": True}, "default"),
    "mlp_usmp": (mlp, {}, {"tir.usmp.enable": True}, "default"),
    "mlp_named": (mlp, {}, {}, "net"),
}


def workload(net):
    """A benchmark network of relay.testing: (function, weight shapes, input shapes), with its
    weights' values fixed below like the fixtures'."""
    from tvm.relay import testing

    if net == "mlp":
        mod, params = testing.mlp.get_workload(batch_size=1)
    else:
        mod, params = testing.resnet.get_workload(num_layers=18, batch_size=1, image_shape=(3, 112, 112))
    fn = mod["main"]
    weights = {k: tuple(v.shape) for k, v in params.items()}
    inputs = {p.name_hint: tuple(int(d) for d in p.checked_type.shape) for p in fn.params if p.name_hint not in weights}
    return fn, weights, inputs


# Benchmark builds (--bench, never committed): each network as an AOT build, an AOT build with USMP
# (its weights in the constant pool), and a graph-executor build of the same.
BENCH = {
    f"{net}_{kind}": (lambda net=net: workload(net), opts, cfg, "default")
    for net in ("mlp", "resnet18")
    for kind, opts, cfg in (("aot", {}, {}), ("aot_usmp", {}, {"tir.usmp.enable": True}), ("graph", None, {}))
}


def build(name, target, out):
    network, options, config, mod_name = VARIANTS[name] if name in VARIANTS else BENCH[name]
    fn, weight_shapes, input_shapes = network()
    rng = np.random.default_rng(sum(map(ord, name)))
    params = {k: rng.uniform(-0.5, 0.5, s).astype("float32") for k, s in weight_shapes.items()}
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(fn))
    d = os.path.join(out, name)
    if options is None:  # the graph executor's build of a benchmark network
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=target, params={k: tvm.nd.array(v) for k, v in params.items()})
        lib.export_library(os.path.join(out, name, "lib.so"))
        return
    executor = Executor("aot", {"interface-api": "packed", "unpacked-api": False, **options})
    with tvm.transform.PassContext(opt_level=3, config=config):
        lib = relay.build(mod, target=target, params=params, executor=executor, runtime=Runtime("cpp"),
                          mod_name=mod_name)
    os.makedirs(d, exist_ok=True)
    lib.export_library(os.path.join(d, "lib.so"))
    loaded = tvm.runtime.load_module(os.path.join(d, "lib.so"))
    m = tvm.runtime.executor.AotModule(loaded[mod_name](tvm.cpu(0)))
    lines = ["model %s" % name, "executor aot", "module_name %s" % mod_name]
    for i, (k, s) in enumerate(input_shapes.items()):
        x = rng.uniform(-1, 1, s).astype("float32")
        m.set_input(k, x)
        x.tofile(os.path.join(d, "in_%d.bin" % i))
        lines.append("input %s float32 %d %s in_%d.bin" % (k, len(s), " ".join(map(str, s)), i))
    m.run()
    for i in range(m.get_num_outputs()):
        y = m.get_output(i).numpy()
        y.tofile(os.path.join(d, "out_%d.bin" % i))
        lines.append("output %s %d %s out_%d.bin" % (y.dtype, y.ndim, " ".join(map(str, y.shape)), i))
    with open(os.path.join(d, "manifest.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("TVM %s: %s (%d inputs, %d outputs)" % (tvm.__version__, d, m.get_num_inputs(), m.get_num_outputs()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--target", default="llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--bench", action="store_true", help="the benchmark builds (bench/aot_bench.sh)")
    a = p.parse_args()
    for name in a.only or sorted(BENCH if a.bench else VARIANTS):
        os.makedirs(os.path.join(a.out, name), exist_ok=True)
        build(name, a.target, a.out)


if __name__ == "__main__":
    main()
