"""Relax VM test models, built by whichever TVM runs the version script that imports this
(scripts/relax_fixtures/v0_XX.py: each version's Python API differs), with each one's outputs as
that TVM's own runtime computes them (the exported library loaded back, `relax.VirtualMachine`).

A model folder holds `model.so` (`export_library` of the executable) and `manifest.txt`, in the
Relay VM fixtures' format:

    version <the compiler's TVM version>
    function main
    params <name> ...
    case <k>
    input <name> <dtype> <ndim> <dims...> <file>
    output <dtype> <ndim> <dims...> <file>      (the result's tensors, tuples flattened in order)
    structure <the result's nesting: t for a tensor, (..) for a tuple>
"""

import argparse
import os
import shutil

import numpy as np

RNG = np.random.RandomState(11)
TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"


def weights(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


class Models:
    """The cases, written once against the shim `api` a version script passes in:
    api.tensor(shape, dtype) -> a struct info / type; api.var(name, info); api.sym(name) -> a
    symbolic int64 dim; api.tir -> tvm.tir or tvm.tirx; api.schedule(prim_func) -> a schedule."""

    def __init__(self, tvm, relax, api):
        self.tvm, self.relax, self.api = tvm, relax, api

    def _function(self, params, body):
        bb = self.relax.BlockBuilder()
        with bb.function("main", params):
            out = body(bb)
            bb.emit_func_output(out)
        return bb.get()

    def mlp_args(self):
        """Parameters as arguments (as nn.Module exports), a symbolic batch."""
        R, api = self.relax, self.api
        n = api.sym("n")
        x = api.var("x", api.tensor((n, 16), "float32"))
        w1 = api.var("w1", api.tensor((16, 32), "float32"))
        b1 = api.var("b1", api.tensor((32,), "float32"))
        w2 = api.var("w2", api.tensor((32, 8), "float32"))

        def body(bb):
            with bb.dataflow():
                h = bb.emit(R.op.nn.relu(R.op.add(R.op.matmul(x, w1), b1)))
                y = bb.emit_output(R.op.matmul(h, w2))
            return y

        mod = self._function([x, w1, b1, w2], body)
        ws = [weights(16, 32), weights(32), weights(32, 8)]
        cases = [[RNG.rand(b, 16).astype("float32"), *ws] for b in (1, 3, 8)]
        return mod, ["x", "w1", "b1", "w2"], cases

    def mlp_bound(self):
        """Bound constants (the executable's constant pool), a symbolic batch."""
        R, api = self.relax, self.api
        n = api.sym("n")
        x = api.var("x", api.tensor((n, 16), "float32"))
        w1, b1, w2 = weights(16, 32), weights(32), weights(32, 4)

        def body(bb):
            with bb.dataflow():
                h = bb.emit(R.op.nn.relu(R.op.add(R.op.matmul(x, R.const(w1)), R.const(b1))))
                y = bb.emit_output(R.op.nn.softmax(R.op.matmul(h, R.const(w2)), axis=-1))
            return y

        mod = self._function([x], body)
        return mod, ["x"], [[RNG.rand(b, 16).astype("float32")] for b in (2, 5)]

    def conv(self):
        """A conv net with bound weights: conv2d, relu, max pool, flatten, dense."""
        R, api = self.relax, self.api
        x = api.var("data", api.tensor((1, 3, 12, 12), "float32"))
        k, w = weights(4, 3, 3, 3), weights(4 * 5 * 5, 6)

        def body(bb):
            with bb.dataflow():
                c = bb.emit(R.op.nn.relu(R.op.nn.conv2d(x, R.const(k))))
                p = bb.emit(R.op.nn.max_pool2d(c, pool_size=(2, 2), strides=(2, 2)))
                f = bb.emit(R.op.reshape(p, (1, 4 * 5 * 5)))
                y = bb.emit_output(R.op.matmul(f, R.const(w)))
            return y

        mod = self._function([x], body)
        return mod, ["data"], [[RNG.rand(1, 3, 12, 12).astype("float32")]]

    def tuple_mixed(self):
        """A tuple of mixed dtypes, one nested: (x * 2 in float16, x > 5 as int64, (sum, x as int32))."""
        R, api = self.relax, self.api
        x = api.var("x", api.tensor((3, 5), "float32"))

        def body(bb):
            with bb.dataflow():
                a = bb.emit(R.op.astype(R.op.multiply(x, R.const(2.0, "float32")), "float16"))
                b = bb.emit(R.op.astype(R.op.greater(x, R.const(5.0, "float32")), "int64"))
                c = bb.emit(R.op.sum(x, axis=0))
                d = bb.emit(R.op.astype(x, "int32"))
                y = bb.emit_output(R.Tuple([a, b, R.Tuple([c, d])]))
            return y

        mod = self._function([x], body)
        return mod, ["x"], [[(RNG.rand(3, 5) * 10).astype("float32")]]

    def parallel(self):
        """Kernels whose outer loops are `T.parallel` (the runtime's thread pool runs them)."""
        mod, names, _ = self.mlp_args()
        mod = self.relax.transform.LegalizeOps()(mod)
        tir = self.api.tir
        for gv, func in list(mod.functions.items()):
            if not isinstance(func, tir.PrimFunc):
                continue
            sch = self.api.schedule(func)
            get_block = getattr(sch, "get_sblock", None) or sch.get_block  # renamed in 0.25
            for block in sch.get_child_blocks(get_block("root")):
                loops = sch.get_loops(block)
                if loops:
                    sch.parallel(loops[0])
            mod[gv] = sch.mod["main"]
        ws = [weights(16, 32), weights(32), weights(32, 8)]
        cases = [[RNG.rand(b, 16).astype("float32"), *ws] for b in (4, 64)]
        return mod, names, cases

    def control(self):
        """Control flow: `if flag: x * 2 else x - 1`, flag a bool scalar tensor."""
        R, api = self.relax, self.api
        n = api.sym("n")
        x = api.var("x", api.tensor((n,), "float32"))
        flag = api.var("flag", api.tensor((), "bool"))

        def body(bb):
            two = R.const(2.0, "float32")
            one = R.const(1.0, "float32")
            then_ = R.SeqExpr([], R.op.multiply(x, two))
            else_ = R.SeqExpr([], R.op.subtract(x, one))
            return bb.emit(R.If(flag, then_, else_))

        mod = self._function([x, flag], body)
        cases = [[RNG.rand(k).astype("float32"), np.array(v, dtype="bool")] for k, v in ((4, True), (6, False))]
        return mod, ["x", "flag"], cases


    def runtime_ops(self):
        """The operators upstream runs through functions only its Python package registers
        (relax.run.*): nonzero, unique, shape_to_tensor, assert_op."""
        R, api = self.relax, self.api
        n = api.sym("n")
        x = api.var("x", api.tensor((n,), "float32"))

        def body(bb):
            bb.emit(R.op.assert_op(R.const(True, "bool"), [], "never fails"))
            nz = bb.emit(R.op.nonzero(R.op.greater(x, R.const(0.5, "float32"))))
            ints = bb.emit(R.op.astype(R.op.multiply(x, R.const(4.0, "float32")), "int32"))
            u = bb.emit(R.op.unique(ints, sorted=True))
            s = bb.emit(R.op.shape_to_tensor(R.op.shape_of(x)))
            return bb.emit(R.Tuple([nz, u, s]))

        mod = self._function([x], body)
        return mod, ["x"], [[RNG.rand(k).astype("float32")] for k in (5, 9)]


CASES = ["mlp_args", "mlp_bound", "conv", "tuple_mixed", "parallel", "control", "runtime_ops"]


def flatten(obj, out):
    if hasattr(obj, "numpy"):
        out.append(obj.numpy())
        return "t"
    return "(" + "".join(flatten(o, out) for o in obj) + ")"


def dims(a):
    return "%d %s" % (a.ndim, " ".join(str(d) for d in a.shape))


def write_model(tvm, relax, api, name, folder, only):
    models = Models(tvm, relax, api)
    mod, names, cases = getattr(models, name)()
    ex = api.build(mod, TARGET)
    os.makedirs(folder, exist_ok=True)
    lib_path = os.path.join(folder, "model.so")
    ex.export_library(lib_path)
    # The reference: the library loaded back by this version's own runtime.
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
    lines = ["version %s" % tvm.__version__, "function main", "params " + " ".join(names)]
    for k, inputs in enumerate(cases):
        lines.append("case %d" % k)
        args = []
        for i, (n, a) in enumerate(zip(names, inputs)):
            f = "in_%d_%d.bin" % (k, i)
            a.tofile(os.path.join(folder, f))
            lines.append("input %s %s %s %s" % (n, a.dtype, dims(a), f))
            args.append(api.array(a))
        outs = []
        structure = flatten(vm["main"](*args), outs)
        for j, o in enumerate(outs):
            f = "out_%d_%d.bin" % (k, j)
            o.tofile(os.path.join(folder, f))
            lines.append("output %s %s %s" % (o.dtype, dims(o), f))
        lines.append("structure " + structure)
    with open(os.path.join(folder, "manifest.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(tvm, relax, api):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    a = p.parse_args()
    only = [c for c in a.only.split(",") if c] or CASES
    for name in only:
        folder = os.path.join(a.out, name)
        shutil.rmtree(folder, ignore_errors=True)
        write_model(tvm, relax, api, name, folder, only)
        print(name, "->", folder)
