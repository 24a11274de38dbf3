#!/usr/bin/env python3
"""Compiles the test models with TVM 0.16 and records upstream's outputs for them.

Run through scripts/make_fixtures.sh, which fetches TVM and sets the environment. Every model lands in
<out>/<name>/ as:

  lib.so        export_library output (kernels plus the factory blob with graph and bound params)
  graph.json    the graph alone
  params.bin    the params blob (save_param_dict); for unbound models the weights load_params needs
  manifest.txt  one record per line, space separated, read by the Rust and C tests:
                  model <name>
                  factory_weights <yes|no>    does the factory in lib.so carry every weight?
                  input <name> <dtype> <ndim> <dims...> <file>
                  output <dtype> <ndim> <dims...> <file>
  in_<k>.bin / out_<k>.bin   raw little-endian tensors: inputs, and upstream's outputs (1 thread)

Only the small models are committed (tests/fixtures); --bench builds the large benchmark models into
another folder on demand.
"""
import argparse
import os
import shutil
import sys
import tarfile
import tempfile

os.environ.setdefault("TVM_NUM_THREADS", "1")

import numpy as np
import tvm
import tvm.relay.testing
from tvm import relay
from tvm.contrib import graph_executor

TARGET = os.environ.get("TVM_FIXTURE_TARGET", "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")


def build(mod, params=None, **kw):
    with tvm.transform.PassContext(opt_level=kw.pop("opt_level", 3)):
        return relay.build(mod, target=TARGET, params=params, **kw)


def random_inputs(mod, rng, skip=()):
    out = {}
    for p in mod["main"].params:
        name = p.name_hint
        if name in skip:
            continue
        ty = p.checked_type if hasattr(p, "checked_type") and p.checked_type else p.type_annotation
        shape = [int(d) for d in ty.shape]
        dtype = ty.dtype
        if dtype.startswith("float"):
            arr = rng.uniform(-1, 1, size=shape).astype(dtype)
        elif dtype == "bool":
            arr = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype in ("int8", "uint8"):
            info = np.iinfo(dtype)
            arr = rng.integers(max(info.min, -20), min(info.max, 20), size=shape).astype(dtype)
        else:
            arr = rng.integers(-100, 100, size=shape).astype(dtype)
        out[name] = arr
    return out


def tensor_line(arr, dtype=None):
    """A manifest's dtype and shape; `dtype` the model's where numpy has none (bfloat16 travels
    as its bits, uint16)."""
    return "%s %d %s" % (dtype or arr.dtype, arr.ndim, " ".join(str(d) for d in arr.shape))


def write_model(outdir, name, lib, inputs, load_params=None, factory_weights=True, extra=None):
    """Exports lib, runs it on upstream's runtime and writes the fixture folder."""
    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    lib_path = os.path.join(d, "lib.so")
    lib.export_library(lib_path)
    with open(os.path.join(d, "graph.json"), "w") as f:
        f.write(lib.get_graph_json())
    params_blob = relay.save_param_dict(load_params if load_params is not None else lib.get_params())
    with open(os.path.join(d, "params.bin"), "wb") as f:
        f.write(params_blob)

    # Reference outputs from upstream's runtime, loading the exported artefacts as a user would.
    loaded = tvm.runtime.load_module(lib_path)
    dev = tvm.cpu(0)
    gmod = graph_executor.GraphModule(loaded["default"](dev))
    if load_params is not None:
        gmod.load_params(params_blob)
    for k, v in inputs.items():
        gmod.set_input(k, v)
    gmod.run()
    outputs = [gmod.get_output(i).numpy() for i in range(gmod.get_num_outputs())]
    out_dtypes = [gmod.get_output(i).dtype for i in range(gmod.get_num_outputs())]

    lines = ["model %s" % name, "factory_weights %s" % ("yes" if factory_weights else "no")]
    for k, (iname, arr) in enumerate(inputs.items()):
        fname = "in_%d.bin" % k
        np.ascontiguousarray(arr).tofile(os.path.join(d, fname))
        lines.append("input %s %s %s" % (iname, tensor_line(arr, gmod.get_input(iname).dtype), fname))
    for k, arr in enumerate(outputs):
        fname = "out_%d.bin" % k
        np.ascontiguousarray(arr).tofile(os.path.join(d, fname))
        lines.append("output %s %s" % (tensor_line(arr, out_dtypes[k]), fname))
    lines.extend(extra or [])
    with open(os.path.join(d, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %-18s %8d bytes lib, %d outputs" % (name, os.path.getsize(lib_path), len(outputs)))
    return d


def mlp(batch, dtype="float32"):
    mod, params = relay.testing.mlp.get_workload(batch_size=batch, dtype=dtype)
    return mod, params


def small_convnet(batch=1):
    data = relay.var("data", shape=(batch, 3, 16, 16))
    w1 = relay.var("conv1_weight", shape=(8, 3, 3, 3))
    b1 = relay.var("conv1_bias", shape=(8,))
    w2 = relay.var("conv2_weight", shape=(16, 8, 3, 3))
    b2 = relay.var("conv2_bias", shape=(16,))
    wd = relay.var("fc_weight", shape=(10, 16))
    bd = relay.var("fc_bias", shape=(10,))
    x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, w1, padding=(1, 1), channels=8,
                                                        kernel_size=(3, 3)), b1))
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w2, padding=(1, 1), channels=16,
                                                        kernel_size=(3, 3)), b2))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    x = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(x, wd), bd))
    fn = relay.Function(relay.analysis.free_vars(x), x)
    mod = tvm.IRModule.from_expr(fn)
    mod = relay.transform.InferType()(mod)
    rng = np.random.default_rng(7)
    params = {p.name_hint: tvm.nd.array(rng.uniform(-0.5, 0.5, [int(d) for d in p.checked_type.shape])
                                        .astype("float32"))
              for p in mod["main"].params if p.name_hint != "data"}
    return mod, params


