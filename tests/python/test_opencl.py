"""Models built for OpenCL through TVM's own Python, on this runtime: `tvm.cl(0)`, arrays on the
device, the factory and `graph_executor.create`, sharing, `dev.sync()`. Outputs are upstream's
OpenCL bytes. Skipped without an OpenCL device, unless TVM_RT_REQUIRE_OPENCL=1."""
import os

import numpy as np
import pytest

from conftest import Fixture

MODELS = [
    "opencl/mlp_cl",
    "opencl/mlp_unbound_cl_b1",
    "opencl/mlp_unbound_cl_b4",
    "opencl/convnet_unbound_cl",
    "opencl/fold_cl",
]


@pytest.fixture(scope="module")
def cl(tvm):
    dev = tvm.cl(0)
    if not dev.exist:
        assert os.environ.get("TVM_RT_REQUIRE_OPENCL") != "1", "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device"
        pytest.skip("no OpenCL device")
    return dev


def test_device_attributes(tvm, cl):
    assert cl.max_threads_per_block > 0
    assert isinstance(cl.device_name, str) and cl.device_name
    assert cl.compute_version.count(".") == 1
    assert len(cl.max_thread_dimensions) == 3
    assert cl.warp_size == 1
    assert not tvm.cl(7).exist
    assert not tvm.cuda(0).exist


def test_arrays(tvm, cl):
    x = np.arange(24, dtype="float32").reshape(2, 3, 4) - 7.5
    a = tvm.nd.array(x, cl)
    assert a.device == cl
    np.testing.assert_array_equal(a.numpy(), x)
    b = a.copyto(tvm.cl(0))
    cl.sync()
    np.testing.assert_array_equal(b.numpy(), x)
    c = tvm.nd.empty((2, 3, 4), "float32", tvm.cpu())
    b.copyto(c)
    np.testing.assert_array_equal(c.numpy(), x)
    with pytest.raises(tvm.TVMError):
        a.copyfrom(tvm.nd.array(np.zeros((5,), "float32"), cl))
    with pytest.raises(tvm.TVMError):
        tvm.nd.empty((4,), "float32", tvm.cl(9))


def test_a_run_on_a_stream_of_its_own(tvm, cl):
    """`dev.create_raw_stream()` is a command queue of its own: made current, the executor's
    kernels and copies go on it, and `sync` waits for it."""
    from tvm.contrib import graph_executor

    f = Fixture("opencl/convnet_unbound_cl")
    lib = tvm.runtime.load_module(f.lib_path)
    stream = cl.create_raw_stream()
    assert stream, "a queue, not NULL"
    cl.set_raw_stream(stream)
    try:
        m = graph_executor.GraphModule(lib["default"](cl))
        m.load_params(f.params())
        m.set_input(**{k: tvm.nd.array(v, cl) for k, v in f.inputs.items()})
        m.run()
        cl.sync()
        for i, want in enumerate(f.outputs):
            np.testing.assert_array_equal(m.get_output(i).numpy(), want)
    finally:
        cl.set_raw_stream(None)
        cl.free_raw_stream(stream)
    with pytest.raises(tvm.TVMError, match="is not a stream"):
        cl.set_raw_stream(stream)


@pytest.mark.parametrize("name", MODELS)
def test_factory_and_create(tvm, cl, name):
    from tvm.contrib import graph_executor

    f = Fixture(name)
    lib = tvm.runtime.load_module(f.lib_path)
    factory = graph_executor.GraphModule(lib["default"](cl))
    created = graph_executor.create(f.graph_json(), lib, cl)
    created.load_params(f.params())
    if not f.factory_weights:
        factory.load_params(f.params())
    for m in (factory, created):
        for k, v in f.inputs.items():
            m.set_input(k, tvm.nd.array(v, cl))
        m.run()
        cl.sync()
        for i, want in enumerate(f.outputs):
            out = m.get_output(i)
            assert out.device == cl
            np.testing.assert_array_equal(out.numpy(), want)
            host = tvm.nd.empty(want.shape, str(want.dtype), tvm.cpu())
            m.get_output(i, host)
            np.testing.assert_array_equal(host.numpy(), want)


