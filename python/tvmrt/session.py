"""A caller's hold on one executor of a model (:class:`Session`), what it returns
(:class:`Tensor`), and the forms a call may give its inputs in."""

from __future__ import annotations

import statistics
import time
import weakref
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from . import _ffi, _tensors, errors
from ._artifacts import TensorInfo
from ._devices import device_of, looks_like_device
from ._executor import Executor, ExecutorModel
from .profiling import TVM_LOOP_TUNING, BenchmarkResult


class SessionModel(ExecutorModel, Protocol):
    """What a session reads of its model (:class:`tvmrt.Model`, which imports this module:
    described here rather than imported back)."""

    @property
    def inputs(self) -> list[TensorInfo]: ...
    @property
    def _weights_version(self) -> int: ...
    @property
    def _closed(self) -> bool: ...
    def _output_index(self, key: int | str) -> int: ...
    def _acquire(self, session: Session) -> tuple[Executor, int]: ...
    def _release(self, ex: Executor) -> None: ...
    def _reshare(self, ex: Executor) -> int: ...
    def get_num_outputs(self) -> int: ...
    def get_num_inputs(self) -> int: ...
    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]: ...
    def get_input_index(self, name: str) -> int: ...


_FORMS = (
    "inputs by name (run({'data': x}) or run(data=x)), one array for a model of one input (run(x)), "
    "a list in input order (run([x, y])), or ONNX Runtime's form (run(None, {'data': x}))"
)


# Our order of benchmark's arguments, and TVM's after its device and func_name.
_OURS = ("repeat", "number", "min_repeat_ms", "end_to_end", "warmup")
_TVMS = (
    "repeat",
    "number",
    "min_repeat_ms",
    "limit_zero_time_iterations",
    "end_to_end",
    "cooldown_interval_ms",
    "repeats_to_cooldown",
)
_BENCHMARK_FORMS = (
    "benchmark(repeat=5, number=5, min_repeat_ms=0, end_to_end=False, warmup=1, **inputs), or TVM's "
    "benchmark(device, func_name='run', repeat=5, number=5, min_repeat_ms=None, ...)"
)


