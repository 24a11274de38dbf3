#!/usr/bin/env python3
"""Compiles the OpenCL test models with TVM 0.16 (target `opencl`, host `llvm`), and records upstream's
OpenCL outputs for them.

Two steps, because the wheel's compiler has no OpenCL runtime and upstream's OpenCL runtime
(`../shared/upstream/libtvm_runtime.so`) has no compiler:

  build      (the wheel's TVM)            exports lib.so, graph.json, params.bin and the inputs
  reference  (TVM's Python on upstream's  runs each model on `tvm.cl(0)` and writes out_<k>.bin and
              OpenCL runtime)             the manifest (the same format as make_fixtures.py's)

Run through scripts/make_fixtures.sh --opencl. Each model's CPU twin (the same weights and inputs,
target llvm) is built too, as `<name>_cpu`, so tests compare the device against the CPU as well.
"""
import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("TOPHUB_LOCATION", "NONE")

import numpy as np
import tvm

HOST = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"


def register_gpu_elementwise():
    """This fork's add/subtract/multiply/divide strategies have no GPU implementation (their
    generic schedules refuse GPU targets): give them TVM's injective GPU schedule (FIXTURES.md,
    "Models for OpenCL"). ResNet's residual adds need it; the small models do not."""
    from tvm import topi
    from tvm.relay.op import op as _op
    from tvm.relay.op.strategy import generic

    for name in ("add", "subtract", "multiply", "divide"):
        def strategy(attrs, inputs, out_type, target, compute=getattr(topi, name), name=name):  # noqa: B008 (bound per loop turn)
            s = _op.OpStrategy()
            s.add_implementation(generic.wrap_topi_compute(compute),
                                 generic.wrap_topi_schedule(topi.cuda.schedule_injective), name=name + ".gpu")
            return s
        getattr(generic, name + "_strategy").register(["cuda", "gpu"])(strategy)


def register_adreno_elementwise():
    """For TVM's Adreno target (`opencl -device=adreno`, texture memory): the same operators plus
    reshape and layout_transform, with TOPI's Adreno injective schedule, which writes one float4
    pixel per work item (the generic GPU schedule writes scalars into textures and gives wrong
    numbers; FIXTURES.md, "Models for TVM's Adreno target")."""
    from tvm import topi
    from tvm.relay.op import op as _op
    from tvm.relay.op.strategy import generic

    computes = {
        "reshape": lambda attrs, inputs, out_type: [topi.reshape(inputs[0], [int(d) for d in out_type.shape])],
        "layout_transform": lambda attrs, inputs, out_type: [
            topi.layout_transform(inputs[0], attrs.src_layout, attrs.dst_layout)],
    }
    for name in ("add", "subtract", "multiply", "divide"):
        computes[name] = lambda attrs, inputs, out_type, f=getattr(topi, name): [f(inputs[0], inputs[1])]  # noqa: B008 (bound per loop turn)
    for name, compute in computes.items():
        def strategy(attrs, inputs, out_type, target, compute=compute, name=name):
            s = _op.OpStrategy()
            s.add_implementation(compute, generic.wrap_topi_schedule(topi.adreno.schedule_injective),
                                 name=name + ".adreno")
            return s
        getattr(generic, name + "_strategy").register(["adreno"])(strategy)


def texture_convnet(rng):
    """Two convolutions in texture memory (activations `global.texture`, a bias
    `global.texture-weight`), a pooling back to a buffer."""
    from tvm import relay

    data = relay.var("data", shape=(1, 8, 16, 16))
    w1 = relay.var("conv1_weight", shape=(16, 8, 3, 3))
    b1 = relay.var("conv1_bias", shape=(16,))
    w2 = relay.var("conv2_weight", shape=(16, 16, 3, 3))
    x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, w1, padding=(1, 1), channels=16,
                                                        kernel_size=(3, 3)), b1))
    x = relay.nn.relu(relay.nn.conv2d(x, w2, padding=(1, 1), channels=16, kernel_size=(3, 3)))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(x), x)))
    params = {p.name_hint: tvm.nd.array(rng.uniform(-0.5, 0.5, [int(d) for d in p.checked_type.shape])
                                        .astype("float32"))
              for p in mod["main"].params if p.name_hint != "data"}
    return mod, params


