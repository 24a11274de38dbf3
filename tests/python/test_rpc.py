"""TVM's RPC with this runtime, both ways, against TVM's own peers, on 127.0.0.1 only:
- the wheel's full TVM (its own runtime, the compiler side) drives this runtime's servers (`tvmrt
  rpc-server`, and TVM's Python server on this library): upload, load, run on the CPU and on
  OpenCL, outputs byte-equal to upstream's, time_evaluator, a debug executor's profile, errors;
- this runtime's client (this pytest process) drives upstream's Python server on upstream's
  library, and a C++ server written as upstream's `tvm_rpc` is (registering its functions and
  calling `RPCServerLoop`);
- a tracker with two servers, sessions requested by key;
- hostile clients: a stall mid-packet, garbage, a client killed mid-copy, paths outside the work
  directory: the server ends that session and serves the next.
Every server is a process of its own; every loop is bounded in count and time."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import FIXTURES, Fixture

REPO = FIXTURES.parents[1]
TVMRT = REPO / "target" / "release" / "tvmrt"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert proc.poll() is None, f"the server exited: {proc.stdout.read() if proc.stdout else ''}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def env_for(library_dir=None):
    """The environment of a Python process: the wheel's full TVM (library_dir None), or TVM's
    Python on the runtime library in `library_dir`."""
    env = dict(os.environ)
    env.pop("TVM_USE_RUNTIME_LIB", None)
    env.pop("TVM_LIBRARY_PATH", None)
    if library_dir is not None:
        env.update(TVM_USE_RUNTIME_LIB="1", TVM_LIBRARY_PATH=str(library_dir))
    return env


class Server:
    """A server process listening on 127.0.0.1; stopped at exit of the `with`."""

    def __init__(self, cmd, port, env=None):
        self.port = port
        # A process group of its own: servers fork (a listener, a process per session).
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        try:
            wait_for_port(port, self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        # SIGTERM first: a server cleans up (its work directory) and exits at once; SIGKILL only
        # for one that does not.
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def tvmrt_server(key="k", tracker=None, stall_ms=None):
    port = free_port()
    cmd = [str(TVMRT), "rpc-server", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1),
           "--key", key]
    if tracker:
        cmd += ["--tracker", tracker]
    env = dict(os.environ)
    if stall_ms:
        env["TVM_RT_RPC_STALL_MS"] = str(stall_ms)
    return Server(cmd, port, env)


def python_server(library_dir, key="k"):
    port = free_port()
    cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
           "--port-end", str(port + 1), "--key", key]
    return Server(cmd, port, env_for(library_dir))


def upstream_dir():
    shared = os.environ.get("TVM_UPSTREAM_SHARED", "")
    if os.path.exists(os.path.join(shared, "libtvm_runtime.so")):
        return shared
    assert os.environ.get("TVM_RT_REQUIRE_UPSTREAM_LIB") != "1", f"no upstream library in {shared!r}"
    pytest.skip("no upstream library (../shared/upstream)")


def have_opencl(tvm):
    if tvm.cl(0).exist:
        return True
    assert os.environ.get("TVM_RT_REQUIRE_OPENCL") != "1", "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device"
    return False


# The wheel's client, in a process of its own: runs a model remotely, prints what it saw as JSON.
WHEEL_CLIENT = r"""
import json, sys, numpy as np, tvm
from tvm import rpc
from tvm.contrib import graph_executor
from tvm.contrib.debugger import debug_executor
port, fx, device, load_by_global = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
out = {}
remote = rpc.connect("127.0.0.1", port, key="k")
remote.upload(fx + "/lib.so")
# The wheel's own load_module passes extra arguments a one-argument load_module refuses.
lib = remote.get_function("tvm.rpc.server.load_module")("lib.so") if load_by_global else remote.load_module("lib.so")
dev = remote.cl(0) if device == "opencl" else remote.cpu(0)
graph = open(fx + "/graph.json").read()
m = graph_executor.create(graph, lib, dev)
m.load_params(open(fx + "/params.bin", "rb").read())
x = np.fromfile(fx + "/in_0.bin", dtype="float32").reshape(m.get_input(0).shape)
m.set_input("data", tvm.nd.array(x, dev))
m.run()
out["output"] = m.get_output(0).numpy().tobytes().hex()
# The factory's way, as deploy scripts write it.
f = graph_executor.GraphModule(lib["default"](dev))
f.load_params(open(fx + "/params.bin", "rb").read())
f.set_input("data", tvm.nd.array(x, dev))
f.run()
out["factory_output"] = f.get_output(0).numpy().tobytes().hex()
t = m.module.time_evaluator("run", dev, number=3, repeat=2)()
out["times"] = list(t.results)
try:
    m.get_output(99)
