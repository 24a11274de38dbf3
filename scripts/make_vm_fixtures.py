"""Relay VM test models (relay.vm.compile), built by whichever TVM runs this script (0.8 to 0.19),
with each one's outputs as that TVM's own VM computes them, several input shapes per model.

Runs under every compiler the fixtures come from, so it is written for Python 3.6 (TVM 0.8's
wheel is cp36-only). scripts/make_vm_fixtures.sh runs it under each.

A model folder holds `vm.so` (the executable exported whole: `exe.mod.export_library`), for some
also the split form (`code.ro` and `lib.so`, from `exe.save()`), and `manifest.txt`:

    version <the compiler's TVM version>
    function main
    params <name> ...
    case <k>
    input <name> <dtype> <ndim> <dims...> <file>
    output <dtype> <ndim> <dims...> <file>      (the result's tensors, tuples flattened in order)
    structure <the result's nesting: t for a tensor, (..) for a tuple>
"""

import argparse
import json
import os
import sys

import numpy as np
import tvm
from tvm.runtime import vm as rvm

if "--references-on-upstream" not in sys.argv:  # a runtime-only library has no compiler
    from tvm import relay


def cpu_target():
    if os.environ.get("TVM_VM_FIXTURE_TARGET"):
        return os.environ["TVM_VM_FIXTURE_TARGET"]
    return "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"


RNG = np.random.RandomState(7)


def weights(*shape):
    return (RNG.uniform(-1, 1, shape)).astype("float32")


def mlp_dyn():
    """A batch left Any; a tuple output (the activations and their row sums)."""
    x = relay.var("data", shape=(relay.Any(), 16), dtype="float32")
    w = relay.var("w", shape=(8, 16), dtype="float32")
    b = relay.var("b", shape=(8,), dtype="float32")
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b))
    f = relay.Function([x, w, b], relay.Tuple([y, relay.sum(y, axis=1)]))
    params = {"w": weights(8, 16), "b": weights(8)}
    cases = [{"data": RNG.rand(n, 16).astype("float32")} for n in (1, 3, 7)]
    return f, params, cases


def seq_dyn():
    """A sequence length left Any: a projection of every step, and its mean over the steps."""
    x = relay.var("tokens", shape=(1, relay.Any(), 8), dtype="float32")
    w = relay.var("proj", shape=(4, 8), dtype="float32")
    h = relay.nn.relu(relay.nn.dense(relay.reshape(x, (-1, 8)), w))
    h3 = relay.reshape(h, (1, -1, 4))
    f = relay.Function([x, w], relay.Tuple([h3, relay.mean(h3, axis=1)]))
    cases = [{"tokens": RNG.rand(1, n, 8).astype("float32")} for n in (1, 5, 12)]
    return f, {"proj": weights(4, 8)}, cases


def nms_head():
    """A detection head whose number of boxes follows the data: valid counts, non-maximum
    suppression, then the boxes kept (their count known only at run time)."""
    data = relay.var("boxes", shape=(1, 16, 6), dtype="float32")
    ct, d, ind = relay.vision.get_valid_counts(data, score_threshold=0.2, id_index=0, score_index=1)
    kept = relay.vision.non_max_suppression(
        d, ct, ind, max_output_size=-1, iou_threshold=0.5, force_suppress=True, top_k=-1,
        coord_start=2, score_index=1, id_index=0, return_indices=False, invalid_to_bottom=True,
    )
    scores = relay.strided_slice(kept, begin=[0, 0, 1], end=[1, 16, 2])
    idx = relay.argwhere(relay.greater(relay.reshape(scores, (16,)), relay.const(0.0)))
    rows = relay.take(relay.reshape(kept, (16, 6)), relay.reshape(idx, (-1,)), axis=0)
    f = relay.Function([data], rows)

    def boxes(seed, n_valid):
        r = np.random.RandomState(seed)
        b = np.zeros((1, 16, 6), "float32")
        b[0, :, 0] = r.randint(0, 3, 16)
        b[0, :, 1] = r.uniform(0, 1, 16)
        b[0, n_valid:, 1] = 0.05
        xy = r.uniform(0, 8, (16, 2))
        b[0, :, 2:4] = xy
        b[0, :, 4:6] = xy + r.uniform(1, 4, (16, 2))
        return b

    return f, {}, [{"boxes": boxes(1, 16)}, {"boxes": boxes(2, 9)}, {"boxes": boxes(3, 3)}]


