"""TVM 0.25-0.27's own Python package (runtime only, on upstream's libtvm_ffi.so from the
apache-tvm-ffi wheel) on this project's libtvm_runtime.so, running the Relax executables that
version made (tests/fixtures/relax/<version>): `tvm.runtime.load_module` and
`tvm.runtime.vm.VirtualMachine`, as a deployment does; every case byte-equal to that version's own
runtime. scripts/test_relax_python.sh runs it once per version."""

import os
import pathlib
import sys
import threading

import numpy as np
import pytest
import tvm
from tvm.runtime import vm as relax_vm

import tvm_ffi

# The fixture reader both TVM-side suites share (tests/relax_manifest.py).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import relax_manifest
from relax_manifest import flatten

VERSION = ".".join(tvm.__version__.split(".")[:2])
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "relax" / VERSION
MODELS = sorted(p.name for p in FIXTURES.iterdir())


def mapped_libraries():
    return [line.split()[-1] for line in open("/proc/self/maps") if line.rstrip().endswith(".so")]


def test_the_runtime_is_ours_beside_upstreams_ffi():
    ours = os.path.realpath(os.path.join(os.environ["TVM_LIBRARY_PATH"], "libtvm_runtime.so"))
    runtimes = {os.path.realpath(p) for p in mapped_libraries() if os.path.basename(p) == "libtvm_runtime.so"}
    assert runtimes == {ours}
    ffi = {os.path.realpath(p) for p in mapped_libraries() if os.path.basename(p) == "libtvm_ffi.so"}
    assert ffi == {os.path.realpath(os.path.join(os.path.dirname(tvm_ffi.__file__), "lib", "libtvm_ffi.so"))}


def manifest(model):
    return relax_manifest.manifest(FIXTURES / model)


def load(model):
    return relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu())


