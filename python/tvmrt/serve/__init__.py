"""Serving a model on Ray Serve: the part of it that knows this runtime (Ray schedules, routes,
scales and restarts; nothing here does).

Each replica:

- maps the node's prepared-params file (the model's weights with what its weight-only operators
  derive from them), one per content of the model, made once by whichever replica comes first
  (an exclusive lock, a temporary file, an atomic rename), verified by every replica before it
  maps it, in a folder of the user's own (``_prepared``), so the weights are one set of
  page-cache pages for every replica on the node;
- loads every build of the model (batch sizes, sequence-length buckets) sharing those weights and
  one pool of activation arenas sized to the replica's concurrency;
- batches requests with ``@serve.batch`` (counting rows, not requests) and runs each batch on the
  builds that serve its rows fastest (the smallest that fits, padded along the axes the builds
  vary, or several), measured at start; every request gets its own rows back;
- checks every request before it joins a batch (``_requests``): a bad one fails alone, with a
  message; bodies are bounded and their arrays' headers read before any array is made.

``tvmrt.serve.deployment(...)`` makes the application in one line; :class:`ModelServer` is the
class to subclass for pre- and post-processing (``preprocess`` / ``postprocess``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ray import serve

from .._cache import default_prepared_dir, private_dir
from ._prepared import ensure_prepared, prepared_file
from ._requests import BadRequest
from .server import Answer, Build, ModelServer, prepare_builds


def _node_cpus() -> list[int]:
    """The CPUs of each live node of the Ray cluster this driver is connected to."""
    import ray

    if not ray.is_initialized():
        return []
    return [int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU")]


def deployment(
    builds: Sequence[str] | str,
    *,
    name: str = "tvmrt",
    num_replicas: int | str | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    max_ongoing_requests: int | None = None,
    max_replicas_per_node: int | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    server: type[ModelServer] = ModelServer,
    **config: Any,
) -> Any:
    """The Serve application of a model in one call: ``serve.run(tvmrt.serve.deployment([...]))``.
    `config` goes to the replica (:class:`ModelServer`: device, params, max_batch_size,
    batch_wait_timeout_s, concurrency, num_threads, prepared_dir, map_params, max_request_rows,
    max_body_bytes, input_specs, plugins: runtime plug-ins each replica loads first).

    The default shape is one replica per node, running several requests at once on threads (its
    runs in flight times its kernel threads fill the node's cores): one process holds Ray's
    per-process floor, the weights are mapped once per node anyway, and the activation arenas
    follow the runs in flight. Serve scales it between one replica and one per live node
    (``max_replicas_per_node=1``); ``num_replicas`` or ``autoscaling_config`` choose otherwise."""
    options: dict[str, Any] = {"name": name}
    cpus = _node_cpus()
    if autoscaling_config is not None:
        options["autoscaling_config"] = dict(autoscaling_config)
    elif num_replicas is not None:
        options["num_replicas"] = num_replicas
    if "num_replicas" not in options and "autoscaling_config" not in options:
        nodes = max(1, len(cpus))
        runs = int(config.get("concurrency") or min(cpus or [2]))
        options["autoscaling_config"] = {
            "min_replicas": 1,
            "initial_replicas": nodes,
            "max_replicas": nodes,
            # A replica is busy when every run in flight has a request queued behind it.
            "target_ongoing_requests": 2 * runs,
        }
        options["max_replicas_per_node"] = 1
    if max_replicas_per_node is not None:
        options["max_replicas_per_node"] = max_replicas_per_node
    concurrency = int(config.get("concurrency") or max(cpus or [2]))
    largest = int(config.get("max_batch_size") or 8)
    options["max_ongoing_requests"] = max_ongoing_requests or max(16, 2 * largest * concurrency)
    if ray_actor_options is not None:
        options["ray_actor_options"] = dict(ray_actor_options)
    return serve.deployment(server, **options).bind(builds, **config)


def app(args: dict[str, Any]) -> Any:
    """The application builder Serve's config files and ``serve run`` name
    (``import_path: tvmrt.serve:app``): `args` are :func:`deployment`'s keyword arguments, with
    ``builds`` a list of model folders (or one)."""
    options = dict(args)
    builds = options.pop("builds")
    return deployment(builds, **options)


__all__ = [
    "Answer",
    "BadRequest",
    "Build",
    "ModelServer",
    "app",
    "default_prepared_dir",
    "deployment",
    "ensure_prepared",
    "prepare_builds",
    "prepared_file",
    "private_dir",
]
