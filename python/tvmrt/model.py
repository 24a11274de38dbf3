"""A model: its executors sharing one copy of the weights, its activations drawn from a pool of
arenas sized by the runs in flight, and the calls to run it from many threads at once.

Who holds what:

- the **holder**, an executor no caller ever gets, holds the model's weights (loaded, mapped, or
  the library factory's); every executor a caller runs shares them from it. A caller's
  ``set_input`` of a weight makes that weight its executor's own copy (the runtime copies on
  write), so one caller's write never reaches another caller, nor an executor made later;
- **executors** go to one caller at a time (a session, or a thread's own for ``run``), and back to
  the model when the caller is done; one whose outputs are still viewed (``copy=False``) is kept
  aside until the views are gone;
- the **pool** of activation arenas is shared by every executor of the model (and of its variants).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import weakref
from typing import Any, Mapping, Sequence

import numpy as np

from . import _ffi, _fork, _tensors, errors
from ._artifacts import (
    NOT_WEIGHTS,
    Graph,
    PathLike,
    TensorInfo,
    locate,
    names_blob,
    read_param_names,
    read_params_file,
)
from ._devices import DeviceSpec, device_of
from ._executor import Executor
from .plugins import load_plugins
from .profiling import BenchmarkResult, Report
from .session import Session, Tensor

# Names Relay gives weights it leaves unbound (mxnet/gluon, PyTorch and ONNX importers, bound
# params' "p0"...): a graph with such inputs and no params is missing its weights.
_WEIGHT_NAME = re.compile(r"(^p\d+$)|([._](weight|bias|gamma|beta|moving_mean|moving_var|running_mean|running_var)$)")


class Model:
    """A compiled TVM graph-executor model, ready to run from any number of threads.

    ``path`` is a model folder (``lib.so``, and ``graph.json`` and a params file for builds whose
    library does not carry them) or one ``export_library`` file; ``lib``, ``graph`` (a path or the
    JSON text) and ``params`` (a path or the bytes) name artefacts one by one. ``device`` is
    ``"auto"`` (OpenCL when the library has OpenCL kernels, else the CPU), ``"cpu"``, ``"opencl"``
    or ``"opencl:N"``. ``map_params=True`` maps a params file read-only instead of reading it (a
    file made by :meth:`prepare_params` or ``tvmrt align-params``: its weights, and the prepared
    ones, are pages shared with every process that maps it). ``concurrency`` is how many runs may
    be in flight at once (default: the machine's CPUs): the activation arenas follow it, a run
    beyond it waits. ``num_threads`` is how many threads each run's kernels use (default: the
    process's, ``TVM_NUM_THREADS`` or the physical cores). ``share_weights_with`` is another build
    of the same model (batch size, sequence length) whose weights this one uses instead of loading
    its own, and whose pool of activation arenas (and so concurrency) it shares; ``pool_with``
    shares the pool alone (builds that each map one prepared file, for instance). ``plugins``
    are runtime plug-ins to load first (:func:`tvmrt.load_plugin`: a vendor's module types).
    :meth:`close` frees the model's memory at once (dropping the last reference does too).

    Every method may be called from many threads at once. ``run`` is one call: inputs in, outputs
    out. ``set_input``, ``run()`` and ``get_output`` (as TVM's ``GraphModule``) act on the calling
    thread's own executor, so one thread's calls never interleave with another's. For exclusive
    use across calls (outputs without a copy, or coroutines that await between the calls), take a
    :meth:`session`.
    """

    def __new__(cls, path: PathLike | None = None, **kwargs: Any) -> Any:
        # A Relay VM artefact (relay.vm.compile) and an AOT executor's are models of their own
        # kinds, with the same calls.
        if cls is Model:
            from .aot import AOTModel, locate_aot
            from .vm import VMModel, locate_vm

            if locate_vm(path, kwargs.get("lib"), kwargs.get("code")) is not None:
                return VMModel(path, **kwargs)
            if kwargs.get("graph") is None and locate_aot(path, kwargs.get("lib")) is not None:
                return AOTModel(path, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        lib: PathLike | None = None,
        graph: PathLike | str | None = None,
        params: PathLike | bytes | None = None,
        device: DeviceSpec = "auto",
        map_params: bool = False,
        concurrency: int | None = None,
        num_threads: int | None = None,
        share_weights_with: Model | None = None,
        pool_with: Model | None = None,
        plugins: Sequence[PathLike] | PathLike | None = None,
    ) -> None:
        load_plugins(plugins)
        self._closed = False
        self._lock = threading.Lock()
        self._free: list[Executor] = []
        self._parked: list[Executor] = []  # given back while their outputs were still viewed
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._executors = 0
        self._weights_version = 0
        self._local = threading.local()
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise errors.InvalidValueError(f"num_threads {num_threads!r}: a count of at least 1")
        self.num_threads = num_threads
        art = locate(path, lib, graph, params, share_weights_with is not None)
        self.artefacts = art
        self._lib = _ffi.load_module(str(art.lib))
        self.library_path = str(art.lib)
        # The library's factory (export_library's graph and, usually, weights) comes first; a
        # folder's graph.json and params file serve libraries that carry none.
        factory = _ffi.module_function(self._lib, "default", True)
        get_json = _ffi.module_function(self._lib, "get_graph_json", True)
        has_factory = factory is not None and get_json is not None
        if art.graph_from_folder and has_factory:
            art.graph = None
        if art.params_from_folder and has_factory and art.graph is None and self._factory_param_names():
            art.params = None
        if has_factory and art.graph is None and (art.params is not None or share_weights_with is not None):
            # Weights come from elsewhere: a factory without its own, so they are not held twice.
            remove = _ffi.module_function(self._lib, "remove_params", True)
            if remove is not None:
                self._lib = remove()
                factory = _ffi.module_function(self._lib, "default", True)
        self._factory = factory if art.graph is None else None
        if art.graph is None:
            if not has_factory or get_json is None:
                raise errors.InvalidValueError(
                    f"{art.lib} carries no graph (not an export_library factory): give graph= (graph.json)"
                )
            art.graph = get_json()
        self._graph = Graph(art.graph)
        self.device = device_of(device, self._lib)
        self._devices = [self.device]
        if len(self._graph.device_types) > 1 and self.device.type != _ffi.CPU:
            self._devices.append(_ffi.Device(_ffi.CPU, 0))
        self._params = art.params
        self._map_params = map_params
        self._source: Model | None = share_weights_with
        weight_names = self._weight_names()
        self._all_inputs = self._graph.inputs
        self._input_indices = {t.name: i for i, t in enumerate(self._all_inputs)}
        self.inputs: list[TensorInfo] = [t for t in self._all_inputs if t.name not in weight_names]
        self.weights: list[TensorInfo] = [t for t in self._all_inputs if t.name in weight_names]
        self.outputs: list[TensorInfo] = self._graph.outputs
        self._data_input_indices = [self._input_indices[t.name] for t in self.inputs]
        self._shared_names = names_blob([t.name for t in self.weights])
        capacity = concurrency if concurrency is not None else (os.cpu_count() or 1)
        if capacity < 1:
            raise errors.InvalidValueError(f"concurrency {capacity}: at least 1")
        self._pool: _ffi.Handle
        self.concurrency: int
        pooled = pool_with if pool_with is not None else share_weights_with
        if pooled is not None and pooled.device == self.device:
            # One pool of arenas for every build of the model: its runs in flight, whichever
            # build they are on, draw from it (arenas sized for the largest build).
            self._pool = pooled._pool
            self.concurrency = pooled.concurrency
        else:
            self._pool = _ffi.global_function("tvmrt.executor.ArenaPool")(self.device.type, self.device.id, capacity)
            self.concurrency = capacity
        # The holder of the weights (loaded, or the factory's), which no caller gets: made now, so
        # a bad file or a missing weight is an error here, not at the first run.
        self._holder: Executor | None = self._make(holder=True)
        self._check_weights_present()
        _fork.track(self)

    # Loading.
    def _factory_param_names(self) -> list[str]:
        """The names of the weights the library's factory carries (none copied)."""
        names = _ffi.module_function(self._lib, "get_param_names", True)
        if names is None:
            return []
        array = names()
        size = _ffi.global_function("runtime.ArraySize")(array)
        get = _ffi.global_function("runtime.ArrayGetItem")
        text = _ffi.global_function("runtime.GetFFIString")
        return [text(get(array, i)) for i in range(size)]

    def _weight_names(self) -> set[str]:
        if self._source is not None:
            return {t.name for t in self._source.weights} & {t.name for t in self._graph.inputs}
        if self._params is not None:
            names = [n for n in read_param_names(self._params) if not n.startswith(NOT_WEIGHTS)]
            inputs = {t.name for t in self._graph.inputs}
            unknown = [n for n in names if n not in inputs]
            if unknown:
                where = "the params given" if isinstance(self._params, bytes) else str(self._params)
                raise errors.InvalidKeyError(
                    f"{where} holds {len(unknown)} weight(s) the graph has no input for: {', '.join(unknown)}"
                )
            return set(names)
        if self._factory is not None:
            return set(self._factory_param_names())
        return set()

    def _check_weights_present(self) -> None:
        """A graph whose weights are inputs, loaded without them, is refused at load (not at the
        first run, with every weight's name as an input never set)."""
        looked = self.artefacts.params_looked_for
        if self.weights or self._params is not None or self._source is not None or looked is None:
            return
        weights = [t.name for t in self.inputs if _WEIGHT_NAME.search(t.name)]
        if weights:
            names = ", ".join(weights[:4]) + (", ..." if len(weights) > 4 else "")
            raise errors.InvalidValueError(
                f"{self.library_path}: the graph takes its weights as inputs ({len(weights)} of its "
                f"{len(self.inputs)} inputs look like weights: {names}) and none were found (looked for {looked}): "
                "name the params file with params= (or params=False if these are data inputs)"
            )

    def _make(self, holder: bool = False) -> Executor:
        """A new executor: the factory's (sharing its weights) or one made from the graph, given
        the weights (the holder) or sharing the holder's."""
        if self._factory is not None:
            module = self._factory(*self._devices)
        else:
            args: list[Any] = [self._graph.text, self._lib]
            for d in self._devices:
                args += [d.type, d.id]
            module = _ffi.global_function("tvm.graph_executor.create")(*args)

        def fn(name: str) -> _ffi.Function:
            return _ffi.method(module, name)

        fn("set_strict_inputs")(1)
        if self._source is not None:
            try:
                fn("share_params")(self._source._weights_holder().module, self._shared_names)
            except errors.InvalidValueError as e:
                # What share_params compared is an internal name (p0): say what it means here.
                detail = str(e).removeprefix("share_params: ")
                raise errors.InvalidValueError(
                    f"{self.library_path} is not a build of the same network as {self._source.library_path}: "
                    f"their weights differ ({detail}). A variant is another batch size or sequence length of "
                    "one network, sharing its weights; load another network as a Model of its own"
                ) from None
        elif holder and self._params is not None:
            if isinstance(self._params, bytes):
                fn("load_params")(self._params)
            elif self._map_params:
                fn("load_params_from_file")(str(self._params))
            else:
                fn("load_params")(read_params_file(self._params))
        elif self._params is not None:
            fn("share_params")(self._weights_holder().module, self._shared_names)
        if len(self._devices) == 1:
            fn("join_arena_pool")(self._pool)
        if self.num_threads is not None:
            fn("set_num_threads")(self.num_threads)
        with self._lock:
            self._executors += 1
        return Executor(self, module)

    def _weights_holder(self) -> Executor:
        holder = self._holder
        if holder is None:
            raise errors.RuntimeFailure("the model is closed")
        return holder

    # Executors to callers and back.
    def _acquire(self, session: Session) -> tuple[Executor, int]:
        with self._lock:
            if self._closed:
                raise errors.RuntimeFailure("the model is closed")
            self._sessions.add(session)
            version = self._weights_version
            if not self._free and self._parked:
                # Executors whose views are all gone serve again.
                self._free = [e for e in self._parked if not e.viewed()]
                self._parked = [e for e in self._parked if e.viewed()]
            if self._free:
                return self._free.pop(), version
        return self._make(), version

    def _release(self, ex: Executor) -> None:
        with self._lock:
            if self._closed:
                return
            (self._parked if ex.viewed() else self._free).append(ex)

    def _reshare(self, ex: Executor) -> int:
        """Binds `ex` to the weights the model holds now (after :meth:`load_params`)."""
        with self._lock:
            version = self._weights_version
        if self._params is not None or self._source is not None:
            holder = self._source._weights_holder() if self._source is not None else self._weights_holder()
            ex.function("share_params")(holder.module, self._shared_names)
        return version

    def _input_index(self, key: int | str) -> int:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            i = int(key)
            if not 0 <= i < len(self._all_inputs):
                raise errors.InvalidIndexError(f"input index {i} out of range ({len(self._all_inputs)} inputs)")
            return i
        if not isinstance(key, str):
            raise errors.InvalidTypeError(f"an input is named by a str or an int, not a {type(key).__name__}")
        found = self._input_indices.get(key)
        if found is None:
            data = ", ".join(t.name for t in self.inputs) or "none"
            weights = f"; and {len(self.weights)} weights" if self.weights else ""
            raise errors.InvalidKeyError(f"no input named {key!r} (inputs: {data}{weights})")
        return found

    def _output_index(self, key: int | str) -> int:
        if isinstance(key, str):
            names = [t.name for t in self.outputs]
            if key not in names:
                raise errors.InvalidKeyError(f"no output named {key!r} (outputs: {', '.join(names)})")
            return names.index(key)
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            raise errors.InvalidTypeError(f"an output is named by a str or an int, not a {type(key).__name__}")
        i = int(key)
        if not 0 <= i < len(self.outputs):
            raise errors.InvalidIndexError(f"output index {i} out of range ({len(self.outputs)} outputs)")
        return i

    # The calling thread's own session (GraphModule-style calls).
    def _thread_session(self) -> Session:
        s: Session | None = getattr(self._local, "session", None)
        if s is None or s._executor is None:
            # Collected with the thread's locals when the thread ends: the executor goes back.
            s = Session(self, weak=True)
            self._local.session = s
        return s

    def session(self) -> Session:
        """An executor of this model for the caller alone, until the session is closed."""
        return Session(self)

    def run(self, *args: Any, copy: bool = True, cast: _tensors.Cast = False, **named: Any) -> list[np.ndarray]:
        """Runs the model and returns its outputs as numpy arrays, in order. The inputs are given
        by name (a mapping, keywords, or both), as one array for a model of one input
        (``run(x)``), as a list in input order (``run([x, y])``), or in ONNX Runtime's form
        (``run(None, {"data": x})``, or output names first to get only those); inputs not given
        keep what this thread set before. Arrays of another dtype are refused unless
        ``cast=True`` (any numeric cast, as TVM's ``set_input``) or ``cast="safe"``. With
        ``copy=False`` the outputs are views of this thread's executor's outputs, valid until
        this thread's next run."""
        if copy and cast is False:
            got = self._quick(args, named, None)
            if got is not None:
                return got
        return self._thread_session().run(*args, copy=copy, cast=cast, **named)

    __call__ = run

    def _quick(
        self, args: tuple[Any, ...], named: dict[str, Any], outs: list[np.ndarray] | None
    ) -> list[np.ndarray] | None:
        """The plainest request (see Executor.quick) straight on this thread's executor, in the
        forms that name every input given: by keyword, a dict, ONNX Runtime's (no output names),
        or one array for a model of one input. None for everything else, which the session's
        general path takes (and explains)."""
        if args:
            first = args[0]
            if named or len(args) > 2:
                return None
            if len(args) == 2:
                if first is not None or type(args[1]) is not dict:
                    return None
                named = args[1]
            elif type(first) is dict:
                named = first
            elif type(first) is np.ndarray and len(self.inputs) == 1:
                named = {self.inputs[0].name: first}
            else:
                return None
        s: Session | None = getattr(self._local, "session", None)
        if s is None or s._executor is None or s._weights != self._weights_version or not named:
            return None
        return s._executor.quick(named, outs)

    def run_into(
        self, outputs: Sequence[np.ndarray], *args: Any, cast: _tensors.Cast = False, **named: Any
    ) -> list[np.ndarray]:
        """As :meth:`run`, writing the outputs into `outputs` (a list of one numpy array per output,
        in order, each of its shape and dtype, C-contiguous and writable: ``[t.empty() for t in
        model.outputs]``) and returning them: a request that allocates nothing, as ONNX Runtime's
        IO binding. The inputs come after, in any form :meth:`run` takes."""
        if cast is False and type(outputs) is list:
            # The compiled call checks each output array as it checks the inputs.
            got = self._quick(args, named, outputs)
            if got is not None:
                return got
        return self._thread_session().run_into(outputs, *args, cast=cast, **named)

    def set_input(
        self, key: int | str | None = None, value: Any = None, *, cast: _tensors.Cast = False, **params: Any
    ) -> None:
        """Sets inputs of the calling thread's executor, as ``GraphModule.set_input``."""
        self._thread_session().set_input(key, value, cast=cast, **params)

    def get_output(self, index: int | str, out: np.ndarray | None = None) -> Tensor:
        """Output `index` of the calling thread's last run, as ``GraphModule.get_output``."""
        return self._thread_session().get_output(index, out)

    def get_input(self, key: int | str) -> Tensor:
        return self._thread_session().get_input(key)

    def get_num_inputs(self) -> int:
        """Every input of the graph, weights included, as ``GraphModule.get_num_inputs``."""
        return len(self._all_inputs)

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def get_input_index(self, name: str) -> int:
        i = self._input_indices.get(name)
        return -1 if i is None else i

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shapes, dtypes)`` of the inputs that are not weights, by name, as
        ``GraphModule.get_input_info`` once the weights are loaded."""
        return ({t.name: t.dims for t in self.inputs}, {t.name: t.dtype for t in self.inputs})

    def load_params(self, params: PathLike | bytes) -> None:
        """Replaces the model's weights (a params file or its bytes, as ``GraphModule.load_params``)
        for every executor: runs after this call use them (a session taken before switches at
        its next call)."""
        blob = params if isinstance(params, (bytes, bytearray, memoryview)) else read_params_file(params)
        blob = bytes(blob)
        names = [n for n in read_param_names(blob) if not n.startswith(NOT_WEIGHTS)]
        known = {t.name for t in self._all_inputs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise errors.InvalidKeyError(f"the params hold weights the graph has no input for: {', '.join(unknown)}")
        self._check_open()
        if self._source is not None:
            raise errors.InvalidValueError("a variant uses the weights of the model it was made from: load them there")
        with self._lock:
            holder = self._weights_holder()
            holder.function("load_params")(blob)
            self._params = blob
            if set(names) - {t.name for t in self.weights}:
                raise errors.InvalidValueError("load_params: the params name inputs that are not weights")
            self._weights_version += 1
            idle = [*self._free, *self._parked]
        for ex in idle:
            self._reshare(ex)

    def _check_open(self) -> None:
        if self._closed:
            raise errors.RuntimeFailure("the model is closed")

    def benchmark(self, *args: Any, **kwargs: Any) -> BenchmarkResult:
        """Times runs of the calling thread's executor: ``repeat`` figures, each the mean of
        ``number`` runs (more, until a figure takes ``min_repeat_ms``), after ``warmup`` runs
        that are not counted; ``end_to_end`` times setting the inputs, running and copying the
        outputs out, from Python. TVM's form, ``benchmark(device, func_name="run", repeat=...,
        ...)``, is taken too."""
        return self._thread_session().benchmark(*args, **kwargs)

    def request_cost(self, *args: Any, repeat: int = 7, seconds: float = 0.5, **named: Any) -> dict[str, float]:
        """What a request costs from Python on this model, in microseconds: ``request`` (a
        :meth:`run` with these inputs), ``run`` (the model's own run) and ``overhead`` (their
        difference: what the package and the runtime add); see :meth:`Session.request_cost`."""
        return self._thread_session().request_cost(*args, repeat=repeat, seconds=seconds, **named)

    def profile(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> Report:
        """Profiles a run as TVM's debug executor does (three warm-up runs, then every operator
        timed on its device); the inputs given, else the calling thread's current ones."""
        self._check_open()
        given = {**(inputs or {}), **named}
        args: list[Any] = [self._graph.text, self._lib]
        for d in self._devices:
            args += [d.type, d.id]
        if self._factory is not None and self._params is None and self._source is None:
            debug = _ffi.module_function(self._lib, "debug_create", True)
            assert debug is not None
            module = debug("default", self.device)
        else:
            module = _ffi.global_function("tvm.graph_executor_debug.create")(*args)
            owner = self._source._weights_holder() if self._source is not None else self._weights_holder()
            _ffi.method(module, "share_params")(owner.module, self._shared_names)
        probe = Executor(self, module)
        _ffi.method(module, "set_strict_inputs")(1)
        current = self._thread_session()
        for i in self._data_input_indices:
            name = self._all_inputs[i].name
            probe.set_input(i, given[name] if name in given else current.get_input(i).numpy())
        report = _ffi.method(module, "profile")(None)
        return Report(report)

    def memory_usage(self) -> dict[str, Any]:
        """What this model holds: the weights (once, whoever holds them), each executor's own
        memory, and the pool of activation arenas its runs draw from, in bytes."""
        self._check_open()
        with self._lock:
            idle = list(self._free)
        usage = self._weights_holder().memory_usage()
        pool = json.loads(_ffi.method(self._pool, "get_usage")())
        per = [e.memory_usage() for e in idle]
        return {
            "device": usage["device"],
            "executors": self._executors,
            "weights": usage["weights_owned"] + usage["weights_shared"] + usage["weights_mapped"],
            "weights_mapped": usage["weights_mapped"],
            "weights_derived": usage["weights_derived"],
            "activations_own": usage["activations"] + sum(p["activations"] for p in per),
            "arena_pool": pool,
            "holder": usage,
            "executors_idle": per,
        }

    def prepare_params(self, path: PathLike) -> None:
        """Writes this model's weights, with what its weight-only operators derive from them,
        into a file for ``map_params=True`` (and ``tvmrt run --map-params``): every process that
        maps it shares its pages, and nothing is computed at load. Written whole (a temporary
        file renamed over `path`), so processes making it at once never see it half written.
        A model whose params are a prepared file of the same weights (another build's) adds its
        own derived weights to that file's: one file serves every build."""
        self._check_open()
        blob = (
            self._params
            if isinstance(self._params, bytes)
            else (read_params_file(self._params) if self._params is not None else self._factory_params_blob())
        )
        prepared = self._weights_holder().function("prepare_params")(blob)
        target = os.path.abspath(os.fspath(path))
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=os.path.dirname(target))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(prepared)
            os.chmod(tmp, 0o644)  # for every process that maps it, as any file written would be
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise

    def _factory_params_blob(self) -> bytes:
        params = _ffi.module_function(self._lib, "get_graph_params", True)
        if params is None:
            raise errors.InvalidValueError("this model has no weights to prepare")
        blob: bytes = _ffi.global_function("runtime.SaveParams")(params())
        return blob

    def variant(self, path: PathLike | None = None, **kwargs: Any) -> Model:
        """Another build of this model (a batch size, a sequence length) that uses this model's
        weights: ``model.variant("resnet_b8")``."""
        self._check_open()
        kwargs.setdefault("device", (self.device.type, self.device.id))
        kwargs.setdefault("num_threads", self.num_threads)
        return Model(path, share_weights_with=self, **kwargs)

    def close(self) -> None:
        """Lets go of the model's executors, weights and library now (outputs taken without a
        copy keep what they point into); the model cannot run after, and every session of it
        ends."""
        with self._lock:
            self._closed = True
            self._free.clear()
            self._parked.clear()
            sessions = list(self._sessions)
        for s in sessions:
            s._end()
        self._local = threading.local()
        self._holder = None

    def __repr__(self) -> str:
        ins = ", ".join(repr(t) for t in self.inputs)
        state = ", closed" if self._closed else ""
        return f"tvmrt.Model({self.library_path!r}, device={self.device!r}, inputs=[{ins}]{state})"


__all__: Sequence[str] = ("Model",)
