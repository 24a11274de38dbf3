"""The replica: every build of a model sharing one mapped copy of the weights and one pool of
activation arenas, requests batched by rows and run on the builds that serve them fastest."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
from ray import serve
from ray.serve import metrics

from .. import _tensors, errors
from .._artifacts import PathLike, TensorInfo
from .._cache import default_prepared_dir
from ..aot import AOTModel, locate_aot
from ..model import Model
from ..plugins import load_plugins
from ..vm import VMModel, locate_vm
from . import _prepared, _protocol, _requests
from ._requests import BadRequest, InputSpec, Limits

logger = logging.getLogger("ray.serve")

NPY = "application/x-npy"
NPZ = "application/x-npz"


def _params_per_build(params: Any, n: int) -> list[PathLike | None]:
    """`params` as one entry per build: None (each build's own, found in its folder), one path
    (every build's), or a list of one per build."""
    if params is None or isinstance(params, (str, os.PathLike)):
        return [params] * n
    listed = list(params)
    if len(listed) != n:
        raise errors.InvalidValueError(f"params: {len(listed)} given for {n} builds (one per build, or one for all)")
    return listed


def prepare_builds(builds: Sequence[PathLike], device: str, path: str, params: Sequence[PathLike | None]) -> None:
    """Writes one prepared-params file for every build: the first build's weights, and what each
    build's weight-only operators derive from them (prepared build by build over the file)."""
    source: PathLike | None = None
    for b, p in zip(builds, params):
        m = Model(b, device=device, concurrency=1, params=source if source is not None else p)
        if not m.weights:
            raise errors.InvalidValueError(f"{b} has no weights to prepare")
        m.prepare_params(path)
        m.close()
        source = path


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


def _fill_wait(builds: Sequence[Build]) -> float:
    """How long a batch waits to fill while other requests are in flight: one run of the smallest
    build (what a request queued behind a run waits anyway), when a larger build costs at least a
    fifth less per row (measured); else 0, since gathering rows saves little or nothing: the plan
    would run them one by one.
    A wide MLP on a CPU streams all its weights per run, so its batch-8 build costs a third of the
    batch-1 build's per row, and batches fill only if the replica waits for them: requests come
    one at a time through Serve's router, which the cores share with the runs."""
    small = builds[0]
    per_row = small.cost / small.batch
    if any(b.cost / b.batch < 0.8 * per_row for b in builds[1:]):
        return small.cost
    return 0.0


def _symbolic_rows(vm: VMModel) -> dict[str, tuple[int, ...]] | None:
    """Each input's row shape when the model's function batches along a symbolic first axis (see
    ModelServer._batch_vm); None when it does not, or cannot be told."""
    rows = {}
    for t in vm.inputs:
        if not t.dtype or t.shape is None or len(t.shape) < 1 or t.shape[0] != -1 or -1 in t.shape[1:]:
            return None
        rows[t.name] = tuple(t.shape[1:])
    if not rows:
        return None
    dtypes = {t.name: _tensors.np_dtype(t.dtype) for t in vm.inputs}
    try:
        one = vm.run({n: np.ones((1, *r), dtypes[n]) for n, r in rows.items()})
        two = vm.run({n: np.stack([np.ones(r, dtypes[n]), np.zeros(r, dtypes[n])]) for n, r in rows.items()})
    except errors.TVMRTError:
        return None
    for a, b in zip(one, two):
        if a.ndim == 0 or a.shape[0] != 1 or b.shape != (2, *a.shape[1:]):
            return None
        if not (np.array_equal(a[0], b[0]) or (a.dtype.kind == "f" and np.allclose(a[0], b[0], equal_nan=True))):
            return None
    return rows if len(one) == len(two) else None


def _least_time(run: Callable[[], Any]) -> float:
    """Seconds `run` takes: the least of a few, after one untimed (replicas starting together
    measure on a busy machine)."""
    run()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _vm_cost(vm: VMModel, rows: dict[str, tuple[int, ...]], n: int) -> float:
    """Seconds a run of `n` rows takes."""
    feed = {t.name: np.zeros((n, *rows[t.name]), _tensors.np_dtype(t.dtype)) for t in vm.inputs}
    return _least_time(functools.partial(vm.run, feed))


def fill_the_node(concurrency: int | None, num_threads: int | None) -> tuple[int, int]:
    """Runs in flight and kernel threads per run, the ones not given chosen so that together they
    fill the CPUs this process may use: a run per CPU with one kernel thread each by default
    (throughput: no kernel waits for a slower thread of its own), as many runs as fit the kernel
    threads asked for, as many threads as fit the runs."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    env = os.environ.get("TVM_NUM_THREADS", "")
    if num_threads is None and env.isdigit() and int(env) > 0:
        num_threads = int(env)  # the process's own setting, as everywhere in TVM
    for what, value in (("concurrency", concurrency), ("num_threads", num_threads)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise errors.InvalidValueError(f"{what} {value!r}: a count of at least 1")
    if concurrency is None and num_threads is None:
        return cpus, 1
    if concurrency is None:
        assert num_threads is not None
        return max(1, cpus // num_threads), num_threads
    if num_threads is None:
        return concurrency, max(1, cpus // concurrency)
    return concurrency, num_threads


def _deployment_name() -> str:
    try:
        return str(serve.get_replica_context().deployment)
    except Exception:  # not in a replica (a test constructing one by hand)
        return "tvmrt"


def _refused_by_kernels(vm: VMModel | AOTModel, e: errors.RuntimeFailure) -> Exception:
    """A VM run's failure as the client's mistake when a kernel refused the rank or dtype of what it
    was given (a model with no recorded types cannot check them before the run), else as it is."""
    text = str(e)
    if vm.described or not (".ndim is expected to" in text or ".dtype is expected to" in text):
        return e
    names = [t.name for t in vm.inputs]
    which = f"input {names[0]!r}" if len(names) == 1 else f"one of the inputs {', '.join(map(repr, names))}"
    return BadRequest(
        f"{which} has a rank or dtype the model does not take (its kernel says: {text.split(', ')[-1]}); "
        "this deployment knows no input types: deploy it with input_specs= (or a model.meta) to have requests "
        "checked and named before they run"
    )


class ModelServer:
    """A Ray Serve replica of a tvmrt model (decorate it, or a subclass, with
    ``serve.deployment``; :func:`deployment` does).

    ``builds`` are model folders (or ``export_library`` files) of one model at several batch
    sizes (or sequence-length buckets); the first one's weights are used by all of them
    (``params``: a params file for every build, or one per build, where a folder's own is not the
    one). Requests are dicts of input name to array (a Python handle), or HTTP bodies: JSON
    ``{"inputs": {name: nested lists}}``, a ``.npy`` (``Content-Type: application/x-npy``, the one
    data input) or a ``.npz`` (``application/x-npz``, inputs by name); the first axis of every
    input is the rows. A request may be shorter than a build along the axes the builds vary
    (sequence buckets: padded with zeros), nowhere else. Answers come in the same form (JSON
    ``{"outputs": [...], "build": ...}``, ``.npy`` of the one output, ``.npz`` of ``output_0``...).
    A bad request fails alone (HTTP 400, or 413 past ``max_request_rows`` or ``max_body_bytes``,
    with the message); a failed run fails the requests of its batch.

    The same route also speaks the Open Inference Protocol (KServe v2) under ``/v2`` (health,
    server and model metadata, infer with JSON or binary tensors): the model's name there is the
    deployment's. :meth:`preprocess` sees its inputs too; its answers are the model's outputs
    (:meth:`postprocess` shapes this server's own forms only).
    """

    def __init__(
        self,
        builds: Sequence[str] | str,
        *,
        device: str = "auto",
        params: Any = None,
        max_batch_size: int | None = None,
        batch_wait_timeout_s: float | None = None,
        concurrency: int | None = None,
        num_threads: int | None = None,
        prepared_dir: str | None = None,
        map_params: bool = True,
        pad_buckets: bool = True,
        max_request_rows: int | None = None,
        max_body_bytes: int | None = None,
        input_specs: Any = None,
        plugins: Sequence[str] | str | None = None,
    ) -> None:
        import ray

        # A vendor's module types before any build that holds them.
        load_plugins(plugins)
        paths = [builds] if isinstance(builds, (str, os.PathLike)) else list(builds)
        if not paths:
            raise errors.InvalidValueError("no build to serve")
        concurrency, num_threads = fill_the_node(concurrency, num_threads)
        self.concurrency, self.num_threads = concurrency, num_threads
        self.node_id = ray.get_runtime_context().get_node_id()
        #: The model's name in the Open Inference Protocol: the deployment's.
        self.protocol_name = _deployment_name()
        self._protocol_meta: _protocol.ModelMeta | None = None
        # A model run in one call per request, at its own shape: a Relay VM's or an AOT artefact's.
        self.vm: VMModel | AOTModel | None = None
        #: A Relax function over a symbolic batch: each input's row shape (requests batch along it).
        self.vm_rows: dict[str, tuple[int, ...]] | None = None
        if locate_vm(paths[0]) is not None or locate_aot(paths[0]) is not None:
            self._init_vm(paths, device, concurrency, num_threads, max_body_bytes, input_specs, params, map_params)
            if isinstance(self.vm, VMModel) and self.vm.relax:
                self._batch_vm(max_batch_size, batch_wait_timeout_s, concurrency, max_request_rows, max_body_bytes)
            return
        per_build = _params_per_build(params, len(paths))
        self.pad_buckets = pad_buckets
        self.prepared: Path | None = None
        self.made_prepared = False
        self._holding: _prepared.Holding | None = None
        if map_params:
            self._map_prepared(paths, per_build, device, prepared_dir or default_prepared_dir())
        if self.prepared is not None:
            # Every build maps the one file: its weights once, each build's derived weights, all
            # pages of the node's page cache; one pool of arenas for all of them.
            common = {"params": self.prepared, "map_params": True, "device": device, "num_threads": num_threads}
            first = Model(paths[0], concurrency=concurrency, **common)
            models = [first] + [Model(p, pool_with=first, **common) for p in paths[1:]]
        else:
            first = Model(
                paths[0], device=device, concurrency=concurrency, num_threads=num_threads, params=per_build[0]
            )
            models = [first] + [first.variant(p) for p in paths[1:]]
        self.builds = sorted((self._build(str(p), m) for p, m in zip(paths, models)), key=lambda b: b.batch)
        self.buckets: dict[tuple[Any, ...], list[Build]] = {}
        for b in self.builds:
            self.buckets.setdefault(self._bucket_of(b.row_shapes), []).append(b)
        self.inputs = {t.name: t for t in first.inputs}
        self.specs: dict[str, InputSpec] = _requests.specs(
            [b.row_shapes for b in self.builds], {t.name: t.dtype for t in first.inputs}
        )
        self.largest = max(b.batch for b in self.builds)
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tvmrt-run")
        self._measure()
        self._in_flight = 0
        # None: wait for a batch to fill only when batching pays and requests are in flight (see
        # `_fill_wait`); a number: that wait always, as Serve's batching does.
        self._fill_wait = _fill_wait(self.builds) if batch_wait_timeout_s is None else None
        self.max_batch_size = max_batch_size or self.largest
        # A request larger than a batch runs as several runs of the builds (the plan).
        self._batch_with(self._run_batch, batch_wait_timeout_s, concurrency, max_request_rows, max_body_bytes)
        self._metrics()
        logger.info(
            "tvmrt: %d build(s) (batch %s) on %s, weights %s, %d runs in flight of %d kernel thread(s)",
            len(self.builds),
            ",".join(str(b.batch) for b in self.builds),
            first.device,
            f"mapped from {self.prepared}" + (" (made here)" if self.made_prepared else "")
            if self.prepared
            else "loaded",
            concurrency,
            num_threads,
        )

    def _init_vm(
        self,
        paths: list[Any],
        device: str,
        concurrency: int,
        num_threads: int | None,
        max_body: int | None,
        input_specs: Any = None,
        params: Any = None,
        map_params: bool = False,
    ) -> None:
        """A model run in one call: a Relay VM executable runs every shape it accepts, an AOT
        artefact the one it was built for, so a request runs as it is (no builds, no padding, no
        batching); several run at once on the replica's threads."""
        if len(paths) != 1:
            raise errors.InvalidValueError(f"{paths[0]} is served alone: a Relay VM or AOT model has no builds")
        # A Relax model's weights passed as parameters (nn.Module exports) are bound once, by params=.
        extra: dict[str, Any] = {"params": params} if params is not None else {}
        kind = VMModel if locate_vm(paths[0]) is not None else AOTModel
        if kind is VMModel and map_params:
            # A VM executable's constants from one file every replica of the node maps.
            extra["map_constants"] = True
        self.vm = kind(paths[0], device=device, num_threads=num_threads, input_specs=input_specs, **extra)
        self.prepared, self.made_prepared, self._holding = None, False, None
        if isinstance(self.vm, VMModel) and self.vm.constants_file is not None:
            self.prepared, self.made_prepared = self.vm.constants_file, self.vm.made_constants_file
        self.builds = []
        self.inputs = {}
        self.specs = {
            t.name: InputSpec(t.name, _tensors.np_dtype(t.dtype) if t.dtype else None, (), frozenset(), any_shape=True)
            for t in self.vm.inputs
        }
        self.limits = Limits(1 << 31, max_body or (256 << 20))
        self.max_batch_size = 0
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tvmrt-run")
        self._metrics()
        what = "Relay VM" if isinstance(self.vm, VMModel) else "AOT"
        logger.info("tvmrt: %s model %s on %s, %d runs at once", what, paths[0], self.vm.device, concurrency)
        if not self.vm.described:
            logger.warning(
                "tvmrt: %s records no input types, and no input_specs= or .meta gives them: requests are not checked "
                "before they run (a wrong dtype or rank is the kernels' error) and the protocol's model metadata is "
                "refused. Deploy with input_specs={name: (shape, dtype)}, or keep the model.meta the compile route "
                "writes beside the executable (docs/dynamic-shapes.md)",
                paths[0],
            )

    def _batch_vm(
        self,
        max_batch_size: int | None,
        batch_wait_timeout_s: float | None,
        concurrency: int,
        max_request_rows: int | None,
        max_body: int | None,
    ) -> None:
        """Batches a Relax function's requests along its symbolic batch, when it has one: every
        input's first axis is symbolic (and no other), and the outputs follow it row by row (runs
        at 1 and 2 rows, the second row another, give the first row's outputs alike). Requests
        then join a batch as graph models' do, counting rows; a batch is one run."""
        assert isinstance(self.vm, VMModel)
        rows = _symbolic_rows(self.vm)
        if rows is None:
            return
        self.vm_rows = rows
        self.specs = {n: InputSpec(n, self.specs[n].dtype, (row,), frozenset()) for n, row in rows.items()}
        self.max_batch_size = max_batch_size or 8
        self._in_flight = 0
        if batch_wait_timeout_s is None:
            # As graph models' builds: wait for a batch only where a full one costs a fifth less
            # per row than single rows (measured here), and only while others are in flight.
            costs = [_vm_cost(self.vm, rows, n) for n in (1, self.max_batch_size)]
            self._fill_wait = _fill_wait(
                [Build("vm", cast(Any, None), n, rows, c) for n, c in zip((1, self.max_batch_size), costs)]
            )
        else:
            self._fill_wait = None
        self._batch_with(self._run_vm_batch, batch_wait_timeout_s, concurrency, max_request_rows, max_body)
        logger.info("tvmrt: requests batched along the symbolic batch, up to %d rows a run", self.max_batch_size)

    def _batch_with(
        self,
        run: Callable[[list[_Request]], Any],
        batch_wait_timeout_s: float | None,
        concurrency: int,
        max_request_rows: int | None,
        max_body: int | None,
    ) -> None:
        """Requests join batches of up to `max_batch_size` rows, which `run` runs (several at once:
        the runs in flight); a request holds at most `max_request_rows` rows (refused past that,
        to bound what one request holds) and `max_body` bytes."""
        rows = max_request_rows or max(64, 8 * self.max_batch_size)
        row_bytes = sum(s.row_bytes() for s in self.specs.values())
        # JSON spells a number in up to ~25 bytes: room for that, and for headers and framing.
        self.limits = Limits(rows, max_body or (32 * rows * row_bytes + (1 << 20)))
        # Batches count rows, not requests.
        self._batched = serve.batch(
            max_batch_size=self.max_batch_size,
            batch_wait_timeout_s=batch_wait_timeout_s or 0.0,
            max_concurrent_batches=concurrency,
            batch_size_fn=lambda items: sum(r.rows for r in items),
        )(run)
        # Serve's batching takes a new wait through a setter on the function it makes.
        self._set_batch_wait: Callable[[float], None] = cast(Any, self._batched).set_batch_wait_timeout_s

    async def _run_vm_batch(self, requests: list[_Request]) -> list[Answer]:
        started = time.perf_counter()
        for r in requests:
            self.m_wait.observe((started - r.arrived) * 1e3)
        loop = asyncio.get_running_loop()
        answers: list[Answer] = await loop.run_in_executor(self._threads, self._run_vm_rows, requests)
        self.m_rows.observe(sum(r.rows for r in requests))
        return answers

    def _run_vm_rows(self, requests: list[_Request]) -> list[Answer]:
        """One run of the requests' rows stacked; each gets its rows of every output back."""
        if len(requests) == 1:
            return [self._run_vm(requests[0])]
        assert self.vm is not None and self.vm_rows is not None
        stacked = {n: np.concatenate([r.inputs[n] for r in requests]) for n in self.vm_rows}
        total = sum(r.rows for r in requests)
        outputs = self._run_vm(_Request(stacked, total, ())).outputs
        answers, at = [], 0
        for r in requests:
            answers.append(Answer([o[at : at + r.rows] for o in outputs], [("vm", at, r.rows, total)]))
            at += r.rows
        return answers

    def _run_vm(self, request: _Request) -> Answer:
        assert self.vm is not None
        start = time.perf_counter()
        try:
            outputs = self.vm.run(request.inputs)
        except errors.RuntimeFailure as e:
            raise _refused_by_kernels(self.vm, e) from None
        self.m_run.observe((time.perf_counter() - start) * 1e3, tags={"build": "vm"})
        self.m_requests.inc(tags={"build": "vm"})
        return Answer(outputs, [("vm", 0, request.rows, request.rows)])

    def _map_prepared(self, paths: list[Any], params: list[PathLike | None], device: str, folder: str) -> None:
        try:
            path = _prepared.prepared_file(paths, folder, device, params)
            self.made_prepared, self._holding = _prepared.ensure_prepared(
                path, lambda tmp: prepare_builds(paths, device, tmp, params)
            )
            self.prepared = path
            removed = _prepared.remove_unused(path.parent, keep=path)
            if removed:
                logger.info(
                    "tvmrt: removed %d prepared-params file(s) of yours that no replica had held for %d s, from %s "
                    "(models no longer served here; prepared_dir= or TVMRT_PREPARED_DIR puts them elsewhere): %s",
                    len(removed),
                    _prepared.UNUSED_FOR,
                    path.parent,
                    ", ".join(removed),
                )
        except errors.TVMRTError as e:
            logger.warning("tvmrt: no prepared-params file (%s): each replica loads the weights", e)

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
        answer = await self._answer(prepared)
        if details:
            return answer
        return self.postprocess(answer.outputs, request)

    async def _answer(self, request: _Request) -> Answer:
        if self.vm is not None and (self.vm_rows is None or request.rows > self.max_batch_size):
            loop = asyncio.get_running_loop()
            answer: Answer = await loop.run_in_executor(self._threads, self._run_vm, request)
            return answer
        if request.rows > self.max_batch_size:
            # Larger than a batch: runs alone, on as many runs of the builds as the plan says.
            loop = asyncio.get_running_loop()
            [alone] = await loop.run_in_executor(self._threads, self._run_bucket, request.bucket, [request])
            self.m_rows.observe(request.rows)
            return alone
        self._in_flight += 1
        try:
            if self._fill_wait is not None:
                # Alone, a request runs at once; with others in flight it may wait for a batch.
                self._set_batch_wait(self._fill_wait if self._in_flight > 1 else 0.0)
            batched: Answer = await self._batched(request)
        finally:
            self._in_flight -= 1
        return batched

    def check_health(self) -> None:
        """Serve's health check: the smallest build runs (a VM model: it is open)."""
        if self.vm is not None:
            self.vm.memory_usage()
            return
        b = self.builds[0]
        b.model.run({n: np.zeros((b.batch, *s), self.inputs[n].dtype) for n, s in b.row_shapes.items()})

    def stats(self) -> dict[str, Any]:
        """This replica: its process, node, prepared file, builds and memory."""
        return {
            "pid": os.getpid(),
            "node_id": self.node_id,
            "prepared": str(self.prepared) if self.prepared else None,
            "made_prepared": self.made_prepared,
            "builds": {b.name: b.batch for b in self.builds} if self.vm is None else {"vm": 0},
            "runs_in_flight": self.concurrency,
            "kernel_threads": self.num_threads,
            "memory": self.builds[0].model.memory_usage() if self.vm is None else self.vm.memory_usage(),
        }

    # The parts.
    def _build(self, path: str, model: Model) -> Build:
        batch = model.inputs[0].shape[0] if model.inputs and model.inputs[0].shape else 1
        name = Path(path).name if Path(path).is_dir() else Path(path).stem
        return Build(name, model, batch, {t.name: t.dims[1:] for t in model.inputs})

    def _bucket_of(self, row_shapes: Mapping[str, tuple[int, ...]]) -> tuple[Any, ...]:
        return tuple(sorted(row_shapes.items()))

    def _measure(self) -> None:
        """What each build's run costs: the plan chooses builds by it."""
        for b in self.builds:
            zeros = {n: np.zeros((b.batch, *s), self.inputs[n].dtype) for n, s in b.row_shapes.items()}
            b.cost = _least_time(functools.partial(b.model.run, zeros))

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
        fails alone): every data input named, of the model's dtype (or converted without changing
        a value), with rows of a shape some build takes."""
        names = set(inputs)
        if names != set(self.specs):
            missing, extra = sorted(set(self.specs) - names), sorted(names - set(self.specs))
            raise errors.InvalidKeyError(
                "the inputs are "
                + ", ".join(sorted(self.specs))
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else "")
            )
        arrays, rows = {}, None
        for name, value in inputs.items():
            arr = _requests.as_rows(self.specs[name], value, self.limits)
            if self.vm is not None:
                arrays[name] = arr
                rows = arr.shape[0] if arr.ndim else 1
                continue
            if rows is not None and arr.shape[0] != rows:
                raise BadRequest(f"inputs have different numbers of rows ({rows} and {arr.shape[0]})")
            rows = arr.shape[0]
            arrays[name] = arr
        assert rows is not None
        if self.vm_rows is not None and len({a.shape[0] for a in arrays.values()}) > 1:
            raise BadRequest(
                "inputs have different numbers of rows: " + ", ".join(f"{n} {a.shape[0]}" for n, a in arrays.items())
            )
        if self.vm is not None:
            return _Request(arrays, rows, ())
        row_shapes = {n: tuple(a.shape[1:]) for n, a in arrays.items()}
        return _Request(arrays, rows, self._bucket_for(row_shapes))

    def _bucket_for(self, row_shapes: dict[str, tuple[int, ...]]) -> tuple[Any, ...]:
        exact = self._bucket_of(row_shapes)
        if exact in self.buckets:
            return exact
        if self.pad_buckets:
            # Longer along the axes the builds vary only: anything else is another shape.
            fits = [
                k
                for k in self.buckets
                if all(
                    len(s) == len(row_shapes[n])
                    and all(
                        r == d or (a in self.specs[n].varying and r <= d)
                        for a, (r, d) in enumerate(zip(row_shapes[n], s))
                    )
                    for n, s in k
                )
            ]
            if fits:
                return min(fits, key=lambda k: sum(int(np.prod(s)) for _, s in k))
        shapes = "; ".join(", ".join(f"{n}{list(s)}" for n, s in k) for k in self.buckets)
        given = ", ".join(f"{n}{list(s)}" for n, s in row_shapes.items())
        raise BadRequest(f"rows of shape {given} fit no build (rows of: {shapes})")

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
                    # Shorter along a varying axis only (checked): the rest is zeros.
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

    async def _body(self, request: Any) -> bytes:
        """The request's body, refused past ``max_body_bytes`` (by its declared length first)."""
        limit = self.limits.max_body
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BadRequest(f"a body of {declared} bytes: at most {limit} (max_body_bytes)", 413)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(f"a body of more than {limit} bytes (max_body_bytes)", 413)
            chunks.append(chunk)
        return b"".join(chunks)

    def _output_names(self, count: int) -> list[str]:
        if self.vm is None:
            return [t.name for t in self.builds[0].model.outputs]
        if len(self.vm.outputs) == count:
            return [t.name for t in self.vm.outputs]
        return [f"output_{i}" for i in range(count)]

    def protocol_metadata(self) -> _protocol.ModelMeta:
        """The model as the protocol describes it: -1 along the rows and along the axes the builds
        vary (a Relay VM model: along the axes its input_specs leave open)."""
        if self._protocol_meta is not None:
            return self._protocol_meta
        if self.vm is not None and not self.vm.described:
            # Metadata never states a shape that is not the model's: none at all, instead.
            unknown = (
                f"model {self.protocol_name!r} is a Relay VM executable served without its inputs' dtypes and "
                "ranks (it records none): its deployment needs input_specs= or a model.meta beside it"
            )
            meta = _protocol.ModelMeta(self.protocol_name, "tvm_relay_vm", [], [], unknown=unknown)
        elif self.vm is not None:

            def described(t: TensorInfo) -> _protocol.TensorMeta:
                dims = [-1 if d < 0 else d for d in t.dims]
                return _protocol.TensorMeta(t.name, _protocol.datatype_of(_tensors.np_dtype(t.dtype)), dims)

            inputs = [described(t) for t in self.vm.inputs]
            outputs = [described(t) for t in self.vm.outputs]
            meta = _protocol.ModelMeta(self.protocol_name, self.vm.platform, inputs, outputs)
        else:
            inputs = [
                _protocol.TensorMeta(
                    n,
                    _protocol.datatype_of(spec.dtype),
                    [-1] + [-1 if a in spec.varying else d for a, d in enumerate(spec.row_shapes[0])],
                )
                for n, spec in self.specs.items()
            ]
            outputs = []
            for k, t in enumerate(self.builds[0].model.outputs):
                shapes = {b.model.outputs[k].dims[1:] for b in self.builds}
                first = next(iter(shapes))
                same = [all(len(s) == len(first) and s[a] == first[a] for s in shapes) for a in range(len(first))]
                outputs.append(
                    _protocol.TensorMeta(
                        t.name,
                        _protocol.datatype_of(_tensors.np_dtype(t.dtype)),
                        [-1] + [d if same[a] else -1 for a, d in enumerate(first)],
                    )
                )
            meta = _protocol.ModelMeta(self.protocol_name, "tvm_graph_executor", inputs, outputs)
        self._protocol_meta = meta
        return meta

    async def _protocol(self, request: Any, r: _protocol.Route) -> Any:
        """An Open Inference Protocol request (see :mod:`._protocol`)."""
        from starlette.responses import JSONResponse, Response

        from .. import __version__

        if r.kind in ("live", "ready"):
            return Response(status_code=200)
        if r.kind == "server":
            return JSONResponse({"name": "tvmrt", "version": __version__, "extensions": ["binary_tensor_data"]})
        meta = self.protocol_metadata()
        meta.check(r)
        if r.kind == "model":
            if meta.unknown is not None:
                raise BadRequest(meta.unknown)
            return JSONResponse(meta.as_json())
        if r.kind == "model_ready":
            return Response(status_code=200)
        body = await self._body(request)
        req = _protocol.read_infer(body, request.headers.get(_protocol.HEADER_LENGTH), self.limits)
        _protocol.check_datatypes(req, meta)
        answer: Answer = await self.infer(self.preprocess(req.inputs), details=True)
        names = self._output_names(len(answer.outputs))
        data, headers = _protocol.write_infer(meta.name, r.version or meta.versions[0], req, names, answer.outputs)
        headers.update(self._where(answer))
        return Response(data, headers=headers)

    async def _http(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, Response

        path = request.url.path
        root = request.scope.get("root_path", "")
        relative = path[len(root) :] if root and path.startswith(root) else path
        try:
            r = _protocol.route(request.method, relative)
            if r is None and not relative.startswith("/v2") and "/v2" in path.split("?")[0]:
                r = _protocol.route(request.method, path[path.index("/v2") :])
            if r is not None:
                return await self._protocol(request, r)
        except BadRequest as e:
            return Response(_protocol.error(str(e)), status_code=e.status, media_type="application/json")
        except errors.RuntimeFailure as e:
            return Response(_protocol.error(errors.client_message(e)), status_code=500, media_type="application/json")
        except (errors.TVMRTError, ValueError, TypeError, KeyError, RecursionError) as e:
            return Response(_protocol.error(errors.client_message(e)), status_code=400, media_type="application/json")
        kind = request.headers.get("content-type", "application/json").split(";")[0].strip()
        try:
            body = await self._body(request)
            inputs: dict[str, Any]
            if kind == NPY:
                if len(self.specs) != 1:
                    raise BadRequest(f"a .npy body names no input: this model takes {len(self.specs)}")
                [(name, spec)] = self.specs.items()
                inputs = {name: _requests.read_npy(io.BytesIO(body), name, spec, self.limits, len(body))}
            elif kind == NPZ:
                inputs = _requests.read_npz(body, self.specs, self.limits)
            else:
                doc = _requests.read_json(body)
                if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
                    raise BadRequest('a JSON body is {"inputs": {"<name>": [rows...]}}')
                inputs = doc["inputs"]
            answer: Answer = await self.infer(self.preprocess(inputs), details=True)
        except BadRequest as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)
        except (errors.TVMRTError, ValueError, TypeError, KeyError, RecursionError) as e:
            return JSONResponse({"error": errors.client_message(e)}, status_code=400)
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

    def __del__(self) -> None:
        holding = getattr(self, "_holding", None)
        if holding is not None:
            holding.release()
