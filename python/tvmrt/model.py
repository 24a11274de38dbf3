"""A model: its executors sharing one copy of the weights, its activations drawn from a pool of
arenas sized by the runs in flight, and the calls to run it from many threads at once."""

from __future__ import annotations

import ctypes
import json
import os
import tempfile
import threading
import time
import weakref
from typing import Any, Mapping

import numpy as np

from . import _ffi, _tensors, errors
from ._artifacts import Graph, PathLike, TensorInfo, locate, names_blob, read_param_names
from .profiling import BenchmarkResult, Report

DeviceSpec = Any  # "auto", "cpu", "opencl", "opencl:1", or (device_type, device_id)
# Records of a prepared or aligned params file that are not weights.
_NOT_WEIGHTS = ("__tvmrt.", "__tvmrt_align_pad_")


def _module_type_keys(module: _ffi.Handle) -> list[str]:
    """The type keys of a module and everything it imports."""
    key = _ffi.global_function("runtime.ModuleGetTypeKey")
    size = _ffi.global_function("runtime.ModuleImportsSize")
    get = _ffi.global_function("runtime.ModuleGetImport")
    keys, stack = [], [module]
    while stack:
        m = stack.pop()
        keys.append(key(m))
        stack.extend(get(m, i) for i in range(size(m)))
    return keys


def _device(spec: DeviceSpec, module: _ffi.Handle) -> _ffi.Device:
    if isinstance(spec, tuple):
        return _ffi.Device(int(spec[0]), int(spec[1]))
    name, _, index = str(spec).lower().partition(":")
    dev_id = int(index) if index else 0
    if name == "auto":
        name = "opencl" if any(k in ("opencl", "cl") for k in _module_type_keys(module)) else "cpu"
    if name in ("cpu", "llvm"):
        return _ffi.Device(_ffi.CPU, dev_id)
    if name in ("opencl", "cl"):
        return _ffi.Device(_ffi.OPENCL, dev_id)
    raise errors.InvalidValueError(f"device {spec!r}: use 'auto', 'cpu', 'opencl' or 'opencl:N'")


class _Slot:
    """An input or output of an executor as a prepared call: a DLTensor of the tensor's shape and
    dtype over the caller's array, handed to ``set_input`` / ``get_output`` with its index."""

    __slots__ = ("call", "dtype", "shape", "shape_array", "tensor")

    def __init__(self, fn: _ffi.Function, index: int, info: TensorInfo) -> None:
        self.shape = tuple(info.shape)
        self.dtype = _tensors.np_dtype(info.dtype)
        self.shape_array = _ffi.shape_tuple(self.shape)
        t = _ffi.DLTensor()
        t.device = _ffi.DLDevice(_ffi.CPU, 0)
        t.ndim = len(self.shape)
        t.dtype = _tensors.dl_dtype(self.dtype)
        t.shape = ctypes.cast(self.shape_array, ctypes.POINTER(ctypes.c_int64))
        self.tensor = t
        self.call = _ffi.PreparedCall(fn, [_ffi.INT, _ffi.DLTENSOR])
        self.call.values[0].v_int64 = index
        self.call.values[1].v_handle = ctypes.addressof(t)


