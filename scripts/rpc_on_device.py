#!/usr/bin/env python3
"""The device workflow on an emulated board: `tvmrt rpc-server` cross-built for aarch64 runs under
qemu-aarch64 on 127.0.0.1, and TVM's own Python client (the wheel's full TVM, x86_64) uploads
aarch64 libraries to it, runs them there (outputs byte-equal to the x86_64 twins' recorded
outputs), times them with time_evaluator and profiles them with the debug executor. Run by
scripts/aarch64.sh. Usage: rpc_on_device.py TVMRT LIBDIR FIXTURES"""
import os
import socket
import subprocess
import sys
import time

import numpy as np
import tvm
from tvm import rpc
from tvm.contrib import graph_executor
from tvm.contrib.debugger import debug_executor

from process_group import stop_group

TWINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected(name):
    """The twin's recorded input and outputs (tests/fixtures/NAME/manifest.txt)."""
    twin = os.path.join(TWINS, name)
    inputs, outputs = {}, []
    for line in open(os.path.join(twin, "manifest.txt")):
        tok = line.split()
        if tok[0] in ("input", "output"):
            # input NAME DTYPE NDIM DIMS... FILE, output DTYPE NDIM DIMS... FILE
            fields = tok[1:] if tok[0] == "output" else tok[2:]
            dtype, ndim = fields[0], int(fields[1])
            shape, path = [int(d) for d in fields[2:2 + ndim]], fields[2 + ndim]
            value = np.fromfile(os.path.join(twin, path), dtype=dtype).reshape(shape)
            if tok[0] == "input":
                inputs[tok[1]] = value
            else:
                outputs.append(value)
    return inputs, outputs


def main(tvmrt, libdir, fixtures):
    port = free_port()
    server = subprocess.Popen(
        ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-E", f"LD_LIBRARY_PATH={libdir}", tvmrt, "rpc-server",
         "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1), "--key", "board"],
        start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            assert server.poll() is None, "the server exited"
            try:
                remote = rpc.connect("127.0.0.1", port, key="board")
                break
            except (tvm.error.TVMError, RuntimeError, OSError):
                assert time.time() < deadline, "no server"
                time.sleep(0.5)
        for name in ("mlp_b1", "mlp_unbound_b1"):
            inputs, outputs = expected(name)
            model = os.path.join(fixtures, name)
            remote.upload(os.path.join(model, "lib.so"), target=f"{name}.so")
            lib = remote.load_module(f"{name}.so")
            dev = remote.cpu(0)
            graph = open(os.path.join(model, "graph.json")).read()
            params = open(os.path.join(model, "params.bin"), "rb").read()
            if name == "mlp_b1":
                # Weights in the library: the factory's way, as deploy scripts write it.
                m = graph_executor.GraphModule(lib["default"](dev))
            else:
                m = graph_executor.create(graph, lib, dev)
                m.load_params(params)
            for k, v in inputs.items():
                m.set_input(k, tvm.nd.array(v, dev))
            m.run()
            for i, want in enumerate(outputs):
                got = m.get_output(i).numpy()
                assert got.tobytes() == want.tobytes(), f"{name}: output {i} differs from the x86_64 build's"
            t = m.module.time_evaluator("run", dev, number=5, repeat=2)()
            assert len(t.results) == 2 and min(t.results) > 0
            line = f"{name}: outputs byte-equal to x86_64's, remote run {t.mean * 1e6:.1f} us"
            fcreate = remote.get_function("tvm.graph_executor_debug.create")
            dbg = debug_executor.GraphModuleDebug(fcreate(graph, lib, 1, 0), [dev], graph, None)
            dbg.load_params(params)
            report = dbg.profile(**{k: tvm.nd.array(v, dev) for k, v in inputs.items()})
            calls = [c["Name"] for c in report.calls]
            assert calls and all(str(c["Device"]) == "cpu0" for c in report.calls), report
            line += f", profiled ({len(calls)} operators)"
            print(line, flush=True)
    finally:
        # Under qemu the server takes longer to stop than on the host.
        stop_group(server, grace=30)


if __name__ == "__main__":
    main(*sys.argv[1:4])
