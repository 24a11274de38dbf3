"""Serving a model on Ray Serve: the part of it that knows this runtime (Ray schedules, routes,
scales and restarts; nothing here does).

Each replica:

- maps the node's prepared-params file (the model's weights with what its weight-only operators
  derive from them), made once per node by whichever replica comes first (an exclusive lock, a
  temporary file, an atomic rename; checked against the weights when mapped), so the weights are
  one set of page-cache pages for every replica on the node;
- loads every build of the model (batch sizes, sequence-length buckets) sharing those weights and
  one pool of activation arenas sized to the replica's concurrency;
- batches requests with ``@serve.batch`` (counting rows, not requests) and runs each batch on the
  builds that serve its rows fastest (the smallest that fits, padded, or several), measured at
  start; every request gets its own rows back.

``tvmrt.serve.deployment(...)`` makes the application in one line; :class:`ModelServer` is the
class to subclass for pre- and post-processing (``preprocess`` / ``postprocess``).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import json
import logging
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from ray import serve
from ray.serve import metrics

from . import _ffi, errors
from .model import Model

logger = logging.getLogger("ray.serve")

NPY = "application/x-npy"
NPZ = "application/x-npz"


def default_prepared_dir() -> str:
    """Where a node keeps its prepared-params files: ``TVMRT_PREPARED_DIR``, else a folder in the
    node's temporary directory (node-local on every cluster Ray runs on)."""
    return os.environ.get("TVMRT_PREPARED_DIR") or os.path.join(tempfile.gettempdir(), "tvmrt-prepared")


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        if p.is_file():
            h.update(p.name.encode())
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


def prepared_file(builds: Sequence[str | os.PathLike[str]], prepared_dir: str, node_id: str) -> Path:
    """The node's prepared-params file for `builds` (one model's): named by the node (replicas of
    several nodes may share a file system, as nodes of one machine do) and by a digest of the
    builds' files (another model, another set of builds, or another version gets a file of its
    own)."""
    files: list[Path] = []
    for b in builds:
        folder = Path(b)
        files += [folder / n for n in ("lib.so", "graph.json", "params.bin")] if folder.is_dir() else [folder]
    return Path(prepared_dir) / node_id / f"{Path(builds[0]).name}-{_digest(files)}.prepared"


def prepare_builds(builds: Sequence[str | os.PathLike[str]], device: str, path: str) -> None:
    """Writes one prepared-params file for every build: the first build's weights, and what each
    build's weight-only operators derive from them (prepared build by build over the file)."""
    source: str | None = None
    for b in builds:
        m = Model(b, device=device, concurrency=1, params=source)
        if not m.weights:
            raise errors.InvalidValueError(f"{b} has no weights to prepare")
        m.prepare_params(path)
        m.close()
        source = path