except tvm.error.RPCError as e:
    out["error"] = str(e)
fcreate = remote.get_function("tvm.graph_executor_debug.create")
dbg = debug_executor.GraphModuleDebug(fcreate(graph, lib, dev.device_type % 128, dev.device_id), [dev], graph, None)
dbg.load_params(open(fx + "/params.bin", "rb").read())
report = dbg.profile(data=tvm.nd.array(x, dev))
out["profile_calls"] = [c["Name"] for c in report.calls]
out["profile_devices"] = sorted({str(c["Device"]) for c in report.calls})
try:
    remote.upload(bytearray(b"x"), target="../escaped.txt")
    out["escape"] = "allowed"
except tvm.error.RPCError:
    out["escape"] = "refused"
print("RESULT " + json.dumps(out))
"""


def wheel_client(port, fx, device="cpu", load_by_global=False):
    done = subprocess.run([sys.executable, "-c", WHEEL_CLIENT, str(port), str(fx.dir), device,
                           "1" if load_by_global else "0"],
                          env=env_for(None), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def check_remote_run(result, fx, device_name, python_server=False):
    assert bytes.fromhex(result["output"]) == fx.outputs[0].tobytes(), "the remote output is upstream's"
    assert result["factory_output"] == result["output"]
    assert len(result["times"]) == 2 and all(t > 0 for t in result["times"])
    assert "RPCError" in result["error"] or "99" in result["error"], result["error"]
    assert result["profile_devices"] == [device_name]
    assert len(result["profile_calls"]) > 0
    if not python_server:
        assert result["escape"] == "refused", "an upload outside the work directory"


def test_the_wheels_client_drives_tvmrt_rpc_server(tvm):
    fx = Fixture("mlp_unbound_b1")
    with tvmrt_server() as s:
        check_remote_run(wheel_client(s.port, fx), fx, "cpu0")
        if have_opencl(tvm):
            cl = Fixture("opencl/mlp_unbound_cl_b1")
            check_remote_run(wheel_client(s.port, cl, "opencl"), cl, "opencl0")
        # One session at a time, each in a process of its own: the server lives on.
        check_remote_run(wheel_client(s.port, fx), fx, "cpu0")


def test_the_wheels_client_drives_tvms_python_server_on_this_runtime(tvm):
    fx = Fixture("mlp_unbound_b1")
    ours = os.environ["TVM_LIBRARY_PATH"]
    with python_server(ours) as s:
        check_remote_run(wheel_client(s.port, fx, load_by_global=True), fx, "cpu0", python_server=True)


def run_remotely(tvm, remote, fx, dev):
    from tvm.contrib import graph_executor

    # A name per model: a library replaced under the same name is not loaded again (dlopen
    # matches loaded libraries by name), and upstream's upload rewrites a mapped file in place.
    name = fx.name.replace("/", "_") + ".so"
    remote.upload(str(fx.dir / "lib.so"), target=name)
    lib = remote.load_module(name)
    m = graph_executor.create(fx.graph_json(), lib, dev)
    m.load_params(fx.params())
    for name, value in fx.inputs.items():
        m.set_input(name, tvm.nd.array(value, dev))
    m.run()
    for k, want in enumerate(fx.outputs):
        got = m.get_output(k)
        assert got.device == dev
        np.testing.assert_array_equal(got.numpy(), want)
    return m


def test_this_runtimes_client_drives_upstreams_server(tvm):
    from tvm import rpc

    with python_server(upstream_dir()) as s:
        remote = rpc.connect("127.0.0.1", s.port, key="k")
        dev = remote.cpu(0)
        m = run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), dev)
        times = m.module.time_evaluator("run", dev, number=3, repeat=2)().results
        assert len(times) == 2 and all(t > 0 for t in times)
        with pytest.raises(tvm.error.RPCError):
            m.get_output(99)
        # Arrays: there and back, copied among remote arrays, freed.
        x = np.arange(1000, dtype="float32")
        a = tvm.nd.array(x, dev)
        b = tvm.nd.empty((1000,), "float32", dev)
        a.copyto(b)
        np.testing.assert_array_equal(b.numpy(), x)
        if have_opencl(tvm):
            run_remotely(tvm, remote, Fixture("opencl/mlp_unbound_cl_b1"), remote.cl(0))
        remote._sess.get_function("CloseRPCConnection")()


# The wheel's client on a remote OpenCL device: a stream of the server's, made current for the
# session, an executor of a texture build (TVM's Adreno target) running on it, waited for, freed.
WHEEL_STREAM_CLIENT = r"""
import json, sys, numpy as np, tvm
from tvm import rpc
from tvm.contrib import graph_executor
port, fx = int(sys.argv[1]), sys.argv[2]
remote = rpc.connect("127.0.0.1", port, key="k")
remote.upload(fx + "/lib.so", target="tex.so")
lib = remote.load_module("tex.so")
dev = remote.cl(0)
s = dev.create_raw_stream()
dev.set_raw_stream(s)
m = graph_executor.create(open(fx + "/graph.json").read(), lib, dev)
m.load_params(open(fx + "/params.bin", "rb").read())
x = np.fromfile(fx + "/in_0.bin", dtype="float32").reshape(m.get_input(0).shape)
m.set_input("data", tvm.nd.array(x, dev))
m.run()
dev.sync(s)
out = {"stream": bool(s.value), "output": m.get_output(0).numpy().tobytes().hex()}
a = tvm.nd.array(np.arange(64, dtype="float32"), dev)
b = tvm.nd.empty((64,), "float32", dev)
a.copyto(b)
dev.sync()
out["copy"] = b.numpy().tobytes().hex() == np.arange(64, dtype="float32").tobytes().hex()
dev.set_raw_stream(None)
dev.free_raw_stream(s)
try:
    dev.sync(s)
    out["freed"] = "accepted"