def multi_io():
    x = relay.var("x", shape=(2, 3), dtype="float32")
    y = relay.var("y", shape=(2, 3), dtype="int32")
    z = relay.var("z", shape=(4,), dtype="uint8")
    outs = relay.Tuple([
        x * relay.const(2.0) + relay.cast(y, "float32"),   # float32 [2,3]
        relay.sum(x),                                       # float32 0-d
        relay.greater(x, relay.const(0.0)),                 # bool [2,3]
        relay.cast(y, "int64") + relay.const(1, "int64"),   # int64 [2,3]
        z + z,                                              # uint8 [4]
        relay.cast(x, "float64") * relay.const(3.0, "float64"),  # float64 [2,3]
        relay.cast(y, "int8"),                              # int8 [2,3]
    ])
    mod = tvm.IRModule.from_expr(relay.Function([x, y, z], outs))
    return relay.transform.InferType()(mod)


def int8_dense():
    data = relay.var("data", shape=(2, 64), dtype="int8")
    rng = np.random.default_rng(3)
    w = relay.const(rng.integers(-8, 8, size=(32, 64)).astype("int8"))
    b = relay.const(rng.integers(-100, 100, size=(32,)).astype("int32"))
    acc = relay.nn.bias_add(relay.nn.dense(data, w, out_dtype="int32"), b)
    requant = relay.cast(relay.clip(relay.right_shift(acc, relay.const(4)), -128, 127), "int8")
    mod = tvm.IRModule.from_expr(relay.Function([data], relay.Tuple([acc, requant])))
    return relay.transform.InferType()(mod)


def bf16_io():
    """bfloat16 in and out (numpy has none: the inputs and references are its bits, uint16): a
    dense layer computed in float32 between casts, and a float32 output beside."""
    x = relay.var("x", shape=(2, 8), dtype="bfloat16")
    w = relay.var("w", shape=(4, 8), dtype="float32")
    y = relay.nn.relu(relay.nn.dense(relay.cast(x, "float32"), w))
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.Tuple([relay.cast(y, "bfloat16"), relay.sum(y, axis=1)])))
    params = {"w": np.random.default_rng(5).standard_normal((4, 8)).astype("float32")}
    return relay.transform.InferType()(mod), params


def bf16_inputs(rng):
    x = rng.uniform(-1, 1, (2, 8)).astype("float32")
    return {"x": (x.view("uint32") >> 16).astype("uint16")}  # truncated to bfloat16, as bits


def sort_ops():
    """argsort, topk and sort: CPU kernels that call tvm.contrib.sort.* through
    TVMBackendGetFuncFromEnv (so the library uses __tvm_module_ctx)."""
    x = relay.var("x", shape=(3, 12), dtype="float32")
    top = relay.topk(x, k=4, axis=-1, ret_type="both", is_ascend=False, dtype="int64")
    out = relay.Tuple([relay.argsort(x, axis=-1, is_ascend=True, dtype="int32"), top[0], top[1],
                       relay.sort(x, axis=0, is_ascend=False)])
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], out)))


def sort_inputs(rng):
    # Few distinct values: ties show whether the sort is stable, as upstream's is.
    return {"x": rng.integers(0, 5, size=(3, 12)).astype("float32")}


