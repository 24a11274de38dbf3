"""TVM's own Relay VM Python (tvm.runtime.vm, profiler_vm) on this project's library, on executables
built by TVM 0.8, 0.9, 0.16 and 0.19 (tests/fixtures/vm): outputs byte-equal to each compiler's
own VM, both artefact forms, every call TVM's VirtualMachine and Executable wrappers make."""
import pathlib

import numpy as np
import pytest

from conftest import FIXTURES

VM = FIXTURES / "vm"
VERSIONS = ["0.8", "0.9", "0.16", "0.19"]


class VmFixture:
    def __init__(self, d):
        self.dir = pathlib.Path(d)
        self.params = []
        self.cases = []
        for line in (self.dir / "manifest.txt").read_text().splitlines():
            w = line.split()
            if w[0] == "params":
                self.params = w[1:]
            elif w[0] == "case":
                self.cases.append(({}, [], None))
            elif w[0] == "input":
                nd = int(w[3])
                shape = [int(x) for x in w[4 : 4 + nd]]
                self.cases[-1][0][w[1]] = np.fromfile(self.dir / w[4 + nd], dtype=w[2]).reshape(shape)
            elif w[0] == "output":
                nd = int(w[2])
                shape = [int(x) for x in w[3 : 3 + nd]]
                self.cases[-1][1].append(np.fromfile(self.dir / w[3 + nd], dtype=w[1]).reshape(shape))
            elif w[0] == "structure":
                ins, outs, _ = self.cases[-1]
                self.cases[-1] = (ins, outs, w[1])


def flatten(tvm, obj, out):
    if isinstance(obj, tvm.runtime.container.ADT):
        return "(" + "".join(flatten(tvm, obj[i], out) for i in range(len(obj))) + ")"
    out.append(obj.numpy())
    return "t"


def check(tvm, result, case, what):
    outs = []
    structure = flatten(tvm, result, outs)
    assert structure == case[2], what
    assert len(outs) == len(case[1]), what
    for k, (g, w) in enumerate(zip(outs, case[1])):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k)
        assert g.tobytes() == w.tobytes(), f"{what}: output {k} differs from the compiler's own VM"


def fixture_dirs():
    return [VM / v / m for v in VERSIONS for m in sorted(p.name for p in (VM / v).iterdir())]


@pytest.mark.parametrize("d", fixture_dirs(), ids=lambda d: f"{d.parent.name}-{d.name}")
def test_every_version_through_tvms_vm(tvm, d):
    from tvm.runtime import vm as rvm

    f = VmFixture(d)
    exe = rvm.Executable(tvm.runtime.load_module(str(d / "vm.so")))
    assert exe.get_function_params("main") == f.params
    vm = rvm.VirtualMachine(exe, tvm.cpu())
    for k, case in enumerate(f.cases):
        check(tvm, vm.invoke("main", **case[0]), case, f"{d} case {k}")
        # Positional, and through run().
        check(tvm, vm.run(*[case[0][p] for p in f.params]), case, f"{d} case {k} (run)")


def test_split_form_and_the_executables_functions(tvm):
    from tvm.runtime import vm as rvm

    d = VM / "0.19" / "mlp_dyn"
    f = VmFixture(d)
    lib = tvm.runtime.load_module(str(d / "lib.so"))
    exe = rvm.Executable.load_exec(bytearray((d / "code.ro").read_bytes()), lib)
    assert "VM Function[0]: main(data)" in exe.bytecode
    assert "Primitive ops (#7)" in exe.stats
    assert "VM VirtualDevice[0]: device type 1" in exe.virtual_devices
    assert "VM PackedFunc[0]" in exe.primitives
    assert "VM Const[9]" in exe.constants
    assert exe.lib.type_key == "library"
    assert exe.globals == ["main"]
    code, lib2 = exe.save()
    again = rvm.Executable.load_exec(code, lib2)
    vm = rvm.VirtualMachine(again, tvm.cpu(), memory_cfg="naive")
    check(tvm, vm.invoke("main", f.cases[2][0]["data"]), f.cases[2], "saved and loaded again")


def test_stateful_one_input_outputs_set_and_benchmark(tvm):
    from tvm.runtime import vm as rvm

    d = VM / "0.16" / "mlp_dyn"
    f = VmFixture(d)
    vm = rvm.VirtualMachine(rvm.Executable(tvm.runtime.load_module(str(d / "vm.so"))), tvm.cpu())
    x = f.cases[1][0]["data"]
    vm.set_one_input("main", "data", tvm.nd.array(x))
    vm.invoke_stateful("main")
    outs = vm.get_outputs()
    assert [o.numpy().tobytes() for o in outs] == [o.tobytes() for o in f.cases[1][1]]
    assert vm.get_input_index("data") == 0 and vm.get_input_index("nope") == -1
    r = vm.benchmark(tvm.cpu(), x, func_name="main", repeat=2, number=2)
    assert len(r.results) == 2 and r.mean > 0
    r = vm.benchmark(tvm.cpu(), tvm.nd.array(x), func_name="main", repeat=2, number=1, end_to_end=True)
    assert r.mean > 0


def test_the_profiler_vm_returns_a_report(tvm):
    from tvm.runtime import profiler_vm
    from tvm.runtime import vm as rvm

    d = VM / "0.19" / "nms_head"
    f = VmFixture(d)
    exe = rvm.Executable(tvm.runtime.load_module(str(d / "vm.so")))
    prof = profiler_vm.VirtualMachineProfiler(exe, tvm.cpu())
    report = prof.profile(**f.cases[0][0])
    names = [c["Name"] for c in report.calls]
    assert any("non_max_suppression" in n or "nms" in n for n in names), names
    assert "VM::AllocStorage" in names
    table = report.table()
    assert "Duration (us)" in table
    assert report.configuration["Executor"] == "VM"


def test_late_bound_constants(tvm, tmp_path):
    from tvm.runtime import vm as rvm

    d = VM / "0.16" / "conv_static"
    f = VmFixture(d)
    exe = rvm.Executable(tvm.runtime.load_module(str(d / "vm.so")))
    path = str(tmp_path / "consts.params")
    exe.move_late_bound_consts(path, byte_limit=256)
    with pytest.raises(tvm.TVMError, match="late-bound"):
        rvm.VirtualMachine(exe, tvm.cpu())
    exe.load_late_bound_consts(path)
    vm = rvm.VirtualMachine(exe, tvm.cpu())
    check(tvm, vm.invoke("main", **f.cases[0][0]), f.cases[0], "late-bound constants loaded back")


def test_errors_reach_python(tvm):
    from tvm.runtime import vm as rvm

    d = VM / "0.16" / "mlp_dyn"
    vm = rvm.VirtualMachine(rvm.Executable(tvm.runtime.load_module(str(d / "vm.so"))), tvm.cpu())
    # What the kernels check (rank, dtype): an executable carries no parameter types.
    with pytest.raises(tvm.TVMError):
        vm.invoke("main", np.zeros((2, 16), "int32"))
    with pytest.raises(tvm.TVMError):
        vm.invoke("main", np.zeros((32,), "float32"))
    with pytest.raises(tvm.TVMError, match="Cannot find function"):
        vm.invoke("nope")
    with pytest.raises(tvm.TVMError, match="not a Relay VM executable"):
        rvm.Executable.load_exec(bytearray(b"junk" * 10), tvm.runtime.load_module(str(d / "lib.so")))
