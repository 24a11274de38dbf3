"""Two Ray nodes on this machine (``ray.cluster_utils.Cluster``, every address 127.0.0.1), a
replica on each: the prepared-params file is named by the model's content, not by the node, so
the nodes of one machine (one folder) share one file, made once, and both serve. Needs
``tvmrt[serve]`` (skipped without Ray)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import FIXTURES

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from test_serve import free_port  # noqa: E402

import tvmrt.serve as tserve  # noqa: E402


def test_two_nodes_of_one_machine_share_one_prepared_file(tmp_path):
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1", "127.0.0.1"]
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        builds = [str(FIXTURES / "mlp_unbound_b1"), str(FIXTURES / "mlp_unbound_b8")]
        # One CPU a replica, one CPU a node: a replica on each node, both starting at once.
        app = tserve.deployment(
            builds, name="spread", num_replicas=2, ray_actor_options={"num_cpus": 1}, prepared_dir=str(tmp_path)
        )
        handle = serve.run(app, name="spread", route_prefix="/spread")
        seen: dict[str, dict] = {}
        deadline = time.time() + 60
        while len(seen) < 2 and time.time() < deadline:
            s = handle.stats.remote().result()
            seen[s["node_id"]] = s
        assert len(seen) == 2, "the replicas are not on two nodes"
        paths = {s["prepared"] for s in seen.values()}
        assert len(paths) == 1 and next(iter(paths)).startswith(str(tmp_path)), paths
        made = sorted(tmp_path.rglob("made.log"))
        assert len(made) == 1 and len(made[0].read_text().splitlines()) == 1, [m.read_text() for m in made]
        assert len(list(tmp_path.rglob("*.prepared"))) == 1
        x = np.random.default_rng(2).standard_normal((5, 1, 28, 28)).astype("float32")
        outs = [handle.infer.remote({"data": x}).result()[0] for _ in range(8)]
        assert all(o.tobytes() == outs[0].tobytes() or np.allclose(o, outs[0], rtol=1e-5) for o in outs)
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