def lstm(seq_len, hidden=16, inp=8, batch=1):
    """An unrolled LSTM: the weights are graph inputs (unbound), the biases are reshaped, so the
    executor sees `__nop` reshape nodes aliasing parameter storage."""
    xs = relay.var("data", shape=(seq_len, batch, inp))
    i2h_w = relay.var("i2h_weight", shape=(4 * hidden, inp))
    i2h_b = relay.var("i2h_bias", shape=(4 * hidden,))
    h2h_w = relay.var("h2h_weight", shape=(4 * hidden, hidden))
    h2h_b = relay.var("h2h_bias", shape=(4 * hidden,))
    bias_i = relay.reshape(i2h_b, (1, 4 * hidden))
    bias_h = relay.reshape(h2h_b, (1, 4 * hidden))
    h = relay.zeros((batch, hidden), "float32")
    c = relay.zeros((batch, hidden), "float32")
    steps = relay.split(xs, seq_len, axis=0)
    outs = []
    for t in range(seq_len):
        x = relay.reshape(steps[t], (batch, inp))
        gates = relay.nn.dense(x, i2h_w) + bias_i + relay.nn.dense(h, h2h_w) + bias_h
        g = relay.split(gates, 4, axis=1)
        in_gate = relay.sigmoid(g[0])
        forget_gate = relay.sigmoid(g[1])
        in_transform = relay.tanh(g[2])
        out_gate = relay.sigmoid(g[3])
        c = forget_gate * c + in_gate * in_transform
        h = out_gate * relay.tanh(c)
        outs.append(h)
    out = relay.Tuple([relay.stack(outs, axis=0), c])
    fn = relay.Function(relay.analysis.free_vars(out), out)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(fn))
    rng = np.random.default_rng(11)
    params = {}
    for p in mod["main"].params:
        if p.name_hint != "data":
            params[p.name_hint] = tvm.nd.array(
                rng.uniform(-0.4, 0.4, [int(d) for d in p.checked_type.shape]).astype("float32"))
    return mod, params


def wide_mlp(batch_size=1, sizes=(2048, 4096, 4096, 1000)):
    """Dense layers whose weights (117 MB) dwarf a row's activations: at batch 1 every run streams
    all of them from memory for one row, at batch 8 for eight (what batching pays on a CPU)."""
    x = relay.var("data", shape=(batch_size, sizes[0]))
    params = {}
    rng = np.random.default_rng(11)
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w, bias = relay.var("dense%d_weight" % i, shape=(b, a)), relay.var("dense%d_bias" % i, shape=(b,))
        params["dense%d_weight" % i] = (rng.standard_normal((b, a)) / np.sqrt(a)).astype("float32")
        params["dense%d_bias" % i] = np.zeros(b, "float32")
        x = relay.nn.bias_add(relay.nn.dense(x, w), bias)
        if i < len(sizes) - 2:
            x = relay.nn.relu(x)
    f = relay.Function(relay.analysis.free_vars(x), relay.nn.softmax(x))
    return relay.transform.InferType()(tvm.IRModule.from_expr(f)), params


def transformer(seq_len, batch=8, d=512, heads=8, ff=2048, layers=2):
    """A small transformer encoder (attention and feed-forward blocks with residuals), its weights
    graph inputs (unbound): one set serves every sequence length."""
    rng = np.random.default_rng(5)
    params = {}

    def w(name, shape):
        params[name] = tvm.nd.array(rng.uniform(-0.05, 0.05, shape).astype("float32"))
        return relay.var(name, shape=shape)

    dh = d // heads
    x = relay.var("data", shape=(batch, seq_len, d))
    h = relay.reshape(x, (batch * seq_len, d))

    def heads_of(t):
        t = relay.transpose(relay.reshape(t, (batch, seq_len, heads, dh)), (0, 2, 1, 3))
        return relay.reshape(t, (batch * heads, seq_len, dh))

    for i in range(layers):
        q, k, v = (heads_of(relay.nn.dense(h, w("l%d_w%s" % (i, n), (d, d)))) for n in "qkv")
        scores = relay.nn.batch_matmul(q, k) * relay.const(1.0 / np.sqrt(dh), "float32")
        attn = relay.nn.softmax(scores, axis=-1)
        ctx = relay.nn.batch_matmul(attn, relay.transpose(v, (0, 2, 1)))
        ctx = relay.transpose(relay.reshape(ctx, (batch, heads, seq_len, dh)), (0, 2, 1, 3))
        h = h + relay.nn.dense(relay.reshape(ctx, (batch * seq_len, d)), w("l%d_wo" % i, (d, d)))
        f = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(h, w("l%d_w1" % i, (ff, d))), w("l%d_b1" % i, (ff,))))
        h = h + relay.nn.dense(f, w("l%d_w2" % i, (d, ff)))
    out = relay.reshape(h, (batch, seq_len, d))
    fn = relay.Function(relay.analysis.free_vars(out), out)
    return relay.transform.InferType()(tvm.IRModule.from_expr(fn)), params