def bench_models():
    """Benchmark models (never committed): the MLP (runtime overhead per run), MobileNet, and
    ResNet-18 with params unbound at batch 1 and 4 (one set of weights)."""
    import tvm.relay.testing  # noqa: F401
    from tvm import relay

    register_gpu_elementwise()
    t = relay.testing
    models = {}
    mod, params = t.mlp.get_workload(batch_size=1)
    models["mlp_cl"] = (mod, params, True)
    mod, params = t.mobilenet.get_workload(batch_size=1)
    models["mobilenet_cl"] = (mod, params, True)
    mod1, params = t.resnet.get_workload(num_layers=18, batch_size=1)
    mod4, _ = t.resnet.get_workload(num_layers=18, batch_size=4)
    models["resnet18_unbound_cl_b1"] = (mod1, params, False)
    models["resnet18_unbound_cl_b4"] = (mod4, params, False)
    # Texture builds (TVM's Adreno target), unbound: executors share the weights.
    models["resnet18_tex_cl_b1"] = (mod1, params, True)
    models["resnet18_tex_cl_b4"] = (mod4, params, True)
    mod, mobilenet_params = t.mobilenet.get_workload(batch_size=1)
    models["mobilenet_tex_cl"] = (mod, mobilenet_params, False)
    return models, np.random.default_rng(5)


def small_models():
    import tvm.relay.testing
    from tvm import relay

    rng = np.random.default_rng(31)
    models = {}
    mod1, mlp_params = relay.testing.mlp.get_workload(batch_size=1)
    mod4, _ = relay.testing.mlp.get_workload(batch_size=4)
    # Bound: the factory carries the weights.
    models["mlp_cl"] = (mod1, mlp_params, True)
    # Unbound, batch 1 and 4 with the same weights: load_params / share_params across variants.
    models["mlp_unbound_cl_b1"] = (mod1, mlp_params, False)
    models["mlp_unbound_cl_b4"] = (mod4, mlp_params, False)

    data = relay.var("data", shape=(1, 3, 16, 16))
    w1 = relay.var("conv1_weight", shape=(8, 3, 3, 3))
    b1 = relay.var("conv1_bias", shape=(8,))
    wd = relay.var("fc_weight", shape=(10, 8))
    x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, w1, padding=(1, 1), channels=8,
                                                        kernel_size=(3, 3)), b1))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    x = relay.nn.softmax(relay.nn.dense(x, wd))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(x), x)))
    params = {p.name_hint: tvm.nd.array(rng.uniform(-0.5, 0.5, [int(d) for d in p.checked_type.shape])
                                        .astype("float32"))
              for p in mod["main"].params if p.name_hint != "data"}
    # Unbound convnet.
    models["convnet_unbound_cl"] = (mod, params, False)

    # A weight-only operator (a transpose and scale of the weight, fused into one kernel): folded
    # once at load on the device.
    x = relay.var("x", shape=(2, 16))
    w = relay.var("w", shape=(16, 8))
    y = relay.nn.relu(relay.nn.dense(x, relay.transpose(w) * relay.const(2.0)))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], y)))
    models["fold_cl"] = (mod, {"w": tvm.nd.array(rng.uniform(-1, 1, (16, 8)).astype("float32"))}, False)

    # Heterogeneous: a dense on OpenCL, a CPU fallback operator in the middle (on_device), a softmax
    # back on OpenCL; the graph carries device_index and __copy nodes between the devices.
    x = relay.var("x", shape=(1, 16))
    w = relay.var("w", shape=(8, 16))
    y = relay.annotation.on_device(relay.nn.dense(x, w), tvm.cl(0))
    z = relay.annotation.on_device(relay.tanh(y) * relay.const(3.0), tvm.cpu())
    out = relay.nn.softmax(z)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], out)))
    models["hetero_cl"] = (mod, {"w": tvm.nd.array(rng.uniform(-1, 1, (8, 16)).astype("float32"))}, False)

    # Texture memory (TVM's Adreno target): unbound, so executors share the texture weights.
    models["convnet_tex_cl"] = (*texture_convnet(rng), False)
    # Bound: the factory's weights, some of them in texture scopes (a bias as `global.texture-weight`).
    models["convnet_tex_bound_cl"] = (*texture_convnet(rng), True)
    return models, rng