except tvm.error.RPCError:
    out["freed"] = "refused"
print("RESULT " + json.dumps(out))
"""


def test_remote_streams_and_texture_builds(tvm):
    if not have_opencl(tvm):
        pytest.skip("no OpenCL device")
    from tvm import rpc

    fx = Fixture("opencl/convnet_tex_cl")
    with tvmrt_server() as srv:
        # The wheel's client (upstream's RPC device API) drives the streams.
        done = subprocess.run([sys.executable, "-c", WHEEL_STREAM_CLIENT, str(srv.port), str(fx.dir)],
                              env=env_for(None), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        out = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
        assert out["stream"], "a stream of the server's own, not the default"
        got = np.frombuffer(bytes.fromhex(out["output"]), dtype="float32")
        np.testing.assert_allclose(got, fx.outputs[0].ravel(), rtol=0, atol=1e-4)
        assert out["copy"] and out["freed"] == "refused", out
        # This runtime's client: the same through its remote device API.
        remote = rpc.connect("127.0.0.1", srv.port, key="k")
        dev = remote.cl(0)
        s = dev.create_raw_stream()
        assert s.value
        dev.set_raw_stream(s)
        run_remotely(tvm, remote, Fixture("opencl/mlp_unbound_cl_b1"), dev)
        dev.sync(s)
        dev.set_raw_stream(None)
        dev.free_raw_stream(s)
        with pytest.raises(tvm.error.RPCError):
            dev.sync(s)


def test_a_tracker_hands_out_two_servers_by_key(tvm):
    from tvm import rpc

    port = free_port()
    tracker = Server([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                      "--port-end", str(port + 1)], port, env_for(os.environ["TVM_LIBRARY_PATH"]))
    with tracker, tvmrt_server(key="dev", tracker=f"127.0.0.1:{port}"), \
            tvmrt_server(key="dev", tracker=f"127.0.0.1:{port}"):
        client = rpc.connect_tracker("127.0.0.1", port)
        deadline = time.time() + 30
        while "dev" not in client.text_summary() or "free" not in client.text_summary():
            assert time.time() < deadline, client.text_summary()
            time.sleep(0.2)
        # Two sessions at once: one on each server.
        a = client.request("dev", session_timeout=60)
        b = client.request("dev", session_timeout=60)
        for remote in (a, b):
            run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), remote.cpu(0))
        del a, b
        # Both offer themselves again once their sessions end.
        c = client.request("dev", session_timeout=60)
        run_remotely(tvm, c, Fixture("mlp_unbound_b1"), c.cpu(0))


def test_a_server_outlives_its_trackers_restart(tvm):
    """TVM's own tracker stopped and started again on its address: the server, serving all along,
    registers again and is handed out to a client through the new tracker."""
    from tvm import rpc

    port = free_port()

    def tracker():
        return Server([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                       "--port-end", str(port + 1)], port, env_for(os.environ["TVM_LIBRARY_PATH"]))

    def wait_listed(client):
        deadline = time.time() + 60
        while "dev" not in client.text_summary() or "free" not in client.text_summary():
            assert time.time() < deadline, client.text_summary()
            time.sleep(0.2)

    with tvmrt_server(key="dev", tracker=f"127.0.0.1:{port}") as srv:
        with tracker():
            wait_listed(rpc.connect_tracker("127.0.0.1", port))
        # No tracker: the server goes on (a direct client of its key would be refused only for
        # the key, which is the tracker's to hand out).
        time.sleep(1.0)
        assert srv.proc.poll() is None, "the server ended with its tracker"
        with tracker():
            client = rpc.connect_tracker("127.0.0.1", port)
            wait_listed(client)
            remote = client.request("dev", session_timeout=60)
            run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), remote.cpu(0))


def recv_exactly(s, n):
    """`n` bytes, or fewer if the peer closed (MSG_WAITALL does not wait on a socket with a
    timeout: Python makes it non-blocking)."""
    data = b""
    while len(data) < n:
        more = s.recv(n - len(data))
        if not more:
            break
        data += more
    return data


def handshake(port, key="k"):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    k = ("client:" + key).encode()
    s.sendall(struct.pack("<ii", 0xFF271, len(k)) + k)
    magic, n = struct.unpack("<ii", recv_exactly(s, 8))
    assert magic == 0xFF271
    recv_exactly(s, n)
    return s


def packet(code, payload=b""):
    body = struct.pack("<i", code) + payload
    return struct.pack("<Q", len(body)) + body


def init_packet():
    version = b"0.8.0"
    return packet(2, struct.pack("<Q", len(version)) + version + struct.pack("<i", 0))


def read_packet(s):
    head = recv_exactly(s, 8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return recv_exactly(s, n)


def test_hostile_clients_end_their_session_not_the_server(tvm):
    from tvm import rpc

    with tvmrt_server(stall_ms=500) as srv:
        # A length claiming a terabyte, then nothing: dropped after the stall timeout.
        s = handshake(srv.port)
        s.sendall(init_packet())
        assert read_packet(s) is not None
        s.sendall(struct.pack("<Q", 1 << 39) + b"abc")
        start = time.time()
        s.settimeout(20)
        assert read_packet(s) is None, "the session is closed"
        assert time.time() - start < 15
        # Garbage: an unknown code, a handle never given out, a function called before init.
        for payload in [packet(77), packet(3, struct.pack("<Qi", 0x1234, 0)), packet(10, b"\x01")]:
            s = handshake(srv.port)
            s.settimeout(20)
            s.sendall(init_packet())
            read_packet(s)
            s.sendall(payload)
            reply = read_packet(s)
            assert reply is not None and struct.unpack("<i", reply[:4])[0] == 5, "an exception"
            assert read_packet(s) is None, "then the session ends"
        # A client killed in the middle of a copy.
        killer = r"""