def control():
    """Control flow over tensors: an If on the data, and a loop run `n` times (a recursive
    function the VM calls with Invoke)."""
    x = relay.var("x", shape=(4,), dtype="float32")
    n = relay.var("n", shape=(), dtype="int32")
    i, acc = relay.var("i", shape=(), dtype="int32"), relay.var("acc", shape=(4,), dtype="float32")
    ln, lx = relay.var("ln", shape=(), dtype="int32"), relay.var("lx", shape=(4,), dtype="float32")
    loop = relay.GlobalVar("loop")
    step = [relay.add(i, relay.const(1)), relay.add(relay.multiply(acc, relay.const(1.5)), lx), ln, lx]
    body = relay.If(relay.less(i, ln), relay.Call(loop, step), acc)
    mod = tvm.IRModule()
    mod[loop] = relay.Function([i, acc, ln, lx], body, ret_type=relay.TensorType((4,), "float32"))
    y = relay.Call(loop, [relay.const(0), relay.zeros_like(x), n, x])
    cond = relay.If(relay.greater(relay.sum(x), relay.const(0.0)), relay.exp(y), relay.negative(y))
    mod["main"] = relay.Function([x, n], relay.Tuple([cond, relay.Tuple([y, relay.sum(y)])]))
    cases = [
        {"x": np.array([0.5, -0.25, 1.0, 0.1], "float32"), "n": np.array(3, "int32")},
        {"x": np.array([-1.0, 0.25, -0.5, 0.2], "float32"), "n": np.array(5, "int32")},
        {"x": np.array([0.1, 0.2, 0.3, 0.4], "float32"), "n": np.array(0, "int32")},
    ]
    return mod, {}, cases


def conv_static():
    """Static shapes through the VM: a small conv net (what a ResNet compiled for the VM is)."""
    x = relay.var("image", shape=(1, 3, 16, 16), dtype="float32")
    w1 = relay.var("w1", shape=(8, 3, 3, 3), dtype="float32")
    w2 = relay.var("w2", shape=(8, 8, 3, 3), dtype="float32")
    h = relay.nn.relu(relay.nn.conv2d(x, w1, kernel_size=(3, 3), channels=8, padding=(1, 1)))
    h = relay.nn.relu(relay.nn.conv2d(h, w2, kernel_size=(3, 3), channels=8, padding=(1, 1)))
    y = relay.nn.softmax(relay.nn.batch_flatten(relay.nn.global_avg_pool2d(h)))
    f = relay.Function([x, w1, w2], y)
    params = {"w1": weights(8, 3, 3, 3), "w2": weights(8, 8, 3, 3)}
    return f, params, [{"image": RNG.rand(1, 3, 16, 16).astype("float32")}]


def resnet18():
    """Benchmarks: ResNet-18 through the VM (static shapes, 47 MB of constants)."""
    from tvm.relay import testing

    mod, params = testing.resnet.get_workload(num_layers=18, batch_size=1)
    return mod, params, [{"data": RNG.rand(1, 3, 224, 224).astype("float32")}]


def mlp_big_dyn():
    """Benchmarks: a dynamic-batch MLP of 784-1024-1024-10 (5 MB of constants)."""
    x = relay.var("data", shape=(relay.Any(), 784), dtype="float32")
    sizes = [784, 1024, 1024, 10]
    params, h, args = {}, x, [x]
    for i in range(3):
        w = relay.var("w%d" % i, shape=(sizes[i + 1], sizes[i]), dtype="float32")
        args.append(w)
        params["w%d" % i] = weights(sizes[i + 1], sizes[i]) * 0.05
        h = relay.nn.dense(h, w)
        if i < 2:
            h = relay.nn.relu(h)
    f = relay.Function(args, relay.nn.softmax(h))
    return f, params, [{"data": RNG.rand(n, 784).astype("float32")} for n in (1, 8)]


BENCH_MODELS = {"resnet18": resnet18, "mlp_big_dyn": mlp_big_dyn, "loop": control, "nms": nms_head}