def build(out, only=None, bench=False):
    from tvm import relay

    register_adreno_elementwise()
    models, rng = bench_models() if bench else small_models()
    inputs_by_shape = {}
    for name, (mod, params, bind) in models.items():
        if only and name not in only:
            continue
        device = "opencl -device=adreno" if "_tex" in name else "opencl"
        targets = [("", tvm.target.Target(device, host=HOST))]
        if name == "hetero_cl":
            # OpenCL by default, the CPU where annotated.
            targets = [("", [tvm.target.Target("opencl", host=HOST), tvm.target.Target(HOST)])]
        if not bench and name != "hetero_cl":
            targets.append(("_cpu", tvm.target.Target(HOST)))
        for suffix, target in targets:
            d = os.path.join(out, name + suffix)
            if os.path.isdir(d):
                shutil.rmtree(d)
            os.makedirs(d)
            config = {"relay.fallback_device_type": 4} if isinstance(target, list) else {}
            with tvm.transform.PassContext(opt_level=3, config=config):
                lib = relay.build(mod, target=target, params=params if bind else None)
            lib.export_library(os.path.join(d, "lib.so"))
            with open(os.path.join(d, "graph.json"), "w") as f:
                f.write(lib.get_graph_json())
            nd = {k: (v if isinstance(v, tvm.nd.NDArray) else tvm.nd.array(v)) for k, v in params.items()}
            with open(os.path.join(d, "params.bin"), "wb") as f:
                f.write(relay.save_param_dict(lib.get_params() if bind else nd))
            ins = []
            for p in mod["main"].params:
                if p.name_hint in params:
                    continue
                shape = tuple(int(s) for s in p.checked_type.shape)
                key = (name, p.name_hint)
                if key not in inputs_by_shape:
                    inputs_by_shape[key] = rng.uniform(-1, 1, size=shape).astype(p.checked_type.dtype)
                arr = inputs_by_shape[key]
                fname = "in_%d.bin" % len(ins)
                arr.tofile(os.path.join(d, fname))
                ins.append({"name": p.name_hint, "dtype": str(arr.dtype), "shape": list(arr.shape), "file": fname})
            meta = {"model": name + suffix, "factory_weights": bind, "inputs": ins,
                    "device": ("opencl+cpu" if name == "hetero_cl" else "opencl") if suffix == "" else "cpu"}
            with open(os.path.join(d, "build.json"), "w") as f:
                json.dump(meta, f)
            print("built", name + suffix)


def reference(out):
    from tvm.contrib import graph_executor

    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        meta_path = os.path.join(d, "build.json")
        if not os.path.isfile(meta_path):
            continue
        with open(meta_path) as f:
            meta = json.load(f)
        devs = {"opencl": [tvm.cl(0)], "cpu": [tvm.cpu(0)], "opencl+cpu": [tvm.cl(0), tvm.cpu(0)]}[meta["device"]]
        dev = devs[0]
        lib = tvm.runtime.load_module(os.path.join(d, "lib.so"))
        m = graph_executor.GraphModule(lib["default"](*devs))
        if not meta["factory_weights"]:
            with open(os.path.join(d, "params.bin"), "rb") as f:
                m.load_params(bytearray(f.read()))
        lines = ["model %s" % meta["model"], "factory_weights %s" % ("yes" if meta["factory_weights"] else "no"),
                 "device %s" % meta["device"]]
        for i in meta["inputs"]:
            arr = np.fromfile(os.path.join(d, i["file"]), dtype=i["dtype"]).reshape(i["shape"])
            m.set_input(i["name"], arr)
            lines.append("input %s %s %d %s %s" % (i["name"], i["dtype"], len(i["shape"]),
                                                 " ".join(map(str, i["shape"])), i["file"]))
        m.run()
        for k in range(m.get_num_outputs()):
            o = m.get_output(k).numpy()
            o.tofile(os.path.join(d, "out_%d.bin" % k))
            lines.append("output %s %d %s out_%d.bin" % (o.dtype, o.ndim, " ".join(map(str, o.shape)), k))
        with open(os.path.join(d, "manifest.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        os.remove(meta_path) if os.environ.get("DROP_BUILD_JSON") else None
        print("reference", name, "on", dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["build", "reference"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="build: comma-separated model names (default: all)")
    ap.add_argument("--bench", action="store_true", help="build: the benchmark models instead")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.step == "build":
        build(args.out, args.only.split(",") if args.only else None, args.bench)
    else:
        reference(args.out)


if __name__ == "__main__":
    sys.exit(main())
