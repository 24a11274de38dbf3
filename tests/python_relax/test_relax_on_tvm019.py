"""TVM 0.19's own Python package (runtime only) on this project's libtvm_runtime.so, running the
Relax executables TVM 0.19 made (tests/fixtures/relax/0.19): `tvm.runtime.load_module` and
`relax_vm.VirtualMachine`, as a deployment does; every case byte-equal to 0.19's own runtime.
scripts/test_relax_python.sh runs it."""

import os
import pathlib
import sys
import threading

import numpy as np
import pytest
import tvm
from tvm.runtime import relax_vm

# The fixture reader both TVM-side suites share (tests/relax_manifest.py).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import relax_manifest
from relax_manifest import flatten

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "relax" / "0.19"
MODELS = sorted(p.name for p in FIXTURES.iterdir())


def test_the_runtime_is_ours():
    assert os.path.realpath(tvm._ffi.base._LIB._name).startswith(os.path.realpath(os.environ["TVM_LIBRARY_PATH"]))


def manifest(model):
    return relax_manifest.manifest(FIXTURES / model)


@pytest.mark.parametrize("model", MODELS)
def test_every_case_matches(model):
    vm = relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu())
    for case in manifest(model):
        got = flatten(vm["main"](*[tvm.nd.array(a) for a in case["inputs"]]), [])
        assert len(got) == len(case["outputs"])
        for g, want in zip(got, case["outputs"]):
            assert g.dtype == want.dtype and g.shape == want.shape
            assert g.tobytes() == want.tobytes()


def test_stateful_calls_and_saved_functions():
    model = "tuple_mixed"
    case = manifest(model)[0]
    vm = relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu())
    vm.set_input("main", tvm.nd.array(case["inputs"][0]))
    vm.invoke_stateful("main")
    outs = flatten(vm.get_outputs("main"), [])
    assert [o.tobytes() for o in outs] == [o.tobytes() for o in case["outputs"]]
    vm.save_function("main", "main_saved", tvm.nd.array(case["inputs"][0]))
    again = flatten(vm["main_saved"](), [])
    assert again[0].tobytes() == case["outputs"][0].tobytes()


def test_one_vm_from_threads():
    model = "mlp_args"
    cases = manifest(model)
    vm = relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu())
    errors = []

    def work(t):
        try:
            for i in range(200):
                case = cases[(t + i) % len(cases)]
                got = vm["main"](*[tvm.nd.array(a) for a in case["inputs"]]).numpy()
                assert got.tobytes() == case["outputs"][0].tobytes()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_wrong_arguments_are_errors():
    model = "mlp_args"
    case = manifest(model)[0]
    vm = relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu())
    with pytest.raises(tvm.TVMError, match="expects 4 arguments"):
        vm["main"](tvm.nd.array(case["inputs"][0]))
    bad = [tvm.nd.array(a) for a in case["inputs"]]
    bad[1] = tvm.nd.array(np.zeros((3, 3), "float32"))
    with pytest.raises(tvm.TVMError, match="w1"):
        vm["main"](*bad)