MODELS = {"mlp_dyn": mlp_dyn, "seq_dyn": seq_dyn, "nms_head": nms_head, "control": control, "conv_static": conv_static}
# Models also written in the split form (code.ro + lib.so).
SPLIT = ("mlp_dyn",)


def flatten(obj, out):
    """The result's tensors in order, and its nesting."""
    if isinstance(obj, tvm.runtime.container.ADT):
        return "(" + "".join(flatten(obj[i], out) for i in range(len(obj))) + ")"
    out.append(obj.asnumpy())
    return "t"


def dims(a):
    return "%d %s" % (a.ndim, " ".join(str(d) for d in a.shape)) if a.ndim else "0"


def dtype_name(a):
    return "bool" if a.dtype == np.bool_ else str(a.dtype)


OPENCL_MODELS = ("mlp_dyn", "control")


def opencl_target():
    return tvm.target.Target("opencl", host=cpu_target())


def register_gpu_elementwise():
    """The hhb fork's add/subtract/multiply/divide strategies refuse GPU targets: TVM's injective
    GPU schedule for them (as scripts/make_opencl_fixtures.py does)."""
    from tvm import topi
    from tvm.relay.op import op as _op
    from tvm.relay.op.strategy import generic

    for name in ("add", "subtract", "multiply", "divide"):

        def strategy(attrs, inputs, out_type, target, compute=getattr(topi, name), name=name):  # noqa: B008
            s = _op.OpStrategy()
            s.add_implementation(
                generic.wrap_topi_compute(compute), generic.wrap_topi_schedule(topi.cuda.schedule_injective), name=name
            )
            return s

        getattr(generic, name + "_strategy").register(["cuda", "gpu"])(strategy)


def relay_model(name):
    f, params, cases = {**MODELS, **BENCH_MODELS}[name]()
    return (f if isinstance(f, tvm.IRModule) else tvm.IRModule.from_expr(f)), params, cases


def compile_model(name, opencl):
    mod, params, cases = relay_model(name)
    with tvm.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target=opencl_target() if opencl else cpu_target(), params=params)
    return exe, cases, mod, params


def write_split(exe, d):
    code, lib = exe.save()
    with open(os.path.join(d, "code.ro"), "wb") as fh:
        fh.write(code)
    lib.export_library(os.path.join(d, "lib.so"))


