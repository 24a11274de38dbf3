"""Models built for OpenCL, on the device the library's kernels ask for (pocl's CPU device here):
outputs as upstream's OpenCL runtime gave them, the device chosen automatically, weights shared on
the device, threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_outputs, load

import tvmrt

pytestmark = pytest.mark.usefixtures("opencl")

OPENCL_FIXTURES = ["mlp_cl", "mlp_unbound_cl_b1", "mlp_unbound_cl_b4", "convnet_unbound_cl", "fold_cl", "hetero_cl"]
TEXTURE_FIXTURES = ["convnet_tex_cl", "convnet_tex_bound_cl"]


@pytest.mark.parametrize("name", OPENCL_FIXTURES + TEXTURE_FIXTURES)
def test_outputs_are_upstreams_on_the_device(name):
    f = load(f"opencl/{name}")
    m = tvmrt.Model(f.dir)
    assert m.device.type == 4, "chosen from the library's OpenCL kernels"
    assert_outputs(m.run(f.inputs), f.outputs, name, exact=name not in TEXTURE_FIXTURES)


def test_the_device_named_and_refused():
    f = load("opencl/mlp_cl")
    m = tvmrt.Model(f.dir, device="opencl:0")
    assert_outputs(m.run(f.inputs), f.outputs, "opencl:0")
    with pytest.raises(tvmrt.TVMRTError):
        tvmrt.Model(f.dir, device="opencl:7")


def test_variants_share_weights_on_the_device_and_threads_agree():
    b1, b4 = load("opencl/mlp_unbound_cl_b1"), load("opencl/mlp_unbound_cl_b4")
    m1 = tvmrt.Model(b1.dir, concurrency=2)
    m4 = m1.variant(b4.dir, concurrency=2)
    assert_outputs(m4.run(b4.inputs), b4.outputs, "batch 4 sharing batch 1's device weights")
    assert m4.memory_usage()["holder"]["weights_owned"] == 0
    import threading

    rng = np.random.default_rng(3)
    feeds = [{"data": rng.standard_normal(b1.inputs["data"].shape).astype("float32")} for _ in range(6)]
    want = [m1.run(feed)[0] for feed in feeds]
    bad = []

    def body(i):
        for _ in range(10):
            if m1.run(feeds[i])[0].tobytes() != want[i].tobytes():
                bad.append(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
