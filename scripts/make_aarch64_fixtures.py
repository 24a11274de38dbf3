#!/usr/bin/env python3
"""Builds small fixtures for aarch64 (`llvm -mtriple=aarch64-linux-gnu`, linked with Debian's
aarch64-linux-gnu-gcc): the same models, weights and inputs as their x86_64 twins in
tests/fixtures, whose recorded outputs are the reference (the aarch64 kernels must reproduce them).
Run through scripts/aarch64.sh, which sets the environment. Usage: make_aarch64_fixtures.py OUT"""
import os
import shutil
import sys

os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("TOPHUB_LOCATION", "NONE")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tvm
from tvm import relay
from tvm.contrib import cc

import make_fixtures as mf

TARGET = "llvm -mtriple=aarch64-linux-gnu"
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def main(out):
    # The MLPs: their aarch64 kernels give the x86_64 builds' bytes. (Convolutions do not: the two
    # backends contract multiply-adds differently, within 1e-7, so a byte-exact suite leaves them out.)
    mod1, mlp_params = mf.mlp(1)
    mod8, _ = mf.mlp(8)
    models = {
        # name: (module, params bound at build time or None); the x86_64 twin has the same name
        "mlp_b1": (mod1, mlp_params),
        "mlp_unbound_b1": (mod1, None),
        "mlp_unbound_b8": (mod8, None),
    }
    for name, (mod, params) in models.items():
        twin = os.path.join(FIXTURES, name)
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=TARGET, params=params)
        lib.export_library(os.path.join(d, "lib.so"), cc.cross_compiler("aarch64-linux-gnu-gcc"))
        with open(os.path.join(d, "graph.json"), "w") as f:
            f.write(lib.get_graph_json())
        if params is not None:
            with open(os.path.join(d, "params.bin"), "wb") as f:
                f.write(relay.save_param_dict(lib.get_params()))
        else:
            shutil.copy(os.path.join(twin, "params.bin"), d)
        for f in os.listdir(twin):
            if f.startswith(("in_", "out_")) or f == "manifest.txt":
                shutil.copy(os.path.join(twin, f), d)
        print("built", name, "for aarch64")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
