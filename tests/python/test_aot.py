"""AOT executor artefacts (scripts/make_aot_fixtures.py: TVM 0.16 and 0.19, every option of a
Runtime("cpp") build) through TVM's own Python (`tvm.runtime.executor.AotModule`) on this runtime:
outputs equal to the compiler's own runtime's."""
import numpy as np
import pytest

from conftest import FIXTURES, Fixture


def aot_fixtures():
    return sorted(f"aot/{v.name}/{m.name}" for v in (FIXTURES / "aot").iterdir() for m in v.iterdir())


def module_name(fx):
    for line in (fx.dir / "manifest.txt").read_text().splitlines():
        if line.startswith("module_name "):
            return line.split()[1]
    return "default"


@pytest.mark.parametrize("name", aot_fixtures())
def test_aot_module(tvm, name):
    from tvm.runtime.executor import AotModule

    fx = Fixture(name)
    lib = tvm.runtime.load_module(fx.lib_path)
    assert lib.type_key == "AotExecutorFactory"
    assert [m.type_key for m in lib.imported_modules] == ["metadata_module"]
    assert list(lib["list_module_names"]()) == [module_name(fx)]
    # Two executors of one artefact, run in turn: each its own arrays.
    mods = [AotModule(lib[module_name(fx)](tvm.cpu(0))) for _ in range(2)]
    for k, m in enumerate(mods):
        m.set_input(**{n: v * (k + 1) for n, v in fx.inputs.items()})
    mods[0].run()
    for k, want in enumerate(fx.outputs):
        assert np.array_equal(mods[0].get_output(k).numpy(), want), (name, k)
    mods[1].run(**fx.inputs)
    for k, want in enumerate(fx.outputs):
        assert np.array_equal(mods[1].get_output(k).numpy(), want), (name, k)
    shapes, dtypes = mods[0].get_input_info()
    assert list(shapes.values()) == [tuple(v.shape) for v in fx.inputs.values()]
    assert set(dtypes.values()) == {"float32"}
    with pytest.raises(RuntimeError, match="Could not find 'nope'"):
        mods[0].set_input("nope", fx.outputs[0])
