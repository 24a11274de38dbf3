"""A vendor plug-in (c_tests/cxx/plugin/test_plugin.cc, written against upstream's C++ headers and
built by CMake) hosted from TVM's own Python on this runtime, as a deployment loads one: the
plug-in's .so loaded into the process, then an artefact whose module blob holds the plug-in's
module (tests/fixtures/byoc/plugin), its module reached through the module globals TVM's Python
calls, imports seen from both sides. Also the module globals on this runtime's own modules."""
import ctypes
import os

import numpy as np
import pytest

from conftest import FIXTURES, Fixture


def plugin_path():
    path = os.environ.get("TVM_RT_TEST_PLUGIN", "")
    if not os.path.exists(path):
        assert os.environ.get("TVM_RT_REQUIRE_UPSTREAM_LIB") != "1", f"no test plug-in at {path!r}"
        pytest.skip("the test plug-in is built by CMake (c_tests/cxx/plugin/test_plugin.cc)")
    return path


@pytest.fixture(scope="module")
def plugin(tvm):
    # As a vendor's instructions say: load the plug-in's library before the model.
    return ctypes.CDLL(plugin_path(), ctypes.RTLD_GLOBAL)


def tree(module):
    yield module
    for m in module.imported_modules:
        yield from tree(m)


def test_an_artefact_holding_a_plugins_module_runs(tvm, plugin, tmp_path):
    from tvm.contrib import graph_executor

    fx = Fixture("byoc/plugin")
    lib = tvm.runtime.load_module(fx.lib_path)
    gmod = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gmod.set_input(**fx.inputs)
    gmod.run()
    out = gmod.get_output(0).numpy()
    assert np.array_equal(out, fx.outputs[0])
    x, y = fx.inputs["x"], fx.inputs["y"]
    assert np.array_equal(out, np.maximum(x * y + np.float32(1), 0))

    found = [m for m in tree(lib) if m.type_key == "tvmrt_test_plugin"]
    assert len(found) == 1, [m.type_key for m in tree(lib)]
    pm = found[0]
    assert pm["plugin_describe"]() == "tvmgen_default_tvmrt_test_plugin_main_0:multiply"
    assert pm.get_source("c") == "// tvmrt_test_plugin (c): tvmgen_default_tvmrt_test_plugin_main_0 = multiply(a, b)\n"
    assert pm.format == "tvmplug"
    # Its SaveToFile, and its format's loader, through load_module.
    path = str(tmp_path / "saved.tvmplug")
    pm.save(path)
    back = tvm.runtime.load_module(path)
    assert back.type_key == "tvmrt_test_plugin"
    assert back["plugin_describe"]() == pm["plugin_describe"]()


def test_imports_are_seen_from_both_sides(tvm, plugin):
    made = tvm.get_global_func("tvmrt_test_plugin.create")("sym", "add")
    lib = tvm.runtime.load_module(Fixture("mlp_b1").lib_path)
    made.import_module(lib)
    # The plug-in's own C++ sees it in its imports_ ...
    assert made["plugin_num_imports"]() == 1
    assert made["plugin_import_type_key"](0) == "GraphExecutorFactory"
    assert made["plugin_find_in_imports"]("default") is not None
    assert made["plugin_from_env"]("default") is not None
    assert made["plugin_from_env"]("runtime.ModuleGetTypeKey") is not None  # then the registry
    # ... and so does this runtime, through any handle of the module.
    assert [m.type_key for m in made.imported_modules] == ["GraphExecutorFactory"]
    assert made.get_function("default", query_imports=True) is not None
    with pytest.raises(tvm.TVMError, match="Cyclic"):
        lib.import_module(made)
    tvm.runtime._ffi_api.ModuleClearImports(made)
    assert made["plugin_num_imports"]() == 0 and made.imported_modules == []


def test_module_globals_on_this_runtimes_modules(tvm, tmp_path):
    from tvm.runtime import vm as rvm

    lib = tvm.runtime.load_module(Fixture("mlp_b1").lib_path)
    # Upstream's answers: no format or source for an operator library.
    library = lib.imported_modules[0]
    assert library.type_key == "library"
    with pytest.raises(tvm.TVMError, match=r"Module\[library\] does not support GetFormat"):
        _ = library.format
    with pytest.raises(tvm.TVMError, match=r"Module\[library\] does not support GetSource"):
        library.get_source()
    # A Relay VM executable saves as upstream's does, and loads back by its format.
    exe_dir = FIXTURES / "vm" / "0.16" / "mlp_dyn"
    code = (exe_dir / "code.ro").read_bytes()
    exe = rvm.Executable.load_exec(bytearray(code), tvm.runtime.load_module(str(exe_dir / "lib.so")))
    path = str(tmp_path / "exe.bin")
    exe.mod.save(path)
    back = tvm.runtime.load_module(path, "VMExecutable")
    assert back.type_key == "VMExecutable"
    assert back["get_bytecode"]() == exe.mod["get_bytecode"]()
    # An object file an external codegen made, carried for export_library.
    obj = tmp_path / "ext.o"
    obj.write_bytes(b"\x7fELF not really")
    static = tvm.runtime._ffi_api.ModuleLoadStaticLibrary(str(obj), ["ext_fn"])
    assert static.type_key == "static_library" and static.format == "o"
    assert list(static["get_func_names"]()) == ["ext_fn"]
    static.save(str(tmp_path / "copy.o"))
    assert (tmp_path / "copy.o").read_bytes() == obj.read_bytes()