class _Executor:
    """One executor of the model, used by one caller at a time."""

    __slots__ = (
        "_get_input",
        "_get_output",
        "_run",
        "_set",
        "inputs",
        "model",
        "module",
        "outputs",
        "run_call",
        "unset",
    )

    def __init__(self, model: Model, module: _ffi.Handle) -> None:
        self.module = module
        # Weakly: the model keeps its executors, never the other way round (no cycle, so a model
        # nobody holds is freed at once, its memory with it).
        self.model: Model = weakref.proxy(model)  # type: ignore[assignment]
        fn = self._function
        self._set, self._run, self._get_output, self._get_input = (
            fn("set_input"),
            fn("run"),
            fn("get_output"),
            fn("get_input"),
        )
        self.run_call = _ffi.PreparedCall(self._run, [])
        self.inputs = [_Slot(self._set, i, t) for i, t in enumerate(model._all_inputs)]
        self.outputs = [_Slot(self._get_output, i, t) for i, t in enumerate(model.outputs)]
        # The data inputs not set yet: a run before every one was set is refused.
        self.unset = set(model._data_input_indices)

    def _function(self, name: str) -> _ffi.Function:
        return _ffi.method(self.module, name)

    def set_input(self, key: int | str, value: Any) -> None:
        index = self.model._input_index(key)
        if index is None:
            # An unknown name goes to the runtime as it is: its error names it.
            self._set(key, _tensors.TensorView(_tensors.as_host_array(value, "float32")).tensor)
            return
        slot = self.inputs[index]
        arr = _tensors.as_host_array(value, slot.dtype)
        if arr.shape == slot.shape and arr.dtype == slot.dtype:
            slot.tensor.data = arr.ctypes.data
            slot.call()
        else:
            # Another shape or dtype: the runtime refuses it, saying which (strict inputs).
            self._set(index, _tensors.TensorView(arr).tensor)
        self.unset.discard(index)

    def run(self) -> None:
        if self.unset:
            missing = sorted(self.model._all_inputs[i].name for i in self.unset)
            raise errors.InvalidKeyError(f"inputs never set: {', '.join(missing)}")
        self.run_call()

    def output(self, index: int, copy: bool = True) -> np.ndarray:
        slot = self.outputs[index]
        if copy or self.model.device.type != _ffi.CPU:
            out = np.empty(slot.shape, dtype=slot.dtype)
            slot.tensor.data = out.ctypes.data
            slot.call()
            return out
        handle = self._get_output(index)
        t = _ffi.array_tensor(handle)
        return _tensors.view_of_memory(t.data + t.byte_offset, slot.shape, slot.dtype, (handle, self))

    def input(self, key: int | str) -> np.ndarray:
        index = self.model._input_index(key)
        info = self.model._all_inputs[index] if index is not None else None
        if info is None:
            self._get_input(key)  # the runtime's error for the name
            raise errors.InvalidKeyError(f"no input named {key!r}")
        out = np.empty(info.shape, dtype=_tensors.np_dtype(info.dtype))
        handle = self._get_input(index)
        lb = _ffi.lib()
        lb.check(lb.cdll.TVMArrayCopyToBytes(ctypes.c_void_p(handle.value), out.ctypes.data, out.nbytes))
        return out

    def memory_usage(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._function("get_memory_usage")())
        return result