def write_manifest(d, version, params_of, cases, results):
    """`results`: per case, the result's tensors and nesting (None: not computed yet)."""
    lines = ["version %s" % version, "function main", "params " + " ".join(params_of)]
    for k, feed in enumerate(cases):
        lines.append("case %d" % k)
        for n, (key, value) in enumerate(feed.items()):
            fname = "in_%d_%d.bin" % (k, n)
            value.tofile(os.path.join(d, fname))
            lines.append("input %s %s %s %s" % (key, dtype_name(value), dims(value), fname))
        if results[k] is None:
            continue
        outs, structure = results[k]
        for n, o in enumerate(outs):
            fname = "out_%d_%d.bin" % (k, n)
            o.tofile(os.path.join(d, fname))
            lines.append("output %s %s %s" % (dtype_name(o), dims(o), fname))
        lines.append("structure " + structure)
    with open(os.path.join(d, "manifest.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def tensor_types(t):
    """The tensor types of a (possibly nested) tuple type, in order."""
    if isinstance(t, relay.TupleType):
        return [x for f in t.fields for x in tensor_types(f)]
    return [t]


def meta_of(t, name):
    return {"name": name, "dtype": t.dtype, "shape": [-1 if isinstance(d, tvm.tir.Any) else int(d) for d in t.shape]}


def write_meta(d, mod, params):
    """What a VM executable does not record, beside it as a DLR-style ``model.meta``: each input's
    name, dtype and shape (-1 where the model leaves it open) and each output's, the tuple result
    flattened in order (what tvmrt.Model and Serve check requests against and describe)."""
    main = relay.transform.InferType()(mod)["main"]
    inputs = [meta_of(p.checked_type, p.name_hint) for p in main.params if p.name_hint not in params]
    ret = tensor_types(main.checked_type.ret_type)
    outputs = [meta_of(t, "output_%d" % k) for k, t in enumerate(ret)]
    with open(os.path.join(d, "model.meta"), "w") as fh:
        json.dump({"Model": {"Inputs": inputs, "Outputs": outputs}}, fh, indent=1)
        fh.write("\n")


def run_cases(vm, cases):
    results = []
    for feed in cases:
        outs = []
        structure = flatten(vm.invoke("main", **feed), outs)
        results.append((outs, structure))
    return results


def build(name, out_dir, opencl=False, run=True):
    exe, cases, mod, params = compile_model(name, opencl)
    d = os.path.join(out_dir, name)
    if not os.path.isdir(d):
        os.makedirs(d)
    write_meta(d, mod, params)
    exe.mod.export_library(os.path.join(d, "vm.so"))
    if opencl or name in SPLIT or name in BENCH_MODELS:
        write_split(exe, d)
    arity = exe.mod["get_function_arity"]("main")
    params_of = [exe.mod["get_function_param_name"]("main", i) for i in range(arity)]
    results = run_cases(rvm.VirtualMachine(exe, tvm.cpu()), cases) if run else [None] * len(cases)
    write_manifest(d, tvm.__version__, params_of, cases, results)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print("  %s: %d cases, %d bytes" % (name, len(cases), size))


def read_inputs(d):
    """The cases' inputs a --build-only run wrote."""
    cases = []
    for line in open(os.path.join(d, "manifest.txt")).read().splitlines():
        w = line.split()
        if w and w[0] == "case":
            cases.append({})
        elif w and w[0] == "input":
            nd = int(w[3])
            shape = tuple(int(x) for x in w[4 : 4 + nd])
            cases[-1][w[1]] = np.fromfile(os.path.join(d, w[4 + nd]), dtype=w[2]).reshape(shape)
    return cases


def references_on_upstream(name, out_dir):
    """Runs the OpenCL build's split form on the runtime loaded (upstream's, with OpenCL), its
    version string set to that runtime's, and writes the outputs into the manifest."""
    import struct

    d = os.path.join(out_dir, name)
    cases = read_inputs(d)
    code = open(os.path.join(d, "code.ro"), "rb").read()
    (n,) = struct.unpack_from("<Q", code, 8)
    compiled = code[16 : 16 + n].decode()
    ours = os.environ.get("TVM_RUNTIME_VERSION", "0.16.0")
    patched = code[:8] + struct.pack("<Q", len(ours)) + ours.encode() + code[16 + n :]
    exe = rvm.Executable.load_exec(bytearray(patched), tvm.runtime.load_module(os.path.join(d, "lib.so")))
    arity = exe.mod["get_function_arity"]("main")
    params_of = [exe.mod["get_function_param_name"]("main", i) for i in range(arity)]
    results = run_cases(rvm.VirtualMachine(exe, [tvm.opencl(0), tvm.cpu()]), cases)
    write_manifest(d, compiled, params_of, cases, results)
    print("  %s: references from the runtime at %s" % (name, tvm._ffi.base._LIB._name))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--opencl", action="store_true", help="build for OpenCL (host code and shape functions on the CPU)")
    p.add_argument("--build-only", action="store_true", help="write the artefacts and inputs, not the outputs")
    p.add_argument("--references-on-upstream", action="store_true", help="compute the outputs of a --build-only folder")
    p.add_argument("--bench", action="store_true", help="the benchmark models (big: never committed)")
    p.add_argument("--meta-only", action="store_true", help="write each existing folder's model.meta, nothing else")
    a = p.parse_args()
    pool = OPENCL_MODELS if a.opencl else tuple(MODELS)
    if a.bench:
        pool = tuple(BENCH_MODELS)
    if a.opencl and not a.references_on_upstream:
        register_gpu_elementwise()
    names = [n for n in pool if not a.only or n in a.only.split(",")]
    print("TVM %s: %s" % (tvm.__version__, a.out))
    for n in names:
        if a.meta_only:
            mod, params, _ = relay_model(n)
            write_meta(os.path.join(a.out, n), mod, params)
        elif a.references_on_upstream:
            references_on_upstream(n, a.out)
        else:
            build(n, a.out, opencl=a.opencl, run=not a.build_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