def ensure_prepared(path: Path, make: Any) -> bool:
    """Makes `path` with ``make(temporary_path)`` unless it exists; True when this call made it.
    Replicas starting together take an exclusive lock in turn: the first makes the file (into a
    temporary file of an unpredictable name, renamed over `path` once whole), the others find it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.is_file() and path.stat().st_size > 0:
                return False
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            try:
                make(tmp)
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o644)  # every replica's process may map it
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            with open(path.parent / "made.log", "a") as log:
                log.write(f"{path.name} {os.getpid()} {time.time():.3f}\n")
            return True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class Build:
    """One build of the model: its batch size, the per-row shapes of its data inputs, and what a
    run costs (seconds, measured at start)."""

    name: str
    model: Model
    batch: int
    row_shapes: dict[str, tuple[int, ...]]
    cost: float = 0.0


@dataclass
class _Request:
    inputs: dict[str, np.ndarray]
    rows: int
    bucket: tuple[Any, ...]
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class Answer:
    """A request's outputs, and where they were computed: for each run its rows took part in, the
    build, where in that run's batch they were, how many, and the run's batch size (padding
    included)."""

    outputs: list[np.ndarray]
    runs: list[tuple[str, int, int, int]]

    @property
    def build(self) -> str:
        return self.runs[0][0]


def _plan(builds: Sequence[Build], rows: int) -> list[Build]:
    """The builds that serve `rows` rows at the least measured cost (padding the last one)."""
    best: list[tuple[float, list[Build]]] = [(0.0, [])]
    for r in range(1, rows + 1):
        options = []
        for b in builds:
            cost, used = best[max(0, r - b.batch)]
            options.append((cost + b.cost, [*used, b]))
        best.append(min(options, key=lambda o: o[0]))
    return best[rows][1]


class ModelServer:
    """A Ray Serve replica of a tvmrt model (decorate it, or a subclass, with
    ``serve.deployment``; :func:`deployment` does).

    ``builds`` are model folders (or ``export_library`` files) of one model at several batch
    sizes (or sequence-length buckets); the first one's weights are used by all of them. Requests
    are dicts of input name to array (a Python handle), or HTTP bodies: JSON ``{"inputs": {name:
    nested lists}}``, a ``.npy`` (``Content-Type: application/x-npy``, the one data input) or a
    ``.npz`` (``application/x-npz``, inputs by name); the first axis of every input is the rows.
    Answers come in the same form (JSON ``{"outputs": [...], "build": ...}``, ``.npy`` of the one
    output, ``.npz`` of ``output_0``...). A bad request fails alone (HTTP 400 with the message); a
    failed run fails the requests of its batch.
    """

    def __init__(
        self,
        builds: Sequence[str] | str,
        *,
        device: str = "auto",
        max_batch_size: int | None = None,
        batch_wait_timeout_s: float = 0.0,
        concurrency: int = 2,
        prepared_dir: str | None = None,
        map_params: bool = True,
        pad_buckets: bool = True,
    ) -> None:
        import ray

        paths = [builds] if isinstance(builds, (str, os.PathLike)) else list(builds)
        if not paths:
            raise errors.InvalidValueError("no build to serve")
        self.node_id = ray.get_runtime_context().get_node_id()
        self.pad_buckets = pad_buckets
        self.prepared: Path | None = None
        self.made_prepared = False
        if map_params:
            path = prepared_file(paths, prepared_dir or default_prepared_dir(), self.node_id)
            try:
                self.made_prepared = ensure_prepared(path, lambda tmp: prepare_builds(paths, device, tmp))
                self.prepared = path
            except errors.TVMRTError as e:
                logger.warning("tvmrt: no prepared-params file (%s): each replica loads the weights", e)
        if self.prepared is not None:
            # Every build maps the one file: its weights once, each build's derived weights, all
            # pages of the node's page cache; one pool of arenas for all of them.
            first = Model(paths[0], params=self.prepared, map_params=True, device=device, concurrency=concurrency)
            models = [first] + [
                Model(p, params=self.prepared, map_params=True, device=device, pool_with=first) for p in paths[1:]
            ]
        else:
            first = Model(paths[0], device=device, concurrency=concurrency)
            models = [first] + [first.variant(p) for p in paths[1:]]
        self.builds = sorted((self._build(str(p), m) for p, m in zip(paths, models)), key=lambda b: b.batch)
        self.buckets: dict[tuple[Any, ...], list[Build]] = {}
        for b in self.builds:
            self.buckets.setdefault(self._bucket_of(b.row_shapes), []).append(b)
        self.inputs = {t.name: t for t in first.inputs}
        self.largest = max(b.batch for b in self.builds)
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tvmrt-run")
        self._measure()
        self.max_batch_size = max_batch_size or self.largest
        # Batches count rows, not requests; several run at once (the arena pool's concurrency).
        self._batched = serve.batch(
            max_batch_size=self.max_batch_size,
            batch_wait_timeout_s=batch_wait_timeout_s,
            max_concurrent_batches=concurrency,
            batch_size_fn=lambda items: sum(r.rows for r in items),
        )(self._run_batch)
        self._metrics()
        logger.info(
            "tvmrt: %d build(s) (batch %s) on %s, weights %s, arena pool of %d",
            len(self.builds),
            ",".join(str(b.batch) for b in self.builds),
            first.device,
            f"mapped from {self.prepared}" + (" (made here)" if self.made_prepared else "")
            if self.prepared
            else "loaded",
            concurrency,
        )

    # Hooks for subclasses.
    def preprocess(self, request: Any) -> Mapping[str, Any]:
        """A request as the model's inputs by name (rows first). The default takes a mapping."""
        if not isinstance(request, Mapping):
            raise errors.InvalidTypeError(
                f"a request is a mapping of input name to array, not a {type(request).__name__}"
            )
        return request

    def postprocess(self, outputs: list[np.ndarray], request: Any) -> Any:
        """What a caller gets back: the default is the outputs' rows for this request."""
        return outputs

    # Serving.
    async def __call__(self, request: Any) -> Any:
        from starlette.requests import Request  # Serve brings it

        if isinstance(request, Request):
            return await self._http(request)
        answer = await self.infer(request)
        return answer

    async def infer(self, request: Any, details: bool = False) -> Any:
        """A Python handle's call: the outputs for the request's rows (with ``details``, an
        :class:`Answer` saying where they were computed)."""
        prepared = self._validate(self.preprocess(request))
        answer: Answer = await self._batched(prepared)
        if details:
            return answer
        return self.postprocess(answer.outputs, request)

    def check_health(self) -> None:
        """Serve's health check: the smallest build runs."""
        b = self.builds[0]
        b.model.run({n: np.zeros((b.batch, *s), self.inputs[n].dtype) for n, s in b.row_shapes.items()})

    def stats(self) -> dict[str, Any]:
        """This replica: its process, node, prepared file, builds and memory."""
        return {
            "pid": os.getpid(),
            "node_id": self.node_id,
            "prepared": str(self.prepared) if self.prepared else None,
            "made_prepared": self.made_prepared,
            "builds": {b.name: b.batch for b in self.builds},
            "kernel_threads": _ffi.global_function("runtime.NumThreads")(),
            "memory": self.builds[0].model.memory_usage(),
        }

    # The parts.
    def _build(self, path: str, model: Model) -> Build:
        batch = model.inputs[0].shape[0] if model.inputs and model.inputs[0].shape else 1
        name = Path(path).name if Path(path).is_dir() else Path(path).stem
        return Build(name, model, batch, {t.name: tuple(t.shape[1:]) for t in model.inputs})

    def _bucket_of(self, row_shapes: Mapping[str, tuple[int, ...]]) -> tuple[Any, ...]:
        return tuple(sorted(row_shapes.items()))

    def _measure(self) -> None:
        """What each build's run costs: the plan chooses builds by it."""
        for b in self.builds:
            zeros = {n: np.zeros((b.batch, *s), self.inputs[n].dtype) for n, s in b.row_shapes.items()}
            b.model.run(zeros)
            # The least of a few runs: replicas starting together measure on a busy machine.
            times = []
            for _ in range(5):
                start = time.perf_counter()
                b.model.run(zeros)
                times.append(time.perf_counter() - start)
            b.cost = min(times)

    def _metrics(self) -> None:
        self.m_requests = metrics.Counter(
            "tvmrt_requests", description="Requests answered, by the build that ran them.", tag_keys=("build",)
        )
        self.m_rows = metrics.Histogram(
            "tvmrt_batch_rows", description="Rows in a batch.", boundaries=[1, 2, 4, 8, 16, 32, 64, 128]
        )
        self.m_wait = metrics.Histogram(
            "tvmrt_queue_wait_ms",
            description="From a request's arrival to its batch's start.",
            boundaries=[0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
        )
        self.m_run = metrics.Histogram(
            "tvmrt_run_ms",
            description="One run of a build.",
            boundaries=[0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000],
            tag_keys=("build",),
        )
        self.m_pool_waits = metrics.Gauge(
            "tvmrt_pool_waits", description="Runs that waited for an activation arena (since start)."
        )

    def _validate(self, inputs: Mapping[str, Any]) -> _Request:
        """The request's inputs checked against the model before it joins a batch (so a bad one
        fails alone): every data input named, of the model's dtype, with rows of a build's shape."""
        names = set(inputs)
        if names != set(self.inputs):
            missing, extra = sorted(set(self.inputs) - names), sorted(names - set(self.inputs))
            raise errors.InvalidKeyError(
                "the inputs are "
                + ", ".join(sorted(self.inputs))
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else "")
            )
        arrays, rows = {}, None
        for name, value in inputs.items():
            want = np.dtype(self.inputs[name].dtype)
            arr = np.asarray(value) if isinstance(value, np.ndarray) else np.asarray(value, dtype=want)
            if arr.dtype != want:
                if arr.dtype.kind in "iub" and want.kind in "iuf" and np.can_cast(arr.dtype, want, "same_kind"):
                    arr = arr.astype(want)
                else:
                    raise errors.InvalidTypeError(f"input {name!r} is {want}, got {arr.dtype} (cast it first)")
            if arr.ndim < 1 or arr.shape[0] < 1:
                raise errors.InvalidValueError(f"input {name!r} needs rows along its first axis, got shape {arr.shape}")
            if rows is not None and arr.shape[0] != rows:
                raise errors.InvalidValueError(f"inputs have different numbers of rows ({rows} and {arr.shape[0]})")
            rows = arr.shape[0]
            arrays[name] = arr
        assert rows is not None
        if rows > self.max_batch_size:
            raise errors.InvalidValueError(f"a request of {rows} rows: at most {self.max_batch_size} (max_batch_size)")
        row_shapes = {n: tuple(a.shape[1:]) for n, a in arrays.items()}
        bucket = self._bucket_for(row_shapes)
        return _Request(arrays, rows, bucket)

    def _bucket_for(self, row_shapes: dict[str, tuple[int, ...]]) -> tuple[Any, ...]:
        exact = self._bucket_of(row_shapes)
        if exact in self.buckets:
            return exact
        if self.pad_buckets:
            fits = [
                k
                for k in self.buckets
                if all(len(s) == len(row_shapes[n]) and all(a >= b for a, b in zip(s, row_shapes[n])) for n, s in k)
            ]
            if fits:
                return min(fits, key=lambda k: sum(int(np.prod(s)) for _, s in k))
        shapes = "; ".join(", ".join(f"{n}{list(s)}" for n, s in k) for k in self.buckets)
        given = ", ".join(f"{n}{list(s)}" for n, s in row_shapes.items())
        raise errors.InvalidValueError(f"rows of shape {given} fit no build (rows of: {shapes})")

    async def _run_batch(self, requests: list[_Request]) -> list[Answer]:
        started = time.perf_counter()
        for r in requests:
            self.m_wait.observe((started - r.arrived) * 1e3)
        answers: list[Answer | None] = [None] * len(requests)
        for bucket in {r.bucket for r in requests}:
            members = [i for i, r in enumerate(requests) if r.bucket == bucket]
            loop = asyncio.get_running_loop()
            done = await loop.run_in_executor(self._threads, self._run_bucket, bucket, [requests[i] for i in members])
            for i, a in zip(members, done):
                answers[i] = a
        self.m_rows.observe(sum(r.rows for r in requests))
        return [a for a in answers if a is not None]

    def _run_bucket(self, bucket: tuple[Any, ...], requests: list[_Request]) -> list[Answer]:
        """Runs the rows of `requests` (one bucket) on the builds the plan picks; splits the
        outputs back by request."""
        builds = self.buckets[bucket]
        total = sum(r.rows for r in requests)
        plan = _plan(builds, total)
        # Every request's rows, in order, as (request index, row) spans laid over the plan's runs.
        outputs: list[list[list[np.ndarray]]] = [[] for _ in requests]
        where: list[list[tuple[str, int, int, int]]] = [[] for _ in requests]
        queue = [(i, 0) for i in range(len(requests))]
        for b in plan:
            feed = {n: np.zeros((b.batch, *s), self.inputs[n].dtype) for n, s in b.row_shapes.items()}
            spans = []
            at = 0
            while queue and at < b.batch:
                i, first = queue[0]
                r = requests[i]
                take = min(r.rows - first, b.batch - at)
                for n, a in r.inputs.items():
                    dst = feed[n][at : at + take]
                    src = a[first : first + take]
                    dst[tuple(slice(0, d) for d in (take, *src.shape[1:]))] = src
                spans.append((i, at, take))
                where[i].append((b.name, at, take, b.batch))
                if first + take == r.rows:
                    queue.pop(0)
                else:
                    queue[0] = (i, first + take)
                at += take
            start = time.perf_counter()
            outs = b.model.run(feed)
            self.m_run.observe((time.perf_counter() - start) * 1e3, tags={"build": b.name})
            for i, at0, take in spans:
                outputs[i].append([o[at0 : at0 + take] for o in outs])
        answers = []
        for i, parts in enumerate(outputs):
            joined = [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
            self.m_requests.inc(tags={"build": where[i][0][0]})
            answers.append(Answer(joined, where[i]))
        pool = self.builds[0].model.memory_usage()["arena_pool"]
        self.m_pool_waits.set(pool.get("waits", 0))
        return answers

    def _where(self, answer: Answer) -> dict[str, str]:
        return {"x-tvmrt-build": answer.build, "x-tvmrt-runs": json.dumps(answer.runs)}

    async def _http(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, Response

        kind = request.headers.get("content-type", "application/json").split(";")[0].strip()
        try:
            body = await request.body()
            if kind == NPY:
                if len(self.inputs) != 1:
                    raise errors.InvalidValueError(f"a .npy body names no input: this model takes {len(self.inputs)}")
                inputs: dict[str, Any] = {next(iter(self.inputs)): np.load(io.BytesIO(body), allow_pickle=False)}
            elif kind == NPZ:
                with np.load(io.BytesIO(body), allow_pickle=False) as z:
                    inputs = {k: z[k] for k in z.files}
            else:
                doc = json.loads(body or b"{}")
                if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
                    raise errors.InvalidValueError('a JSON body is {"inputs": {"<name>": [rows...]}}')
                inputs = doc["inputs"]
            answer: Answer = await self.infer(self.preprocess(inputs), details=True)
        except (errors.TVMRTError, ValueError, TypeError, KeyError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        outputs = self.postprocess(answer.outputs, inputs)
        if kind == NPY and len(outputs) == 1:
            buf = io.BytesIO()
            np.save(buf, outputs[0], allow_pickle=False)
            return Response(buf.getvalue(), media_type=NPY, headers=self._where(answer))
        if kind in (NPY, NPZ):
            buf = io.BytesIO()
            np.savez(buf, **{f"output_{i}": o for i, o in enumerate(outputs)})
            return Response(buf.getvalue(), media_type=NPZ, headers=self._where(answer))
        return JSONResponse(
            {"outputs": [np.asarray(o).tolist() for o in outputs], "build": answer.build, "runs": answer.runs}
        )


def deployment(
    builds: Sequence[str] | str,
    *,
    name: str = "tvmrt",
    num_replicas: int | str | None = None,
    autoscaling_config: Mapping[str, Any] | None = None,
    max_ongoing_requests: int | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    server: type[ModelServer] = ModelServer,
    **config: Any,
) -> Any:
    """The Serve application of a model in one call: ``serve.run(tvmrt.serve.deployment([...]))``.
    `config` goes to the replica (:class:`ModelServer`: device, max_batch_size,
    batch_wait_timeout_s, concurrency, prepared_dir, map_params)."""
    options: dict[str, Any] = {"name": name}
    if autoscaling_config is not None:
        options["autoscaling_config"] = dict(autoscaling_config)
    elif num_replicas is not None:
        options["num_replicas"] = num_replicas
    concurrency = int(config.get("concurrency", 2))
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