def test_share_params_across_batch_sizes(tvm, cl):
    from tvm.contrib import graph_executor

    f1, f4 = Fixture("opencl/mlp_unbound_cl_b1"), Fixture("opencl/mlp_unbound_cl_b4")
    a = graph_executor.create(f1.graph_json(), tvm.runtime.load_module(f1.lib_path), cl)
    a.load_params(f1.params())
    b = graph_executor.create(f4.graph_json(), tvm.runtime.load_module(f4.lib_path), cl)
    b.module["share_params"](a.module, bytearray(f4.params()))
    for m, f in ((a, f1), (b, f4)):
        for k, v in f.inputs.items():
            m.set_input(k, v)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), f.outputs[0])


def test_heterogeneous_graph(tvm, cl):
    from tvm.contrib import graph_executor

    f = Fixture("opencl/hetero_cl")
    lib = tvm.runtime.load_module(f.lib_path)
    for m in (graph_executor.GraphModule(lib["default"](cl, tvm.cpu(0))),
              graph_executor.create(f.graph_json(), lib, [cl, tvm.cpu(0)])):
        m.load_params(f.params())
        for k, v in f.inputs.items():
            m.set_input(k, v)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), f.outputs[0])


def test_precompiled_programs(tvm, cl, tmp_path):
    """Programs compiled once, from TVM's Python: the blob comes back as bytes (upstream's str is
    cut at its first NUL byte there) and, set into another load of the library, runs the model."""
    import shutil

    from tvm.contrib import graph_executor

    f = Fixture("opencl/mlp_cl")
    first = tvm.runtime.load_module(f.lib_path)
    blob = first.get_function("opencl.GetPreCompiledPrograms", True)()
    assert isinstance(blob, (bytes, bytearray)), type(blob)
    count = int.from_bytes(bytes(blob[:8]), "little")
    assert count >= 2 and len(blob) > 1000
    # A copy of the file: the same path loaded twice is one loaded object.
    copy = tmp_path / "lib.so"
    shutil.copy(f.lib_path, copy)
    lib = tvm.runtime.load_module(str(copy))
    lib.get_function("opencl.SetPreCompiledPrograms", True)(bytearray(blob))
    with pytest.raises(tvm.TVMError, match="pre-compiled OpenCL programs"):
        lib.get_function("opencl.SetPreCompiledPrograms", True)(bytearray(blob[:-1]))
    m = graph_executor.GraphModule(lib["default"](cl))
    for k, v in f.inputs.items():
        m.set_input(k, v)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), f.outputs[0])


@pytest.mark.parametrize("name", ["opencl/convnet_tex_cl", "opencl/convnet_tex_bound_cl"])
def test_texture_builds(tvm, cl, name):
    """Builds for TVM's Adreno target (activations and weights in texture memory): both creation
    routes, and two executors sharing the weights, within 1e-4 of upstream's OpenCL runtime."""
    from tvm.contrib import graph_executor

    f = Fixture(name)
    lib = tvm.runtime.load_module(f.lib_path)
    factory = graph_executor.GraphModule(lib["default"](cl))
    created = graph_executor.create(f.graph_json(), lib, cl)
    created.load_params(f.params())
    if not f.factory_weights:
        factory.load_params(f.params())
    sharing = graph_executor.create(f.graph_json(), lib, cl)
    sharing.share_params(created, f.params())
    for m in (factory, created, sharing):
        for k, v in f.inputs.items():
            m.set_input(k, v)
        m.run()
        for i, want in enumerate(f.outputs):
            np.testing.assert_allclose(m.get_output(i).numpy(), want, rtol=0, atol=1e-4)


def test_texture_arrays(tvm, cl):
    """`tvm.nd.empty(..., mem_scope=)` with texture scopes: images that round-trip through the host
    and copy to and from buffers."""
    x = (np.arange(2 * 3 * 5 * 4, dtype="float32").reshape(1, 2, 3, 5, 4) - 40) / 8
    for scope in ("global.texture", "global.texture-weight", "global.texture-nhwc"):
        a = tvm.nd.empty(x.shape, "float32", cl, mem_scope=scope)
        a.copyfrom(x)
        np.testing.assert_array_equal(a.numpy(), x)
        b = tvm.nd.array(x * 2, cl)
        b.copyto(a)
        np.testing.assert_array_equal(a.numpy(), x * 2)
    with pytest.raises(tvm.TVMError, match="rank 3"):
        tvm.nd.empty((4, 4), "float32", cl, mem_scope="global.texture")
    with pytest.raises(tvm.TVMError, match="needs images"):
        tvm.nd.empty(x.shape, "float32", tvm.cpu(), mem_scope="global.texture")