import sys, numpy as np, tvm
from tvm import rpc
remote = rpc.connect("127.0.0.1", int(sys.argv[1]), key="k")
a = tvm.nd.array(np.zeros(1 << 26, "float32"), remote.cpu())
print("copying", flush=True)
while True:
    a.copyfrom(np.ones(1 << 26, "float32"))
"""
        p = subprocess.Popen([sys.executable, "-c", killer, str(srv.port)], env=env_for(os.environ["TVM_LIBRARY_PATH"]),
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "copying"
        time.sleep(0.3)
        p.kill()
        p.wait(timeout=30)
        # The server serves the next client exactly.
        remote = rpc.connect("127.0.0.1", srv.port, key="k")
        run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), remote.cpu(0))


@pytest.mark.parametrize("library", ["this", "upstream"])
@pytest.mark.parametrize("loop", ["fd", "funcs"])
def test_a_tvm_rpc_like_cxx_server_links_and_serves(tvm, library, loop):
    """The same program on this library and on upstream's: the session's loop is the library's,
    given the socket (`RPCServerLoop(int)`) or the program's send and receive functions."""
    from tvm import rpc

    binary = os.environ.get("TVM_RT_CXX_RPC_SERVER", "")
    if not os.path.exists(binary):
        assert os.environ.get("TVM_RT_REQUIRE_UPSTREAM_LIB") != "1", f"no C++ RPC server at {binary!r}"
        pytest.skip("the C++ RPC server is built by CMake (c_tests/cxx/rpc_server.cc)")
    libdir = os.environ["TVM_LIBRARY_PATH"] if library == "this" else upstream_dir()
    port = free_port()
    with Server([binary, str(port), "k", loop], port, dict(os.environ, LD_LIBRARY_PATH=libdir)):
        remote = rpc.connect("127.0.0.1", port, key="k")
        run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), remote.cpu(0))
        # The program's own registered functions answer over RPC.
        assert remote.get_function("tvm.rpc.server.listdir")("").endswith("/mlp_unbound_b1.so,")
        with pytest.raises(tvm.error.RPCError, match="not a path inside"):
            remote.get_function("tvm.rpc.server.workpath")("../x")
        remote._sess.get_function("CloseRPCConnection")()
        # The next session is served by a fresh child.
        remote = rpc.connect("127.0.0.1", port, key="k")
        run_remotely(tvm, remote, Fixture("mlp_unbound_b1"), remote.cpu(0))


