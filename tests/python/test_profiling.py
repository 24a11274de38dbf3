"""Profiles as upstream reports them: the debug executor's profile() returns TVM's Report (its
table, CSV and JSON as upstream lays them out, its fields from Python), locally and as profile_rpc's
JSON; compared field by field with upstream's own library profiling the same fixtures (durations
only for being positive and adding up), and a report of either library read by the other."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import Fixture

CPU_MODELS = ["convnet", "mlp_unbound_b1", "lstm_seq8"]

# Profiles a fixture with TVM's Python on upstream's library (in a process of its own) and prints
# the report's JSON, its unsorted table and its CSV.
UPSTREAM_SCRIPT = """
import json, sys, numpy as np, tvm
from tvm.contrib.debugger import debug_executor
fx, device = sys.argv[1], sys.argv[2]
dev = tvm.cl(0) if device == "opencl" else tvm.cpu(0)
lib = tvm.runtime.load_module(fx + "/lib.so")
m = debug_executor.create(open(fx + "/graph.json").read(), lib, dev, dump_root=sys.argv[3])
import os
if os.path.exists(fx + "/params.bin"):
    m.load_params(open(fx + "/params.bin", "rb").read())
inputs = json.loads(sys.argv[4])
for name, (dtype, shape, path) in inputs.items():
    m.set_input(name, np.fromfile(path, dtype=dtype).reshape(shape))
r = m.profile()
print(json.dumps({"json": r.json(), "table": r.table(sort=False, aggregate=False, col_sums=False),
                  "csv": r.csv()}))
if len(sys.argv) > 5:
    # A report written by the other library, read here.
    other = tvm.runtime.profiling.Report.from_json(open(sys.argv[5]).read())
    print(json.dumps({"other_calls": len(other.json() and json.loads(other.json())["calls"])}))