def to_nd(params):
    return {k: (v if isinstance(v, tvm.nd.NDArray) else tvm.nd.array(v)) for k, v in params.items()}


def make_small(outdir):
    rng = np.random.default_rng(2024)

    # MLP, batch 1 and 8, the same weights bound at build time (pre-packed by the compiler).
    mod1, mlp_params = mlp(1)
    mod8, _ = mlp(8)
    for batch, mod in ((1, mod1), (8, mod8)):
        write_model(outdir, "mlp_b%d" % batch, build(mod, mlp_params),
                    random_inputs(mod, rng, skip=mlp_params))

    # The same MLP with params left unbound: the weights keep their names and come from load_params,
    # so batch 1 and batch 8 can share one copy.
    for batch, mod in ((1, mod1), (8, mod8)):
        write_model(outdir, "mlp_unbound_b%d" % batch, build(mod),
                    random_inputs(mod, rng, skip=mlp_params), load_params=to_nd(mlp_params),
                    factory_weights=False)

    mod, params = small_convnet()
    write_model(outdir, "convnet", build(mod, params), random_inputs(mod, rng, skip=params))

    mod = multi_io()
    write_model(outdir, "multi_io", build(mod), random_inputs(mod, rng))

    mod16, params16 = mlp(1, dtype="float16")
    write_model(outdir, "mlp_fp16", build(mod16, params16), random_inputs(mod16, rng, skip=params16))

    mod = int8_dense()
    write_model(outdir, "int8_dense", build(mod), random_inputs(mod, rng))

    lib = build(mod1, mlp_params, executor=relay.backend.Executor("graph", {"link-params": True}))
    write_model(outdir, "mlp_link_params", lib, random_inputs(mod1, rng, skip=mlp_params))

    for seq in (8, 16):
        mod, params_l = lstm(seq)
        write_model(outdir, "lstm_seq%d" % seq, build(mod), random_inputs(mod, rng, skip=params_l),
                    load_params=params_l, factory_weights=False)

    write_model(outdir, "sort_ops", build(sort_ops()), sort_inputs(rng))

    make_system_lib(outdir, mod1, mlp_params)

    # Its own seed, so adding it left the fixtures before it as they were.
    mod, params = bf16_io()
    write_model(outdir, "bf16_io", build(mod, params), bf16_inputs(np.random.default_rng(7)))


def make_other_version(outdir):
    """The fixtures another TVM (0.19: scripts/make_fixtures.sh --tvm019) builds as well: the
    graph executor's artefacts of that version, run by its own runtime for the references."""
    rng = np.random.default_rng(2019)
    mod1, mlp_params = mlp(1)
    write_model(outdir, "mlp_b1", build(mod1, mlp_params), random_inputs(mod1, rng, skip=mlp_params))
    write_model(outdir, "mlp_unbound_b1", build(mod1), random_inputs(mod1, rng, skip=mlp_params),
                load_params=to_nd(mlp_params), factory_weights=False)
    mod, params = small_convnet()
    write_model(outdir, "convnet", build(mod, params), random_inputs(mod, rng, skip=params))
    mod = multi_io()
    write_model(outdir, "multi_io", build(mod), random_inputs(mod, rng))


def make_system_lib(outdir, mod, params):
    """A --system-lib build of mlp_b1: objects to link into a host, no lib.so."""
    lib = build(mod, params, runtime=relay.backend.Runtime("cpp", {"system-lib": True}))
    d = os.path.join(outdir, "mlp_syslib")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = os.path.join(tmp, "lib.tar")
        lib.export_library(tar_path)
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".o"):
                    tar.extract(member, tmp)
                    shutil.move(os.path.join(tmp, member.name), os.path.join(d, os.path.basename(member.name)))
    with open(os.path.join(d, "graph.json"), "w") as f:
        f.write(lib.get_graph_json())
    # Same kernels and weights as mlp_b1: its inputs and reference outputs apply.
    src = os.path.join(outdir, "mlp_b1")
    for fname in os.listdir(src):
        if fname.endswith(".bin") or fname == "manifest.txt":
            shutil.copy(os.path.join(src, fname), d)
    print("wrote mlp_syslib          %s" % sorted(os.listdir(d)))