class Session:
    """An executor of the model held by one caller: ``set_input``, ``run`` and ``get_output`` as
    TVM's ``GraphModule`` has them, and outputs without a copy (``copy=False``), valid until this
    session's next run. Made by :meth:`Model.session` (a context manager: the executor goes back to
    the model when the ``with`` ends, or when the session is collected)."""

    def __init__(self, model: Model, weak: bool = False) -> None:
        # A session the model keeps for a thread holds the model weakly (no cycle); one a caller
        # holds keeps the model alive.
        self._model: Model = weakref.proxy(model) if weak else model  # type: ignore[assignment]
        self._executor: _Executor | None = None
        self._executor = model._acquire()

    def _ex(self) -> _Executor:
        if self._executor is None:
            raise errors.RuntimeFailure("this session is closed")
        return self._executor

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Sets inputs by name or index (copied into the executor), as ``GraphModule.set_input``."""
        ex = self._ex()
        if key is not None:
            ex.set_input(key, value)
        for k, v in params.items():
            ex.set_input(k, v)

    def run(self, inputs: Mapping[str, Any] | None = None, *, copy: bool = True, **named: Any) -> list[np.ndarray]:
        """Sets the inputs given (others keep what was set before), runs, and returns the outputs."""
        ex = self._executor
        if ex is None:
            raise errors.RuntimeFailure("this session is closed")
        if inputs:
            for k, v in inputs.items():
                ex.set_input(k, v)
        for k, v in named.items():
            ex.set_input(k, v)
        ex.run()
        return [ex.output(i, copy) for i in range(len(ex.outputs))]

    def get_output(self, index: int | str, out: np.ndarray | None = None, *, copy: bool = True) -> Tensor:
        """Output `index` (or its name) of the last run: a :class:`Tensor` (``.numpy()``, as TVM's
        arrays have it), or written into `out`."""
        i = self._model._output_index(index)
        arr = self._ex().output(i, copy)
        if out is not None:
            np.copyto(out, arr)
            return Tensor(out)
        return Tensor(arr)

    def get_input(self, key: int | str) -> Tensor:
        return Tensor(self._ex().input(key))

    def get_num_inputs(self) -> int:
        return len(self._model._all_inputs)

    def get_num_outputs(self) -> int:
        return len(self._model.outputs)

    def get_input_index(self, name: str) -> int:
        i = self._model._input_index(name)
        return -1 if i is None else i

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shapes, dtypes)`` of every input by name, weights included, as ``GraphModule``."""
        return ({t.name: t.shape for t in self._model._all_inputs}, {t.name: t.dtype for t in self._model._all_inputs})

    def benchmark(
        self, repeat: int = 5, number: int = 5, min_repeat_ms: int = 0, end_to_end: bool = False, **inputs: Any
    ) -> BenchmarkResult:
        """Times runs as TVM's ``GraphModule.benchmark``: `repeat` figures, each the mean of `number`
        runs (more, until a figure takes `min_repeat_ms`). `end_to_end` times setting the inputs,
        running and copying the outputs out, from Python."""
        ex = self._ex()
        for k, v in inputs.items():
            ex.set_input(k, v)
        if end_to_end:
            given = dict(inputs)
            results = []
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(number):
                    self.run(given)
                results.append((time.perf_counter() - start) / number)
            return BenchmarkResult(results)
        ex.run()  # checks every input was set
        dev = self._model.device
        timer = _ffi.global_function("runtime.RPCTimeEvaluator")(
            ex.module, "run", dev.type, dev.id, number, repeat, min_repeat_ms, 100, 0, 1, ""
        )
        raw = timer()
        return BenchmarkResult(list(np.frombuffer(raw, dtype=np.float64)))

    def close(self) -> None:
        """Gives the executor back to the model (outputs taken with ``copy=False`` are invalid
        from then on)."""
        ex, self._executor = self._executor, None
        if ex is not None:
            try:
                self._model._release(ex)
            except ReferenceError:  # the model is gone: nothing to give back to
                pass

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Tensor:
    """An output or input as TVM's ``GraphModule`` returns it: ``.numpy()``, ``.shape``,
    ``.dtype``, and the array protocols (numpy, DLPack)."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def numpy(self) -> np.ndarray:
        return self._array

    asnumpy = numpy

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def dtype(self) -> str:
        return "bool" if self._array.dtype == np.bool_ else str(self._array.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __repr__(self) -> str:
        return f"tvmrt.Tensor({self._array!r})"


class Model:
    """A compiled TVM graph-executor model, ready to run from any number of threads.

    ``path`` is a model folder (``lib.so``, and ``graph.json`` and ``params.bin`` for builds whose
    library does not carry them) or one ``export_library`` file; ``lib``, ``graph`` (a path or the
    JSON text) and ``params`` (a path or the bytes) name artefacts one by one. ``device`` is
    ``"auto"`` (OpenCL when the library has OpenCL kernels, else the CPU), ``"cpu"``, ``"opencl"``
    or ``"opencl:N"``. ``map_params=True`` maps a params file read-only instead of reading it (a
    file made by :meth:`prepare_params` or ``tvmrt align-params``: its weights, and the prepared
    ones, are pages shared with every process that maps it). ``concurrency`` is how many runs may
    be in flight at once (default: the machine's CPUs): the activation arenas follow it, a run
    beyond it waits. ``share_weights_with`` is another build of the same model (batch size,
    sequence length) whose weights this one uses instead of loading its own, and whose pool of
    activation arenas (and so concurrency) it shares; ``pool_with`` shares the pool alone (builds
    that each map one prepared file, for instance). :meth:`close` frees the model's memory at once
    (dropping the last reference does too).

    Every method may be called from many threads at once. ``run`` is one call: inputs in, outputs
    out. ``set_input``, ``run()`` and ``get_output`` (as TVM's ``GraphModule``) act on the calling
    thread's own executor, so one thread's calls never interleave with another's. For exclusive
    use across calls (outputs without a copy, or coroutines that await between the calls), take a
    :meth:`session`.
    """

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
        share_weights_with: Model | None = None,
        pool_with: Model | None = None,
    ) -> None:
        art = locate(path, lib, graph, params)
        self._lock = threading.Lock()
        self._free: list[_Executor] = []
        self._executors = 0
        self._local = threading.local()
        self._lib = _ffi.load_module(str(art.lib))
        self.library_path = str(art.lib)
        # The library's factory (export_library's graph and, usually, weights) comes first; a
        # folder's graph.json and params.bin serve libraries that carry none.
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
        self.device = _device(device, self._lib)
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
        # The executor holding the weights (loaded, or the factory's): made now, so a bad file or
        # a missing weight is an error here, not at the first run.
        self._primary = self._make(primary=True)
        self._free.append(self._primary)

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
            names = [n for n in read_param_names(self._params) if not n.startswith(_NOT_WEIGHTS)]
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

    def _make(self, primary: bool = False) -> _Executor:
        """A new executor: the factory's (sharing its weights) or one made from the graph, given
        the weights (the first) or sharing the first's."""
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
            fn("share_params")(self._source._primary.module, self._shared_names)
        elif primary and self._params is not None:
            if isinstance(self._params, bytes):
                fn("load_params")(self._params)
            elif self._map_params:
                fn("load_params_from_file")(str(self._params))
            else:
                fn("load_params")(self._params.read_bytes())
        elif self._params is not None:
            fn("share_params")(self._primary.module, self._shared_names)
        if len(self._devices) == 1:
            fn("join_arena_pool")(self._pool)
        with self._lock:
            self._executors += 1
        return _Executor(self, module)

    def _acquire(self) -> _Executor:
        if self._primary is None:
            raise errors.RuntimeFailure("the model is closed")
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._make()

    def _release(self, ex: _Executor) -> None:
        with self._lock:
            self._free.append(ex)

    def _input_index(self, key: int | str) -> int | None:
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if not 0 <= i < len(self._all_inputs):
                raise errors.InvalidIndexError(f"input index {i} out of range ({len(self._all_inputs)} inputs)")
            return i
        return self._input_indices.get(key)

    def _output_index(self, key: int | str) -> int:
        if isinstance(key, str):
            names = [t.name for t in self.outputs]
            if key not in names:
                raise errors.InvalidKeyError(f"no output named {key!r} (outputs: {', '.join(names)})")
            return names.index(key)
        i = int(key)
        if not 0 <= i < len(self.outputs):
            raise errors.InvalidIndexError(f"output index {i} out of range ({len(self.outputs)} outputs)")
        return i

    # The calling thread's own session (GraphModule-style calls).
    def _thread_session(self) -> Session:
        s: Session | None = getattr(self._local, "session", None)
        if s is None:
            # Collected with the thread's locals when the thread ends: the executor goes back.
            s = Session(self, weak=True)
            self._local.session = s
        return s

    def session(self) -> Session:
        """An executor of this model for the caller alone, until the session is closed."""
        return Session(self)

    def run(self, inputs: Mapping[str, Any] | None = None, *, copy: bool = True, **named: Any) -> list[np.ndarray]:
        """Runs the model on the inputs given by name (a mapping, keywords, or both; inputs not
        given keep what this thread set before) and returns the outputs as numpy arrays, in order.
        With ``copy=False`` they are views of this thread's executor's outputs, valid until this
        thread's next run."""
        return self._thread_session().run(inputs, copy=copy, **named)

    __call__ = run

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Sets inputs of the calling thread's executor, as ``GraphModule.set_input``."""
        self._thread_session().set_input(key, value, **params)

    def get_output(self, index: int | str, out: np.ndarray | None = None) -> Tensor:
        """Output `index` of the calling thread's last run, as ``GraphModule.get_output``."""
        return self._thread_session().get_output(index, out)

    def get_input(self, key: int | str) -> Tensor:
        return self._thread_session().get_input(key)

    def get_num_inputs(self) -> int:
        return len(self._all_inputs)

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def get_input_index(self, name: str) -> int:
        i = self._input_index(name)
        return -1 if i is None else i

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        return self._thread_session().get_input_info()

    def benchmark(
        self, repeat: int = 5, number: int = 5, min_repeat_ms: int = 0, end_to_end: bool = False, **inputs: Any
    ) -> BenchmarkResult:
        """Times runs of the calling thread's executor (see :meth:`Session.benchmark`)."""
        return self._thread_session().benchmark(repeat, number, min_repeat_ms, end_to_end, **inputs)

    def profile(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> Report:
        """Profiles a run as TVM's debug executor does (three warm-up runs, then every operator
        timed on its device); the inputs given, else the calling thread's current ones."""
        given = {**(inputs or {}), **named}
        if self._factory is not None and self._params is None and self._source is None:
            debug = _ffi.module_function(self._lib, "debug_create", True)
            assert debug is not None
            module = debug("default", self.device)
        else:
            args: list[Any] = [self._graph.text, self._lib]
            for d in self._devices:
                args += [d.type, d.id]
            module = _ffi.global_function("tvm.graph_executor_debug.create")(*args)
            owner = self._source._primary if self._source is not None else self._primary
            _ffi.method(module, "share_params")(owner.module, self._shared_names)
        probe = _Executor(self, module)
        _ffi.method(module, "set_strict_inputs")(1)
        current = self._thread_session()
        for i in self._data_input_indices:
            name = self._all_inputs[i].name
            probe.set_input(i, given[name] if name in given else current._ex().input(i))
        report = _ffi.method(module, "profile")(None)
        return Report(report)

    def memory_usage(self) -> dict[str, Any]:
        """What this model holds: the weights (once, whoever holds them), each executor's own
        memory, and the pool of activation arenas its runs draw from, in bytes."""
        with self._lock:
            executors = list(self._free)
        usage = self._primary.memory_usage()
        pool = json.loads(_ffi.method(self._pool, "get_usage")())
        per = [e.memory_usage() for e in executors] if executors else [usage]
        return {
            "device": usage["device"],
            "executors": self._executors,
            "weights": usage["weights_owned"] + usage["weights_shared"] + usage["weights_mapped"],
            "weights_mapped": usage["weights_mapped"],
            "weights_derived": usage["weights_derived"],
            "activations_own": sum(p["activations"] for p in per),
            "arena_pool": pool,
            "executors_idle": [p for p in per],
        }

    def prepare_params(self, path: PathLike) -> None:
        """Writes this model's weights, with what its weight-only operators derive from them,
        into a file for ``map_params=True`` (and ``tvmrt run --map-params``): every process that
        maps it shares its pages, and nothing is computed at load. Written whole (a temporary
        file renamed over `path`), so processes making it at once never see it half written.
        A model whose params are a prepared file of the same weights (another build's) adds its
        own derived weights to that file's: one file serves every build."""
        blob = (
            self._params
            if isinstance(self._params, bytes)
            else (self._params.read_bytes() if self._params is not None else self._factory_params_blob())
        )
        prepared = _ffi.method(self._primary.module, "prepare_params")(blob)
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
        kwargs.setdefault("device", (self.device.type, self.device.id))
        return Model(path, share_weights_with=self, **kwargs)

    def close(self) -> None:
        """Lets go of the model's executors, weights and library now (outputs taken without a
        copy keep what they point into); the model cannot run after."""
        with self._lock:
            self._free.clear()
        self._local = threading.local()
        self._primary = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        ins = ", ".join(repr(t) for t in self.inputs)
        return f"tvmrt.Model({self.library_path!r}, device={self.device!r}, inputs=[{ins}])"