"""


def inputs_of(fx):
    return {
        name: (str(a.dtype), list(a.shape), str(fx.dir / f"in_{k}.bin"))
        for k, (name, a) in enumerate(fx.inputs.items())
    }


def upstream_library_dir(device):
    """Upstream's library: the wheel's for the CPU, ../shared/upstream's (built with OpenCL) for
    OpenCL; None when that one is missing and not required."""
    if device == "cpu":
        return os.path.dirname(os.environ["TVM_UPSTREAM_RUNTIME"])
    shared = os.environ.get("TVM_UPSTREAM_SHARED", "")
    if os.path.exists(os.path.join(shared, "libtvm_runtime.so")):
        return shared
    assert os.environ.get("TVM_RT_REQUIRE_UPSTREAM_LIB") != "1", f"no upstream library in {shared!r}"
    return None


def upstream_profile(fx, device, tmp_path, other_json=None):
    upstream = upstream_library_dir(device)
    env = dict(os.environ, TVM_LIBRARY_PATH=upstream)
    args = [sys.executable, "-c", UPSTREAM_SCRIPT, str(fx.dir), device, str(tmp_path / "upstream"),
            json.dumps(inputs_of(fx))]
    if other_json is not None:
        path = tmp_path / "ours.json"
        path.write_text(other_json)
        args.append(str(path))
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    out = json.loads(lines[-2] if other_json is not None else lines[-1])
    if other_json is not None:
        out.update(json.loads(lines[-1]))
    return out


def our_profile(tvm, fx, dev, tmp_path):
    from tvm.contrib.debugger import debug_executor

    lib = tvm.runtime.load_module(str(fx.dir / "lib.so"))
    m = debug_executor.create(fx.graph_json(), lib, dev, dump_root=str(tmp_path / "ours"))
    if (fx.dir / "params.bin").exists():
        m.load_params(fx.params())
    return m, m.profile(**fx.inputs)


# What a call records besides its timing, as both libraries must agree on it.
FIELDS = ("Name", "Argument Shapes", "Device", "Count", "Hash")


def fields(call):
    out = {k: call[k] for k in FIELDS if k in call}
    out.update({k: v for k, v in call.items() if "layout" in k})
    return out


def compare_with_upstream(ours, theirs):
    a, b = json.loads(ours.json()), json.loads(theirs["json"])
    assert [fields(c) for c in a["calls"]] == [fields(c) for c in b["calls"]]
    assert set(a["configuration"]) == set(b["configuration"]) == {"Number of threads", "Executor"}
    assert a["configuration"]["Executor"] == {"string": "Graph"}
    assert set(a["device_metrics"]) == set(b["device_metrics"])
    for dev, metrics in a["device_metrics"].items():
        assert set(metrics) == set(b["device_metrics"][dev]) and "Percent" not in metrics
    # Durations: positive, and the calls add up to no more than the run's total.
    total = max(m["Duration (us)"]["microseconds"] for m in a["device_metrics"].values())
    durations = [c["Duration (us)"]["microseconds"] for c in a["calls"]]
    assert all(d >= 0 for d in durations) and 0 < sum(durations) <= total * 1.001
    for c in a["calls"]:
        want = c["Duration (us)"]["microseconds"] / total * 100
        assert abs(c["Percent"]["percent"] - want) < 1e-9
    # The table and the CSV: the same layout, but for the measured numbers.
    ours_table = ours.table(sort=False, aggregate=False, col_sums=False).splitlines()
    theirs_table = theirs["table"].splitlines()
    assert ours_table[0] == theirs_table[0], "the same columns"
    assert len(ours_table) == len(theirs_table)
    first = lambda lines: [line.split()[0] if line.strip() else "" for line in lines]  # noqa: E731
    assert first(ours_table) == first(theirs_table)
    assert ours.csv().splitlines()[0] == theirs["csv"].splitlines()[0]


@pytest.mark.parametrize("name", CPU_MODELS)
def test_profile_matches_upstreams_on_the_cpu(tvm, name, tmp_path):
    fx = Fixture(name)
    m, report = our_profile(tvm, fx, tvm.cpu(0), tmp_path)
    assert isinstance(report, tvm.runtime.profiling.Report)
    compare_with_upstream(report, upstream_profile(fx, "cpu", tmp_path))
    # The run's outputs are upstream's bytes (the profiled run runs the model).
    m.run()
    for k, want in enumerate(fx.outputs):
        np.testing.assert_array_equal(m.get_output(k).numpy(), want)


def test_report_objects_from_python(tvm, tmp_path):
    from tvm.runtime import profiling

    fx = Fixture("convnet")
    _, report = our_profile(tvm, fx, tvm.cpu(0), tmp_path)
    calls = report.calls
    assert len(calls) == 8
    assert isinstance(calls[0]["Duration (us)"], profiling.Duration)
    assert calls[0]["Duration (us)"].microseconds > 0
    assert isinstance(calls[0]["Count"], profiling.Count) and calls[0]["Count"].value == 1
    assert 0 <= calls[0]["Percent"].percent <= 100
    assert str(calls[0]["Device"]) == "cpu0"
    assert report.configuration["Executor"] == "Graph"
    assert report.configuration["Number of threads"].value >= 1
    assert "cpu0" in report.device_metrics
    # print(report) is its table; repr of a metric names its type.
    assert repr(report) == report.table()
    assert repr(profiling.Duration(12.5)) == "runtime.profiling.Duration(12.5)"
    assert profiling.Ratio(0.25).ratio == 0.25 and profiling.Percent(3).percent == 3.0
    with pytest.raises(AttributeError):
        report.no_such_field  # noqa: B018
    # Made from Python, printed as upstream prints it.
    made = profiling.Report(
        [{"Name": "add", "Duration (us)": profiling.Duration(12.5), "Count": profiling.Count(1)}],
        {"cpu0": {"Name": "Total", "Duration (us)": profiling.Duration(50.0)}},
        {"Executor": "Graph"},
    )
    assert made.table().splitlines()[1].split() == ["add", "12.50", "1"]
    # JSON both ways.
    back = profiling.Report.from_json(report.json())
    assert json.loads(back.json())["calls"] == json.loads(report.json())["calls"]
    with pytest.raises(tvm.TVMError, match="Cannot parse metric of type"):
        profiling.Report.from_json('{"calls":[{"x":{"bytes":1}}]}')


def test_reports_cross_between_the_libraries(tvm, tmp_path):
    from tvm.runtime import profiling

    fx = Fixture("mlp_unbound_b1")
    m, report = our_profile(tvm, fx, tvm.cpu(0), tmp_path)
    theirs = upstream_profile(fx, "cpu", tmp_path, other_json=report.json())
    assert theirs["other_calls"] == len(report.calls), "upstream reads ours"
    mine = profiling.Report.from_json(theirs["json"])
    assert [c["Name"] for c in mine.calls] == [c["Name"] for c in report.calls], "we read upstream's"
    # profile_rpc: the JSON the host rebuilds a report from.
    rpc = json.loads(m.module["profile_rpc"]())
    assert [c["Name"]["string"] for c in rpc["calls"]] == [c["Name"] for c in report.calls]


def test_profile_function_runs_and_refuses_what_it_lacks(tvm):
    from tvm.runtime import profiling

    fx = Fixture("mlp_unbound_b1")
    root = tvm.runtime.load_module(str(fx.dir / "lib.so"))
    # The kernels are in the library module (the factory's import).
    lib = next(m for m in [root, *root.imported_modules] if m.type_key == "library")
    name = "tvmgen_default_fused_nn_softmax"
    prof = profiling.profile_function(lib, tvm.cpu(), [], func_name=name, warmup_iters=2)
    a = tvm.nd.array(np.random.rand(1, 10).astype("float32"))
    b = tvm.nd.empty((1, 10), "float32")
    assert len(prof(a, b)) == 0, "no collectors, no metrics (as upstream)"
    np.testing.assert_allclose(b.numpy().sum(), 1.0, rtol=1e-5)
    with pytest.raises(tvm.TVMError, match="no function called"):
        profiling.profile_function(lib, tvm.cpu(), [], func_name="nope")


def test_profile_on_opencl(tvm, tmp_path):
    dev = tvm.cl(0)
    if not dev.exist:
        assert os.environ.get("TVM_RT_REQUIRE_OPENCL") != "1", "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device"
        pytest.skip("no OpenCL device")
    fx = Fixture("opencl/mlp_unbound_cl_b1")
    _, report = our_profile(tvm, fx, dev, tmp_path)
    a = json.loads(report.json())
    assert {c["Device"]["string"] for c in a["calls"]} == {"opencl0"}
    if upstream_library_dir("opencl") is None:
        pytest.skip("no upstream library built with OpenCL (../shared/upstream)")
    compare_with_upstream(report, upstream_profile(fx, "opencl", tmp_path))