def make_bench(outdir, only=None):
    """Large models for benchmarks, never committed. `only`: names to build (default: all)."""
    rng = np.random.default_rng(5)

    def bound(workload, **kw):
        mod, params = workload(**kw)
        return lambda name: write_model(outdir, name, build(mod, params), random_inputs(mod, rng, skip=params))

    # Batch-1 and batch-8 builds with params unbound, sharing one set of weights (the same values,
    # so either build's references hold with the other's weights shared in).
    weights = {}

    def unbound_batch(net, workload, batch, **kw):
        def make(name):
            mod, params = workload(batch_size=batch, **kw)
            params = weights.setdefault(net, to_nd(params))
            write_model(outdir, name, build(mod), random_inputs(mod, rng, skip=params),
                        load_params=params, factory_weights=False)
        return make

    def chain(name):
        # A chain of 200 tiny unfused ops: the runtime's per-node dispatch cost.
        x = relay.var("x", shape=(4,))
        y = x
        # Ops no rewrite pass folds (an add/multiply chain sends SimplifyExpr into a rewrite loop),
        # and cheap ones, so the runtime's share of each node shows.
        for i in range(200):
            y = relay.nn.relu(y) if i % 2 == 0 else relay.negative(y)
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
        write_model(outdir, name, build(mod, opt_level=0), random_inputs(mod, rng))

    def lstm_big(name):
        mod, params = lstm(32, hidden=256, inp=128)
        write_model(outdir, name, build(mod), random_inputs(mod, rng, skip=params),
                    load_params=params, factory_weights=False)

    def lstm_len(seq_len):
        def make(name):
            mod, params = lstm(seq_len, hidden=256, inp=128)
            write_model(outdir, name, build(mod), random_inputs(mod, rng, skip=params),
                        load_params=params, factory_weights=False)
        return make

    def transformer_len(seq_len):
        def make(name):
            mod, params = transformer(seq_len)
            write_model(outdir, name, build(mod), random_inputs(mod, rng, skip=params),
                        load_params=params, factory_weights=False)
        return make

    t = relay.testing
    models = {
        "resnet18": lambda n: bound(t.resnet.get_workload, num_layers=18, batch_size=1)(n),
        "mobilenet": lambda n: bound(t.mobilenet.get_workload, batch_size=1)(n),
        "squeezenet": lambda n: bound(t.squeezenet.get_workload, batch_size=1)(n),
        "resnet18_unbound": unbound_batch("resnet18", t.resnet.get_workload, 1, num_layers=18),
        "resnet18_unbound_b2": unbound_batch("resnet18", t.resnet.get_workload, 2, num_layers=18),
        "resnet18_unbound_b4": unbound_batch("resnet18", t.resnet.get_workload, 4, num_layers=18),
        "resnet18_unbound_b8": unbound_batch("resnet18", t.resnet.get_workload, 8, num_layers=18),
        "mobilenet_unbound": unbound_batch("mobilenet", t.mobilenet.get_workload, 1),
        "mobilenet_unbound_b8": unbound_batch("mobilenet", t.mobilenet.get_workload, 8),
        "squeezenet_unbound": unbound_batch("squeezenet", t.squeezenet.get_workload, 1),
        "squeezenet_unbound_b8": unbound_batch("squeezenet", t.squeezenet.get_workload, 8),
        "wide_mlp": unbound_batch("wide_mlp", wide_mlp, 1),
        "wide_mlp_b8": unbound_batch("wide_mlp", wide_mlp, 8),
        "chain200": chain,
        "lstm_big": lstm_big,
        # One LSTM, and one small transformer, at several sequence lengths, each sharing its weights
        # (the arena pool's sequence cases).
        **{"lstm_s%d" % n: lstm_len(n) for n in (8, 16, 32, 64)},
        **{"transformer_s%d" % n: transformer_len(n) for n in (8, 16, 32, 64)},
    }
    for name, make in models.items():
        if only is None or name in only:
            make(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", action="store_true", help="build the large benchmark models instead")
    ap.add_argument("--only", help="with --bench: comma-separated model names; without: 'sort_ops' or 'bf16_io' alone")
    ap.add_argument("--other-version", action="store_true", help="the subset another TVM version builds")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.other_version:
        make_other_version(args.out)
    elif args.bench:
        make_bench(args.out, args.only.split(",") if args.only else None)
    elif args.only == "sort_ops":
        write_model(args.out, "sort_ops", build(sort_ops()), sort_inputs(np.random.default_rng(99)))
    elif args.only == "bf16_io":
        mod, params = bf16_io()
        write_model(args.out, "bf16_io", build(mod, params), bf16_inputs(np.random.default_rng(7)))
    else:
        make_small(args.out)


if __name__ == "__main__":
    sys.exit(main())