def benchmark_arguments(device: _ffi.Device, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``benchmark``'s arguments in either form (ours, or TVM's ``GraphModule.benchmark`` with a
    device first) as our keywords; a device other than the model's, a function other than
    ``run``, or anything else unknown is refused with the forms accepted."""

    args = list(args)
    named = dict(kwargs)
    order: tuple[str, ...] = _OURS
    if (args and looks_like_device(args[0])) or "device" in named or "dev" in named:
        order = _TVMS
        given = args.pop(0) if args and looks_like_device(args[0]) else named.pop("device", named.pop("dev", None))
        try:
            dev = device_of(given, None)
        except (errors.TVMRTError, ValueError, TypeError):
            raise errors.InvalidValueError(f"benchmark: {given!r} is no device ({_BENCHMARK_FORMS})") from None
        if dev != device:
            raise errors.InvalidValueError(f"benchmark: the model runs on {device}, not {dev}")
        func = args.pop(0) if args and isinstance(args[0], str) else named.pop("func_name", "run")
        if func != "run":
            raise errors.InvalidValueError(f"benchmark: func_name {func!r}: only 'run' is timed here")
    if len(args) > len(order):
        raise errors.InvalidValueError(f"benchmark: {len(args)} positional arguments; the forms: {_BENCHMARK_FORMS}")
    for name, value in zip(order, args):
        if name in named:
            raise errors.InvalidValueError(f"benchmark: {name} given twice")
        named[name] = value
    for name in TVM_LOOP_TUNING:
        named.pop(name, None)
    if named.get("min_repeat_ms") is None:
        named["min_repeat_ms"] = 0
    for name in ("repeat", "number", "min_repeat_ms", "warmup"):
        value = named.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
            raise errors.InvalidValueError(f"benchmark: {name}={value!r}: a count of 0 or more")
    for name in ("repeat", "number"):
        if named.get(name) is not None and named[name] < 1:
            raise errors.InvalidValueError(f"benchmark: {name}={named[name]!r}: at least 1")
    return named


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic, Tensor)) or any(
        hasattr(value, a) for a in ("__array__", "__array_interface__", "__dlpack__")
    )


def feeds(
    model: SessionModel, args: Sequence[Any], named: Mapping[str, Any]
) -> tuple[dict[Any, Any], list[int] | None]:
    """The inputs a call gave, by name or index, in any of the accepted forms; and the outputs it
    asked for (ONNX Runtime's output names), or None for all."""
    data = model.inputs
    wanted: list[int] | None = None
    given: dict[Any, Any] = {}
    if len(args) == 2 and (args[0] is None or isinstance(args[0], (list, tuple))) and isinstance(args[1], Mapping):
        # ONNX Runtime: run(output_names, input_feed).
        if args[0] is not None:
            wanted = [model._output_index(n) for n in args[0]]
        given.update(args[1])
    elif len(args) == 1:
        first = args[0]
        if first is None:
            pass
        elif isinstance(first, Mapping):
            given.update(first)
        elif isinstance(first, (list, tuple)) and first and all(_is_array(v) for v in first):
            if len(first) != len(data):
                raise errors.InvalidValueError(
                    f"{len(first)} arrays given in input order; the model takes {len(data)}: "
                    + ", ".join(t.name for t in data)
                )
            given.update({t.name: v for t, v in zip(data, first)})
        elif len(data) == 1 and (_is_array(first) or isinstance(first, (list, tuple, int, float))):
            given[data[0].name] = first
        else:
            raise errors.InvalidTypeError(
                f"run takes {_FORMS}; got a {type(first).__name__} for a model of inputs "
                + ", ".join(t.name for t in data)
            )
    elif args:
        raise errors.InvalidTypeError(f"run takes {_FORMS}; got {len(args)} positional arguments")
    for k, v in named.items():
        if k in given:
            raise errors.InvalidValueError(f"input {k!r} given twice")
        given[k] = v
    return given, wanted


class Session:
    """An executor of the model held by one caller: ``set_input``, ``run`` and ``get_output`` as
    TVM's ``GraphModule`` has them, and outputs without a copy (``copy=False``), valid until this
    session's next run (kept valid after: the executor goes to no other caller while they live).
    Made by :meth:`Model.session` (a context manager: the executor goes back to the model when the
    ``with`` ends, or when the session is collected); ends when the model is closed."""

    def __init__(self, model: SessionModel, weak: bool = False) -> None:
        # A session the model keeps for a thread holds the model weakly (no cycle); one a caller
        # holds keeps the model alive.
        self._model: SessionModel = weakref.proxy(model) if weak else model
        self._executor: Executor | None = None
        self._executor, self._weights = model._acquire(self)

    def _ex(self) -> Executor:
        ex = self._executor
        if ex is None:
            closed = self._model._closed
            raise errors.RuntimeFailure("the model is closed" if closed else "this session is closed")
        if self._weights != self._model._weights_version:
            self._weights = self._model._reshare(ex)
        return ex

    def set_input(
        self, key: int | str | None = None, value: Any = None, *, cast: _tensors.Cast = False, **params: Any
    ) -> None:
        """Sets inputs by name or index (copied into the executor), as ``GraphModule.set_input``.
        ``cast=True`` casts arrays of another dtype as TVM's did (``"safe"``: only casts that keep
        every value); by default they are refused."""
        ex = self._ex()
        if key is not None:
            ex.set_input(key, value, cast)
        elif value is not None:
            raise errors.InvalidValueError("set_input(None, value): name the input")
        for k, v in params.items():
            ex.set_input(k, v, cast)

    def run(self, *args: Any, copy: bool = True, cast: _tensors.Cast = False, **named: Any) -> list[np.ndarray]:
        """Sets the inputs given (others keep what was set before), runs, and returns the outputs
        (see :meth:`Model.run` for the forms the inputs may take)."""
        return self._request(args, named, copy, cast, None)

    def run_into(
        self, outputs: Sequence[np.ndarray], *args: Any, cast: _tensors.Cast = False, **named: Any
    ) -> list[np.ndarray]:
        """As :meth:`run`, writing the outputs into `outputs` (see :meth:`Model.run_into`)."""
        ex = self._ex()
        if not isinstance(outputs, (list, tuple)) or len(outputs) != len(ex.outputs):
            raise errors.InvalidValueError(
                f"run_into takes a list of {len(ex.outputs)} output arrays, in order, then the inputs as run takes them"
            )
        for slot, out in zip(ex.outputs, outputs):
            if not (
                type(out) is np.ndarray
                and out.dtype == slot.dtype
                and out.shape == slot.shape
                and out.flags.c_contiguous
                and out.flags.writeable
            ):
                got = f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
                raise errors.InvalidValueError(
                    f"output {slot.name!r} is {slot.dtype}{list(slot.shape)}: run_into takes a writable, C-contiguous "
                    f"numpy array of that (as model.outputs[i].empty() makes), not {got}"
                )
        return self._request(args, named, True, cast, list(outputs))

    def _request(
        self,
        args: Sequence[Any],
        named: Mapping[str, Any],
        copy: bool,
        cast: _tensors.Cast,
        outs: list[np.ndarray] | None,
    ) -> list[np.ndarray]:
        ex = self._ex()
        # Inputs by keyword, the usual call, need no sorting out.
        given, wanted = (named, None) if not args else feeds(self._model, args, named)
        if outs is not None and wanted is not None:
            raise errors.InvalidValueError("run_into writes every output: name none (ONNX Runtime's output_names)")
        if copy and given:
            # One call into the library for the whole request, when every input given is of its
            # slot's shape (another shape goes the long way, to the runtime's own refusal).
            arrays: dict[int, np.ndarray] = {}
            by_name = self._model._input_indices
            for k, v in given.items():
                i = by_name.get(k) if isinstance(k, str) else None
                if i is None:
                    i = self._model._input_index(k)
                slot = ex.inputs[i]
                # An array already as the input takes it (exactly its class: a masked array is
                # not; its dtype equal to the slot's, so in native byte order), else the rules.
                if type(v) is np.ndarray and v.dtype == slot.dtype and v.flags.c_contiguous:
                    arrays[i] = v
                else:
                    arrays[i] = _tensors.as_input(v, slot.dtype, slot.name, cast)
                if arrays[i].shape != slot.shape:
                    break
            else:
                got = ex.run_into(arrays, outs)
                return got if wanted is None else [got[i] for i in wanted]
        for k, v in given.items():
            ex.set_input(k, v, cast)
        ex.run()
        if outs is not None:
            for slot, out in zip(ex.outputs, outs):
                slot.put(out)
            return outs
        indices = range(len(ex.outputs)) if wanted is None else wanted
        return [ex.output(i, copy) for i in indices]

    def get_output(self, index: int | str, out: np.ndarray | None = None, *, copy: bool = True) -> Tensor:
        """Output `index` (or its name) of the last run: a :class:`Tensor` (``.numpy()``, as TVM's
        arrays have it), or written into `out`."""
        ex = self._ex()
        arr = ex.output(self._model._output_index(index), copy)
        if out is not None:
            np.copyto(out, arr)
            return Tensor(out)
        return Tensor(arr)

    def get_input(self, key: int | str) -> Tensor:
        """A copy of input `key` as it is now (a weight's too)."""
        ex = self._ex()
        return Tensor(ex.input(self._model._input_index(key)))

    def get_num_inputs(self) -> int:
        """Every input of the graph, weights included, as ``GraphModule.get_num_inputs``."""
        return self._model.get_num_inputs()

    def get_num_outputs(self) -> int:
        return self._model.get_num_outputs()

    def get_input_index(self, name: str) -> int:
        return self._model.get_input_index(name)

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shapes, dtypes)`` of the inputs that are not weights, by name, as
        ``GraphModule.get_input_info`` once the weights are loaded."""
        return self._model.get_input_info()

    def benchmark(self, *args: Any, **kwargs: Any) -> BenchmarkResult:
        """Times runs as TVM's ``GraphModule.benchmark`` (see :meth:`Model.benchmark`)."""
        return self._benchmark(**benchmark_arguments(self._model.device, args, kwargs))

    def _benchmark(
        self,
        repeat: int = 5,
        number: int = 5,
        min_repeat_ms: int = 0,
        end_to_end: bool = False,
        warmup: int = 1,
        **inputs: Any,
    ) -> BenchmarkResult:
        ex = self._ex()
        for k, v in inputs.items():
            ex.set_input(k, v)
        for _ in range(max(warmup, 0)):
            ex.run()  # also checks every input was set
        if end_to_end:
            given = dict(inputs)
            results = []
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(number):
                    self.run(given)
                results.append((time.perf_counter() - start) / number)
            return BenchmarkResult(results)
        ex.run()
        dev = self._model.device
        timer = _ffi.global_function("runtime.RPCTimeEvaluator")(
            ex.module, "run", dev.type, dev.id, number, repeat, min_repeat_ms, 100, 0, 1, ""
        )
        raw = timer()
        return BenchmarkResult(list(np.frombuffer(raw, dtype=np.float64)))

    def request_cost(self, *args: Any, repeat: int = 7, seconds: float = 0.5, **named: Any) -> dict[str, float]:
        """What a request costs from Python on this model, in microseconds: ``request`` (a
        :meth:`run` with these inputs, outputs copied out), ``run`` (the model's own run, the
        executor's ``run`` alone) and ``overhead``, their difference (what this package and the
        runtime add); medians of `repeat` timed loops of about `seconds` in all, after a warm-up."""
        if repeat < 1 or seconds <= 0:
            raise errors.InvalidValueError("request_cost: repeat of at least 1 and seconds above 0")
        self.run(*args, **named)
        ex = self._ex()

        def median_us(f: Any, each: float) -> float:
            n = max(10, int(seconds / repeat / max(each, 1e-7)))
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(n):
                    f()
                times.append((time.perf_counter() - start) / n * 1e6)
            return statistics.median(times)

        start = time.perf_counter()
        for _ in range(10):
            self.run(*args, **named)  # the warm-up, and a first estimate to size the loops
        each = (time.perf_counter() - start) / 10
        request = median_us(lambda: self.run(*args, **named), each)
        run = median_us(ex.run_call, each)
        return {"request": request, "run": run, "overhead": request - run}

    def close(self) -> None:
        """Gives the executor back to the model (outputs taken with ``copy=False`` stay as they
        are: the executor goes to no other caller while they live)."""
        ex, self._executor = self._executor, None
        if ex is not None:
            try:
                self._model._release(ex)
            except ReferenceError:  # the model is gone: nothing to give back to
                pass

    def _end(self) -> None:
        """The model closed: this session holds nothing from now on."""
        self._executor = None

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