# What upstream's tvm_rpc (apps/cpp_rpc, built against upstream's headers) imports from the
# runtime library (../shared/RPC.md, measured by linking it), plus the loop's other overload.
TVM_RPC_IMPORTS = [
    "_ZN3tvm7runtime13RPCServerLoopEi",
    "_ZN3tvm7runtime13RPCServerLoopENS0_10PackedFuncES1_",
    "_ZN3tvm7runtime8Registry8RegisterERKNS0_6StringEb",
    "_ZN3tvm7runtime8Registry8set_bodyENS0_10PackedFuncE",
    "_ZN3tvm7runtime6Module12LoadFromFileERKNS0_6StringES4_",
    "_ZN3tvm7runtime6detail8LogFatal8GetEntryEv",
    "_ZN3tvm7runtime9BacktraceB5cxx11Ev",
    "_ZN3tvm7runtime6Object13TypeIndex2KeyB5cxx11Ej",
    "_ZN3tvm7runtime15EnvCheckSignalsEv",
    "_ZN3tvm7runtime17GetCustomTypeNameB5cxx11Eh",
    "_ZN3tvm7runtime19ParseCustomDatatypeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPPKc",
]


def test_the_symbols_tvm_rpc_imports_are_exported():
    def exported(library):
        out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
        return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}

    ours = exported(os.path.join(os.environ["TVM_LIBRARY_PATH"], "libtvm_runtime.so"))
    upstream = exported(os.path.join(upstream_dir(), "libtvm_runtime.so"))
    assert [s for s in TVM_RPC_IMPORTS if s not in upstream] == [], "the list is upstream's"
    assert [s for s in TVM_RPC_IMPORTS if s not in ours] == []
