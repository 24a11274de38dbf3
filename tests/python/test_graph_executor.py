"""The graph executor from TVM 0.16's own Python package, on this runtime; outputs are compared
with upstream's, recorded by scripts/make_fixtures.py."""
import json

import numpy as np
import pytest

from conftest import Fixture, all_fixtures


def check_outputs(gmod, fx, how):
    assert gmod.get_num_outputs() == len(fx.outputs)
    for k, want in enumerate(fx.outputs):
        got = gmod.get_output(k).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (fx.name, how, k)
        assert np.array_equal(got, want), f"{fx.name} ({how}): output {k} differs from upstream's"


@pytest.mark.parametrize("name", all_fixtures())
def test_factory_path(tvm, name):
    from tvm.contrib import graph_executor

    fx = Fixture(name)
    lib = tvm.runtime.load_module(fx.lib_path)
    assert lib.type_key == "GraphExecutorFactory"
    dev = tvm.cpu(0)
    gmod = graph_executor.GraphModule(lib["default"](dev))
    if not fx.factory_weights:
        gmod.load_params(fx.params())
    gmod.set_input(**fx.inputs)
    gmod.run()
    check_outputs(gmod, fx, "factory")


def test_a_byoc_artefact_whose_constants_reach_generated_cpp(tvm):
    """BYOC (TVM's ccompiler codegen, a Relay constant in the partition): making the executor has
    const_loader call the generated `__init_<symbol>` with an Array of the constants, which the
    C++ reads as upstream's ArrayNode (it crashed on this runtime's own layout before)."""
    from tvm.contrib import graph_executor

    fx = Fixture("byoc/ccompiler")
    lib = tvm.runtime.load_module(fx.lib_path)
    kinds = [lib.type_key] + [m.type_key for m in lib.imported_modules]
    assert kinds[:2] == ["GraphExecutorFactory", "const_loader"], kinds
    for how in ("first executor", "second executor"):
        gmod = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        gmod.set_input(**fx.inputs)
        gmod.run()
        check_outputs(gmod, fx, how)
    # An Array this runtime makes reads back whole through TVM's own Python.
    arr = tvm.runtime.convert([tvm.nd.array(v) for v in fx.outputs + fx.outputs])
    assert len(arr) == 2 and np.array_equal(arr[1].numpy(), fx.outputs[0])


@pytest.mark.parametrize("name", all_fixtures())
def test_create_path(tvm, name):
    from tvm.contrib import graph_executor

    fx = Fixture(name)
    lib = tvm.runtime.load_module(fx.lib_path)
    gmod = graph_executor.create(fx.graph_json(), lib, tvm.cpu(0))
    gmod.load_params(fx.params())
    for k in fx.inputs:
        gmod.set_input(k, fx.nd_input(tvm, k))
    gmod.run()
    check_outputs(gmod, fx, "create")
    shapes, dtypes = gmod.get_input_info()
    assert dict(shapes) and set(shapes.keys()) == set(fx.inputs), "params are hidden from get_input_info"
    for k, v in fx.inputs.items():
        assert tuple(shapes[k]) == v.shape and dtypes[k] == fx.input_dtypes[k]


def test_executor_introspection(tvm):
    from tvm.contrib import graph_executor

    fx = Fixture("multi_io")
    lib = tvm.runtime.load_module(fx.lib_path)
    gmod = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    # x, y, z and the constant Relay lifted out of the graph
    assert gmod.get_num_inputs() == 4
    assert gmod.get_input_index("y") == 1
    assert gmod.get_input_index("nope") == -1
    gmod.set_input("x", fx.inputs["x"])
    assert np.array_equal(gmod.get_input("x").numpy(), fx.inputs["x"])
    assert gmod.get_input(0).shape == (2, 3)
    out = tvm.nd.empty((2, 3), "float32")
    gmod.set_input(**fx.inputs)
    gmod.run()
    gmod.get_output(0, out)
    assert np.array_equal(out.numpy(), fx.outputs[0])
    assert gmod.get_output(1).numpy().shape == ()
    imports = lib.imported_modules
    assert [m.type_key for m in imports] == ["library"]
    params = lib["get_graph_params"]()
    assert not set(params.keys()) & set(fx.inputs), "only lifted constants are factory params"
    with pytest.raises(RuntimeError, match="Could not find 'nope'"):
        gmod.set_input("nope", fx.inputs["x"])


