"""AOT executor artefacts (``relay.build(..., executor=Executor("aot"), runtime=Runtime("cpp"))``
and ``export_library``; TVM 0.9 to 0.19): the library's compiled entry runs the whole model, so a
run is one call. Every executor of a model shares its constants (the library's, and one constant
pool for USMP builds); each thread running the model has an executor of its own."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import _ffi, _fork, _tensors, errors
from ._artifacts import LIBRARY_NAMES, PathLike, TensorInfo
from .plugins import load_plugins
from .profiling import BenchmarkResult, time_runs

# How the factory's entry appears in a module blob: its type key as a dmlc string.
_BLOB_MARK = struct.pack("<Q", len(b"AotExecutorFactory")) + b"AotExecutorFactory"


def locate_aot(path: PathLike | None, lib: PathLike | None = None) -> Path | None:
    """The library of the AOT artefact named (a folder or the file), or None when it is not one."""
    if lib is not None:
        candidates = [Path(lib)]
    elif path is None:
        return None
    elif Path(path).is_dir():
        folder = Path(path)
        candidates = [folder / n for n in LIBRARY_NAMES] + sorted(folder.glob("*.so"))
    else:
        candidates = [Path(path)]
    for c in candidates:
        try:
            if c.is_file() and _BLOB_MARK in c.read_bytes():
                return c
        except OSError:
            continue
    return None


class _Executor:
    """One executor of the model: used by one thread at a time."""

    __slots__ = ("_get_output", "_run", "_set_input", "module")

    def __init__(self, model: AOTModel) -> None:
        self.module = _ffi.module_function(model._lib, model.module_name, False)(model.device)  # type: ignore[misc]
        self._set_input = _ffi.method(self.module, "set_input")
        self._run = _ffi.method(self.module, "run")
        self._get_output = _ffi.method(self.module, "get_output")

    def run(self, arrays: Sequence[np.ndarray], outputs: int) -> list[np.ndarray]:
        for i, a in enumerate(arrays):
            self._set_input(i, _tensors.TensorView(a))
        self._run()
        return [_tensors.array_to_numpy(self._get_output(k)) for k in range(outputs)]


class AOTModel:
    """An AOT executor model: ``path`` is its folder or its ``export_library`` file (``lib=``
    names the file). ``run`` takes the inputs in order, by name or as a mapping, and returns the
    outputs as numpy arrays. Made by :class:`tvmrt.Model` for AOT artefacts. ``input_specs``, when
    given, must agree with what the artefact records (a deployment's declaration, checked)."""

    #: The model's kind in the Open Inference Protocol's metadata.
    platform = "tvm_aot"
    #: Every input's dtype and shape are known (the library's metadata records them).
    described = True

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        lib: PathLike | None = None,
        device: Any = "auto",
        num_threads: int | None = None,
        plugins: Sequence[PathLike] | PathLike | None = None,
        input_specs: Sequence[TensorInfo] | Mapping[str, tuple[Sequence[int], str]] | None = None,
        **unused: Any,
    ) -> None:
        bad = sorted(k for k, v in unused.items() if v not in (None, False))
        if bad:
            raise errors.InvalidValueError(f"an AOT model takes no {', '.join(bad)} (graph-executor options)")
        load_plugins(plugins)
        found = locate_aot(path, lib)
        if found is None:
            raise errors.InvalidValueError(f"{path or lib}: not an AOT executor artefact")
        self.library_path = str(found)
        self._lib = _ffi.load_module(self.library_path)
        names = _ffi.method(self._lib, "list_module_names")()
        size = _ffi.global_function("runtime.ArraySize")(names)
        item = _ffi.global_function("runtime.ArrayGetItem")
        text = _ffi.global_function("runtime.GetFFIString")
        #: The factory's function that makes executors (``default`` unless built with ``mod_name``).
        self.module_name: str = text(item(names, 0)) if size else "default"
        if device not in ("auto", "cpu") and not (isinstance(device, tuple) and tuple(device) == (1, 0)):
            raise errors.InvalidValueError(f"device {device!r}: an AOT model runs on the CPU alone")
        self.device = _ffi.Device(_ffi.CPU, 0)
        self.num_threads = num_threads
        self._closed = False
        self._lock = threading.Lock()
        self._free: list[_Executor] = []
        first = _Executor(self)  # made now: a missing entry or bad metadata is an error at load
        num_inputs = _ffi.method(first.module, "get_num_inputs")()
        get_input = _ffi.method(first.module, "get_input")
        get_name = _ffi.method(first.module, "get_input_name")

        def info(name: str, array: _ffi.Handle) -> TensorInfo:
            t = _ffi.array_tensor(array)
            code = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}[t.dtype.code]
            return TensorInfo(name, tuple(t.shape[i] for i in range(t.ndim)), f"{code}{t.dtype.bits}")

        #: The inputs (names as the compiler sanitised them: ``input.1`` is ``input_1``).
        self.inputs: list[TensorInfo] = [info(get_name(i), get_input(i)) for i in range(num_inputs)]
        num_outputs = _ffi.method(first.module, "get_num_outputs")()
        get_output = _ffi.method(first.module, "get_output")
        get_output_name = _ffi.method(first.module, "get_output_name")
        #: The outputs, named as the metadata names them (``output0``...), as every face does.
        self.outputs: list[TensorInfo] = [info(get_output_name(k), get_output(k)) for k in range(num_outputs)]
        self.weights: list[TensorInfo] = []
        self._free.append(first)
        if input_specs is not None:
            self._check_specs(input_specs)
        _fork.track(self)

    def _check_specs(self, given: Sequence[TensorInfo] | Mapping[str, tuple[Sequence[int], str]]) -> None:
        """Refuses a declaration of the inputs that disagrees with the artefact, naming where."""
        if isinstance(given, Mapping):
            declared = [(self._sanitised(n), tuple(s), str(d)) for n, (s, d) in given.items()]
        else:
            declared = [(self._sanitised(t.name), tuple(t.shape or ()), t.dtype) for t in given]
        have = [(t.name, tuple(t.shape or ()), t.dtype) for t in self.inputs]
        if declared != have:
            raise errors.InvalidValueError(f"input_specs {declared} disagree with the artefact's inputs {have}")

    def memory_usage(self) -> dict[str, Any]:
        """The constant pool (once per model) and what each executor holds, in bytes."""
        self._check_open()
        usage: dict[str, Any] = json.loads(_ffi.method(self._lib, "tvmrt.memory_usage")())
        return usage

    def _check_open(self) -> None:
        if self._closed:
            raise errors.InvalidValueError("the model is closed")

    def _sanitised(self, name: str) -> str:
        return "".join(c if c.isascii() and c.isalnum() else "_" for c in name)

    def _feed(self, args: Sequence[Any], named: Mapping[str, Any], cast: _tensors.Cast) -> list[np.ndarray]:
        if len(args) == 1 and isinstance(args[0], Mapping):
            named, args = {**args[0], **named}, ()
        names = [t.name for t in self.inputs]
        if len(args) + len(named) != len(names):
            raise errors.InvalidValueError(
                f"the model takes {len(names)} inputs ({', '.join(names)}); {len(args) + len(named)} given"
            )
        values: list[Any] = list(args) + [None] * (len(names) - len(args))
        for k, v in named.items():
            key = self._sanitised(k)
            if key not in names:
                raise errors.InvalidKeyError(f"no input named {k!r} (inputs: {', '.join(names)})")
            i = names.index(key)
            if values[i] is not None:
                raise errors.InvalidValueError(f"input {k!r} given twice")
            values[i] = v
        out = []
        for spec, v in zip(self.inputs, values):
            arr = _tensors.as_input(v, _tensors.np_dtype(spec.dtype), spec.name, cast)
            if arr.shape != spec.shape:
                raise errors.InvalidValueError(
                    f"input {spec.name!r} is {spec.dtype}{list(spec.shape or ())}, got {list(arr.shape)}"
                )
            out.append(arr)
        return out

    def _take(self) -> _Executor:
        self._check_open()
        with self._lock:
            if self._free:
                return self._free.pop()
        return _Executor(self)

    def _give_back(self, ex: _Executor) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(ex)

    def run(self, *args: Any, cast: _tensors.Cast = False, **named: Any) -> list[np.ndarray]:
        """Runs the model on inputs given in order, by name, or as a mapping; returns its outputs."""
        arrays = self._feed(args, named, cast)
        ex = self._take()
        try:
            return ex.run(arrays, len(self.outputs))
        finally:
            self._give_back(ex)

    __call__ = run

    def benchmark(self, *args: Any, repeat: int = 5, number: int = 5, warmup: int = 1, **named: Any) -> BenchmarkResult:
        """Seconds per run (inputs given as to :meth:`run`), measured from Python."""
        arrays = self._feed(args, named, False)
        ex = self._take()
        try:
            return time_runs(lambda: ex.run(arrays, 0), repeat, number, warmup)
        finally:
            self._give_back(ex)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._free.clear()

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {t.dtype}{list(t.shape or ())}" for t in self.inputs)
        return f"AOTModel({self.library_path!r}, inputs=[{ins}], {len(self.outputs)} outputs)"