def check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("model", MODELS)
def test_every_case_matches(model):
    vm = load(model)
    for case in manifest(model):
        check(flatten(vm["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]), []), case["outputs"])


def test_constants_mapped_from_one_file_through_tvms_python(tmp_path):
    """The executable's `tvmrt.map_constants(path)`, called from TVM's own Python: the first load
    writes the aligned file (1), later loads map it (0), a damaged one is written again; the
    answers stay the fixtures'."""
    path = str(tmp_path / "constants.vmconst")
    for wrote in (1, 0, "damaged", 0):
        if wrote == "damaged":
            with open(path, "r+b") as f:
                f.seek(-8, 2)
                f.write(b"\xff" * 8)
            wrote = 1
        exe = tvm.runtime.load_module(str(FIXTURES / "mlp_bound" / "model.so"))
        assert exe["tvmrt.map_constants"](path) == wrote
        vm = relax_vm.VirtualMachine(exe, tvm.cpu())
        for case in manifest("mlp_bound"):
            check(flatten(vm["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]), []), case["outputs"])


@pytest.mark.parametrize("memory", ["naive", "pooled"])
def test_both_allocators(memory):
    model = "mlp_bound"
    vm = relax_vm.VirtualMachine(tvm.runtime.load_module(str(FIXTURES / model / "model.so")), tvm.cpu(), memory)
    for case in manifest(model):
        check(flatten(vm["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]), []), case["outputs"])


def test_the_executable_and_its_library():
    exe = tvm.runtime.load_module(str(FIXTURES / "mlp_args" / "model.so"))
    assert exe.kind == "relax.VMExecutable"
    assert [m.kind for m in exe.imports] == ["library"]
    assert exe.implements_function("vm_load_executable")
    assert not exe.implements_function("no_such_function")
    assert "main" in exe["as_text"]()
    assert exe["has_function"]("main") and not exe["has_function"]("nope")


def test_stateful_calls_and_saved_functions():
    model = "tuple_mixed"
    case = manifest(model)[0]
    vm = load(model)
    vm.set_input("main", tvm.runtime.tensor(case["inputs"][0]))
    vm.invoke_stateful("main")
    check(flatten(vm.get_outputs("main"), []), case["outputs"])
    vm.save_function("main", "main_saved", tvm.runtime.tensor(case["inputs"][0]))
    again = flatten(vm["main_saved"](), [])
    assert again[0].tobytes() == case["outputs"][0].tobytes()


def test_parameter_names_and_arity():
    vm = load("mlp_args")
    assert vm._get_function_arity("main") == 4
    assert [vm._get_function_param_name("main", i) for i in range(4)] == ["x", "w1", "b1", "w2"]


def test_one_vm_from_threads():
    model = "mlp_args"
    cases = manifest(model)
    vm = load(model)
    errors = []

    def work(t):
        try:
            for i in range(200):
                case = cases[(t + i) % len(cases)]
                got = vm["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]).numpy()
                assert got.tobytes() == case["outputs"][0].tobytes()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_wrong_arguments_are_errors_that_name_them():
    model = "mlp_args"
    case = manifest(model)[0]
    vm = load(model)
    # InternalError (a RuntimeError), as upstream raises it.
    with pytest.raises(RuntimeError, match="expects 4 arguments"):
        vm["main"](tvm.runtime.tensor(case["inputs"][0]))
    bad = [tvm.runtime.tensor(a) for a in case["inputs"]]
    bad[1] = tvm.runtime.tensor(np.zeros((3, 3), "float32"))
    with pytest.raises(RuntimeError, match="w1"):
        vm["main"](*bad)
    with pytest.raises(Exception, match="Unknown function"):
        vm.save_function("no_such_function", "x")
    # The VM still answers after each error.
    check(flatten(vm["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]), []), case["outputs"])


def test_a_kernel_error_is_an_exception():
    exe = tvm.runtime.load_module(str(FIXTURES / "mlp_args" / "model.so"))
    matmul = exe.imports[0]["matmul"]
    with pytest.raises(Exception, match="matmul"):
        matmul(tvm.runtime.tensor(np.zeros((2, 2), "float32")))


def test_a_host_tensor_not_aligned_as_ours_is_read_right():
    model = "mlp_bound"
    case = manifest(model)[0]
    vm = load(model)
    # A numpy array handed over through DLPack, 16 bytes past a 64-byte boundary: passed as it is
    # for the call, not shared as the runtime's own tensors are.
    x = case["inputs"][0]
    buf = np.empty(x.nbytes + 128, dtype=np.uint8)
    start = (-buf.ctypes.data) % 64 + 16
    view = buf[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
    view[...] = x
    assert view.ctypes.data % 64 == 16
    got = vm["main"](tvm_ffi.from_dlpack(view)).numpy()
    assert got.tobytes() == case["outputs"][0].tobytes()


UPSTREAM_CHILD = """
import sys, numpy as np, tvm
from tvm.runtime import vm as relax_vm
assert "tvm/lib/libtvm_runtime.so" in open("/proc/self/maps").read()
model, inputs, outputs, full = sys.argv[1:5]
if full == "1":
    from tvm import relax  # noqa: F401 - registers relax.run.* (upstream keeps them in Python)
vm = relax_vm.VirtualMachine(tvm.runtime.load_module(model), tvm.cpu())
data = np.load(inputs)
got = {}
for case in sorted({k.split("_")[0] for k in data.files}, key=int):
    n = sum(1 for k in data.files if k.startswith(case + "_"))
    out = vm["main"](*[tvm.runtime.tensor(data[f"{case}_{i}"]) for i in range(n)])
    flat = []
    stack = [out]
    def walk(o):
        if hasattr(o, "numpy"):
            flat.append(o.numpy())
        else:
            for x in o:
                walk(x)
    walk(out)
    for i, a in enumerate(flat):
        got[f"{case}_{i}"] = a
np.savez(outputs, **got)
"""


def random_like(a, rng):
    if a.dtype == np.bool_:
        return rng.integers(0, 2, a.shape).astype(np.bool_)
    if a.dtype.kind in "iu":
        return rng.integers(0, 8, a.shape).astype(a.dtype)
    return rng.standard_normal(a.shape).astype(a.dtype)


@pytest.mark.parametrize("model", MODELS)
def test_random_inputs_match_upstreams_runtime(model, tmp_path):
    """Differential: the same random inputs through this runtime and through the version's own
    (its wheel's libtvm_runtime.so, in a child process), byte for byte."""
    import subprocess
    import sys

    rng = np.random.default_rng(sum(map(ord, model)))
    inputs = {}
    for c, case in enumerate(manifest(model)):
        for seed in range(3):
            for i, a in enumerate(case["inputs"]):
                inputs[f"{3 * c + seed}_{i}"] = random_like(a, rng)
    np.savez(tmp_path / "in.npz", **inputs)
    # Upstream's runtime alone lacks relax.run.* (its Python package registers them, with the
    # compiler): that model's side runs with the whole package.
    full = model == "runtime_ops"
    drop = {"TVM_LIBRARY_PATH"} | ({"TVM_USE_RUNTIME_LIB"} if full else set())
    env = {k: v for k, v in os.environ.items() if k not in drop}
    subprocess.run(
        [
            sys.executable,
            "-c",
            UPSTREAM_CHILD,
            str(FIXTURES / model / "model.so"),
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
            "1" if full else "0",
        ],
        env=env,
        check=True,
        timeout=300,
    )
    want = np.load(tmp_path / "out.npz")
    vm = load(model)
    cases = sorted({k.split("_")[0] for k in inputs}, key=int)
    compared = 0
    for case in cases:
        n = sum(1 for k in inputs if k.startswith(case + "_"))
        got = flatten(vm["main"](*[tvm.runtime.tensor(inputs[f"{case}_{i}"]) for i in range(n)]), [])
        for i, g in enumerate(got):
            w = want[f"{case}_{i}"]
            assert g.dtype == w.dtype and g.shape == w.shape, (case, i)
            assert g.tobytes() == w.tobytes(), (case, i)
            compared += 1
    assert compared >= len(cases)


def test_hostile_arguments_are_errors_never_crashes():
    """Every VM and executable function called with values of every kind tvm-ffi passes (None,
    numbers, strings, bytes, lists, tuples, maps, shapes, modules, functions, devices, dtypes,
    numpy arrays), in wrong counts: each an exception or an answer, the process alive, and the
    model answering right after."""
    model = "mlp_args"
    case = manifest(model)[0]
    exe = tvm.runtime.load_module(str(FIXTURES / model / "model.so"))
    vm = relax_vm.VirtualMachine(exe, tvm.cpu())
    x = tvm.runtime.tensor(case["inputs"][0])
    kinds = [None, 1, 2.5, True, "text", b"bytes", [1, 2, 3], (x, x), {"a": x}, tvm_ffi.Shape([1, 2])]
    kinds += [exe, vm["main"], tvm.cpu(), tvm_ffi.dtype("float32"), np.ones(3)]
    names = ["main", "vm_initialization", "set_input", "invoke_stateful", "get_output", "get_output_arity"]
    names += ["save_function", "get_function_param_name", "get_function_arity", "invoke_closure", "set_num_threads"]
    errors = 0
    for name in names:
        f = vm.module[name]
        for w in kinds:
            for args in ([], [w], [w, w], [w, w, w, w], ["main", w, w, w], [x, w, w, w]):
                try:
                    f(*args)
                except Exception:  # every failure must be an exception, which is the point
                    errors += 1
    for name in ["stats", "as_text", "has_function", "vm_load_executable"]:
        for w in kinds:
            try:
                exe[name](w)
            except Exception:  # as above
                errors += 1
    assert errors > 500
    again = load(model)
    check(flatten(again["main"](*[tvm.runtime.tensor(a) for a in case["inputs"]]), []), case["outputs"])