def test_share_params_across_batch_sizes(tvm):
    from tvm.contrib import graph_executor

    f1, f8 = Fixture("mlp_unbound_b1"), Fixture("mlp_unbound_b8")
    dev = tvm.cpu()
    m1 = graph_executor.create(f1.graph_json(), tvm.runtime.load_module(f1.lib_path), dev)
    m1.load_params(f1.params())
    m8 = graph_executor.create(f8.graph_json(), tvm.runtime.load_module(f8.lib_path), dev)
    m8.share_params(m1, f8.params())
    shared = json.loads(m8.module["get_memory_usage"]())
    assert shared["weights_owned"] == 0 and shared["weights_shared"] > 400_000, shared
    del m1
    m8.set_input(**f8.inputs)
    m8.run()
    check_outputs(m8, f8, "shared")
    # The source is gone: m8 is the weights' only holder now, and made no copy of them.
    alone = json.loads(m8.module["get_memory_usage"]())
    assert (alone["weights_owned"], alone["weights_shared"]) == (shared["weights_shared"], 0), alone


def test_executors_in_a_pool_of_activation_arenas(tvm):
    """Python's own calls, with a default pool set: executors at two batch sizes draw their
    activations from one pool of one arena, from two threads, and give upstream's outputs."""
    import threading

    from tvm.contrib import graph_executor

    f1, f8 = Fixture("mlp_unbound_b1"), Fixture("mlp_unbound_b8")
    dev = tvm.cpu()
    set_pool = tvm.get_global_func("tvmrt.executor.SetArenaPool")
    set_pool(1)
    try:
        m1 = graph_executor.create(f1.graph_json(), tvm.runtime.load_module(f1.lib_path), dev)
        m1.load_params(f1.params())
        m8 = graph_executor.create(f8.graph_json(), tvm.runtime.load_module(f8.lib_path), dev)
        m8.share_params(m1, f8.params())
    finally:
        set_pool(0)
    errors = []

    def work(m, fx):
        try:
            for i in range(20):
                m.set_input(**fx.inputs)
                m.run()
                check_outputs(m, fx, f"pooled, run {i}")
        except Exception as e:  # the main thread reports it
            errors.append(e)

    threads = [threading.Thread(target=work, args=a) for a in ((m1, f1), (m8, f8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    usage = [json.loads(m.module["get_memory_usage"]()) for m in (m1, m8)]
    for u in usage:
        assert u["pool"]["capacity"] == 1 and u["pool"]["members"] == 2, u
        assert u["pool"]["leases"] == 40, u
    assert usage[0]["activations_shared"] == usage[1]["activations_shared"] == usage[1]["pool"]["bytes"]


def test_weight_only_operators_fold_and_python_set_input_params_still_reaches_them(tvm):
    from tvm.contrib import graph_executor

    fx = Fixture("mlp_unbound_b1")
    dev = tvm.cpu()
    lib = tvm.runtime.load_module(fx.lib_path)
    m = graph_executor.create(fx.graph_json(), lib, dev)
    m.load_params(fx.params())
    # Alone, an executor runs its weight-only operators every run, as upstream (no more memory).
    usage = json.loads(m.module["get_memory_usage"]())
    assert usage["ops_folded"] == 0 and usage["weights_derived"] == 0, usage
    m.module["set_fold_weights"](1)
    usage = json.loads(m.module["get_memory_usage"]())
    assert usage["ops_folded"] > 0 and usage["weights_derived"] > 0, usage
    m.set_input(**fx.inputs)
    m.run()
    check_outputs(m, fx, "folded")
    m.module["set_fold_weights"](0)
    assert json.loads(m.module["get_memory_usage"]())["ops_folded"] == 0
    m.run()
    check_outputs(m, fx, "not folded")
    m.module["set_fold_weights"](1)
    # Python's set_input(**params) writes each weight through get_input's array: what is derived
    # from them must follow (here: halved weights, compared with an executor that folds nothing).
    params = {k: v.numpy() / 2 for k, v in tvm.runtime.load_param_dict(fx.params()).items()}
    plain = graph_executor.create(fx.graph_json(), lib, dev)
    plain.module["set_fold_weights"](0)
    for g in (m, plain):
        g.set_input(**fx.inputs, **params)
        g.run()
    assert np.array_equal(m.get_output(0).numpy(), plain.get_output(0).numpy())
    assert not np.array_equal(m.get_output(0).numpy(), fx.outputs[0])


def test_params_round_trip(tvm):
    lib = tvm.runtime.load_module(Fixture("convnet").lib_path)
    params = {k: v for k, v in lib["get_graph_params"]().items()}
    blob = tvm.runtime.save_param_dict(params)
    back = tvm.runtime.load_param_dict(blob)
    assert set(back) == set(params)
    for k in params:
        assert np.array_equal(back[k].numpy(), params[k].numpy())


def test_benchmark(tvm):
    from tvm.contrib import graph_executor

    fx = Fixture("mlp_b1")
    gmod = graph_executor.GraphModule(tvm.runtime.load_module(fx.lib_path)["default"](tvm.cpu()))
    gmod.set_input(**fx.inputs)
    result = gmod.benchmark(tvm.cpu(), number=3, repeat=4)
    assert len(result.results) == 4 and all(t > 0 for t in result.results)
    inputs = {k: tvm.nd.array(v) for k, v in fx.inputs.items()}
    result = gmod.benchmark(tvm.cpu(), number=1, repeat=2, end_to_end=True, **inputs)
    assert len(result.results) == 2


def test_errors_are_raised_in_upstreams_class(tvm):
    # Upstream's runtime reports its failures as InternalError (a RuntimeError), which is what
    # code written against it catches.
    fx = Fixture("mlp_b1")
    lib = tvm.runtime.load_module(fx.lib_path)
    gmod = lib["default"](tvm.cpu())
    with pytest.raises(tvm.error.InternalError, match="output index 5 out of range"):
        gmod["get_output"](5)
    with pytest.raises(RuntimeError, match="the size in bytes must exactly match"):
        gmod["set_input"]("data", tvm.nd.array(np.zeros((1, 783), "float32")))
    with pytest.raises(tvm.error.TVMError, match="no such file"):
        tvm.runtime._ffi_api.ModuleLoadFromFile("/nonexistent/lib.so", "")
    # As upstream's, set_input copies by byte size and skips names that are not inputs.
    gmod["set_input"]("data", tvm.nd.array(np.ones((1, 784), "float32")))
    gmod["set_input"]("nope", tvm.nd.array(np.zeros((1,), "float32")))
    np.testing.assert_array_equal(gmod["get_input"]("data").numpy(), np.ones((1, 1, 28, 28), "float32"))


def test_python_callbacks_and_exceptions(tvm):
    class Boom(Exception):
        pass

    @tvm.register_func("test.add_one", override=True)
    def add_one(x):
        return x + 1

    @tvm.register_func("test.boom", override=True)
    def boom():
        raise Boom("from Python")

    assert tvm.get_global_func("test.add_one")(41) == 42
    with pytest.raises(Boom, match="from Python"):
        tvm.get_global_func("test.boom")()
    # A callback's exception travels back through the runtime unchanged, and the runtime stays usable.
    assert tvm.get_global_func("test.add_one")(1) == 2
    names = tvm._ffi.registry.list_global_func_names()
    assert "test.add_one" in names and "tvm.graph_executor.create" in names


def test_ndarray_round_trip(tvm):
    for dtype in ["float32", "float16", "float64", "int8", "uint8", "int32", "int64", "bool"]:
        a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
        nd = tvm.nd.array(a, tvm.cpu())
        assert nd.dtype == dtype and nd.shape == (3, 4)
        assert np.array_equal(nd.numpy(), a)
    assert tvm.runtime.num_threads() >= 1


def test_debug_executor(tvm, tmp_path):
    from tvm.contrib.debugger import debug_executor

    fx = Fixture("mlp_b1")
    lib = tvm.runtime.load_module(fx.lib_path)
    m = debug_executor.create(fx.graph_json(), lib, tvm.cpu(0), dump_root=str(tmp_path))
    m.load_params(fx.params())
    m.set_input(**fx.inputs)
    m.run()  # runs every node one by one, dumps their outputs, times them
    check_outputs(m, fx, "debug executor")
    times = m.run_individual(number=2, repeat=3, min_repeat_ms=0)
    assert len(times) == len(m.debug_datum.get_graph_nodes()) and all(len(t) == 3 for t in times)
    assert sum(t[0] for t in times) > 0
    out = tvm.nd.empty((1, 784))
    m.debug_get_output(1, out)  # the reshape of the input
    assert np.array_equal(out.numpy(), fx.inputs["data"].reshape(1, 784))
    # The factory's debug_create gives the same executor.
    dbg = lib["debug_create"]("default", tvm.cpu(0))
    dbg["execute_node"](len(m.debug_datum.get_graph_nodes()) - 1)


def test_aligned_params_load_in_upstream_tvm(tvm, tmp_path):
    """The converter's output is still a params file upstream's own runtime loads."""
    import os
    import subprocess
    import sys

    fx = Fixture("mlp_unbound_b1")
    aligned = tvm.get_global_func("runtime.AlignParams")(fx.params())
    path = tmp_path / "aligned.params"
    path.write_bytes(bytes(aligned))
    # This executor maps it and uses the weights in place.
    from tvm.contrib import graph_executor

    gmod = graph_executor.create(fx.graph_json(), tvm.runtime.load_module(fx.lib_path), tvm.cpu())
    assert gmod.module["load_params_from_file"](str(path)) == 6
    gmod.set_input(**fx.inputs)
    gmod.run()
    check_outputs(gmod, fx, "mapped")
    # Upstream's runtime, in a fresh process, loads the same file and gets the same outputs.
    upstream = os.path.dirname(os.environ["TVM_UPSTREAM_RUNTIME"])
    script = f"""
import os, numpy as np, tvm
from tvm.contrib import graph_executor
assert os.path.realpath(tvm._ffi.base._LIB._name).startswith(os.path.realpath({upstream!r})), tvm._ffi.base._LIB._name
lib = tvm.runtime.load_module({fx.lib_path!r})
g = graph_executor.create(open({str(fx.dir / 'graph.json')!r}).read(), lib, tvm.cpu())
g.load_params(open({str(path)!r}, 'rb').read())
g.set_input('data', np.fromfile({str(fx.dir / 'in_0.bin')!r}, dtype='float32').reshape(1, 1, 28, 28))
g.run()
want = np.fromfile({str(fx.dir / 'out_0.bin')!r}, dtype='float32').reshape(1, 10)
assert np.array_equal(g.get_output(0).numpy(), want)
print('upstream ok')
"""
    env = dict(os.environ, TVM_LIBRARY_PATH=upstream)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "upstream ok" in done.stdout, done.stderr[-2000:]


def test_an_edited_prepared_file_is_refused_until_saved_as_plain_params(tvm, tmp_path):
    """TVM's own load_param_dict -> edit -> save_param_dict round trip keeps every record of a
    prepared file, its stamp too: loaded from bytes or mapped from the file, the executor refuses
    weights that are not the ones the stamp says were written (a bit flipped on disk looks the
    same). Aligned (runtime.AlignParams drops the records it cannot verify), the file is plain
    params, and both loaders run the edited model, never the weights the derived records came
    from."""
    import json

    from tvm.contrib import graph_executor

    fx = Fixture("mlp_unbound_b1")
    lib = tvm.runtime.load_module(fx.lib_path)
    maker = graph_executor.create(fx.graph_json(), lib, tvm.cpu())
    prepared = bytes(maker.module["prepare_params"](fx.params()))
    path = tmp_path / "prepared.params"
    path.write_bytes(prepared)
    # Unedited, mapped: its derived weights are used.
    fresh = graph_executor.create(fx.graph_json(), lib, tvm.cpu())
    fresh.module["load_params_from_file"](str(path))
    assert json.loads(fresh.module["get_memory_usage"]())["prepared_params"] == "used"
    fresh.set_input(**fx.inputs)
    fresh.run()
    check_outputs(fresh, fx, "prepared")

    params = dict(tvm.runtime.load_param_dict(prepared).items())
    assert any(name.startswith("__tvmrt.derived.") for name in params), sorted(params)
    params["fc1_weight"] = tvm.nd.array(params["fc1_weight"].numpy() * 2)
    edited = bytes(tvm.runtime.save_param_dict(params))
    path.write_bytes(edited)
    with pytest.raises(tvm.error.TVMError, match="not the ones written"):
        graph_executor.create(fx.graph_json(), lib, tvm.cpu()).load_params(edited)
    with pytest.raises(tvm.error.TVMError, match="not the ones written"):
        graph_executor.create(fx.graph_json(), lib, tvm.cpu()).module["load_params_from_file"](str(path))
    blob = bytes(tvm.get_global_func("runtime.AlignParams")(edited))
    path.write_bytes(blob)
    from_bytes = graph_executor.create(fx.graph_json(), lib, tvm.cpu())
    from_bytes.load_params(blob)
    from_file = graph_executor.create(fx.graph_json(), lib, tvm.cpu())
    from_file.module["load_params_from_file"](str(path))
    outs = []
    for g in (from_bytes, from_file):
        g.set_input(**fx.inputs)
        g.run()
        outs.append(g.get_output(0).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], fx.outputs[0]), "the edit changes the output"
