"""One executor of a model (a graph executor module of the runtime), used by one caller at a time:
its inputs and outputs as prepared calls, the input rules applied, the views of its outputs
counted so the model never gives it to another caller while one lives."""

from __future__ import annotations

import ctypes
import json
import weakref
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from . import _ffi, _tensors, errors
from ._artifacts import TensorInfo


class ExecutorModel(Protocol):
    """What an executor reads of the model that made it (:class:`tvmrt.Model`, which imports this
    module: described here rather than imported back)."""

    @property
    def device(self) -> _ffi.Device: ...
    @property
    def outputs(self) -> list[TensorInfo]: ...
    @property
    def _all_inputs(self) -> list[TensorInfo]: ...
    @property
    def _input_indices(self) -> dict[str, int]: ...
    @property
    def _data_input_indices(self) -> list[int]: ...
    def _input_index(self, key: int | str) -> int: ...


class Slot:
    """An input or output of an executor as a prepared call: a DLTensor of the tensor's shape and
    dtype over the caller's array, handed to ``set_input`` / ``get_output`` with its index."""

    __slots__ = ("call", "dtype", "fast", "name", "shape", "shape_array", "tensor")

    def __init__(self, fn: _ffi.Function, index: int, info: TensorInfo, written: bool) -> None:
        self.name = info.name
        self.shape = info.dims
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
        self.fast = self.call.bound([t], 0 if written else 1)

    def put(self, arr: np.ndarray) -> None:
        """Calls with `arr` (of this slot's shape and dtype, contiguous) as the tensor; `arr` is
        the caller's, alive for the whole call."""
        if self.fast is not None and _ffi.call_bound(self.fast, arr):
            return
        self.tensor.data = _tensors.address(arr)
        try:
            self.call()
        finally:
            self.tensor.data = None


class Executor:
    """One executor of the model, used by one caller at a time."""

    __slots__ = (
        "__weakref__",
        "_fused",
        "_quick",
        "_get_input",
        "_get_output",
        "_run",
        "_run_into",
        "_set",
        "inputs",
        "model",
        "module",
        "outputs",
        "run_call",
        "unset",
        "views",
    )

    def __init__(self, model: ExecutorModel, module: _ffi.Handle) -> None:
        self.module = module
        # Weakly: the model keeps its executors, never the other way round (no cycle, so a model
        # nobody holds is freed at once, its memory with it).
        self.model: ExecutorModel = weakref.proxy(model)
        fn = self.function
        self._set, self._run, self._get_output, self._get_input = (
            fn("set_input"),
            fn("run"),
            fn("get_output"),
            fn("get_input"),
        )
        self.run_call = _ffi.PreparedCall(self._run, [])
        self._run_into = fn("tvmrt.run_into")
        # Prepared one-call requests, by the inputs they set (usually one: every data input):
        # by ctypes, and bound to the arrays from C where tvmrt._fast is there.
        self._fused: dict[tuple[int, ...], tuple[_ffi.PreparedCall, Any]] = {}
        # The plan of each set of input names run(name=array, ...) gives (see quick).
        self._quick: dict[tuple[str, ...], tuple[frozenset[int], Callable[..., Any]] | None] = {}
        self.inputs = [Slot(self._set, i, t, False) for i, t in enumerate(model._all_inputs)]
        self.outputs = [Slot(self._get_output, i, t, True) for i, t in enumerate(model.outputs)]
        # The data inputs not set yet: a run before every one was set is refused.
        self.unset = set(model._data_input_indices)
        # The owners of the arrays handed out without a copy: while one lives, this executor's
        # outputs are someone's, and it goes to no other caller.
        self.views: weakref.WeakSet[_tensors.ViewOwner] = weakref.WeakSet()

    def function(self, name: str) -> _ffi.Function:
        return _ffi.method(self.module, name)

    def viewed(self) -> bool:
        return len(self.views) > 0

    def set_input(self, key: int | str, value: Any, cast: _tensors.Cast = False) -> None:
        index = self.model._input_index(key)
        slot = self.inputs[index]
        arr = _tensors.as_input(value, slot.dtype, slot.name, cast)
        if arr.shape == slot.shape:
            slot.put(arr)
        else:
            # Another shape: the runtime refuses it, saying which (strict inputs).
            self._set(index, _tensors.TensorView(arr))
        self.unset.discard(index)

    def run(self) -> None:
        if self.unset:
            missing = [self.model._all_inputs[i].name for i in sorted(self.unset)]
            raise errors.InvalidKeyError(f"inputs never set: {', '.join(missing)}")
        self.run_call()

    def fused(self, indices: tuple[int, ...]) -> tuple[_ffi.PreparedCall, Any]:
        """``tvmrt.run_into`` prepared for the inputs `indices` and every output, over the slots'
        tensors: a request is then one call into the library (and the same from C, taking the
        input arrays then the output arrays, where it can be)."""
        fused = self._fused.get(indices)
        if fused is None:
            n_out = len(self.outputs)
            codes = [_ffi.INT] + [_ffi.INT, _ffi.DLTENSOR] * len(indices) + [_ffi.DLTENSOR] * n_out
            call = _ffi.PreparedCall(self._run_into, codes)
            call.values[0].v_int64 = len(indices)
            for k, i in enumerate(indices):
                call.values[1 + 2 * k].v_int64 = i
                call.values[2 + 2 * k].v_handle = ctypes.addressof(self.inputs[i].tensor)
            for k, slot in enumerate(self.outputs):
                call.values[1 + 2 * len(indices) + k].v_handle = ctypes.addressof(slot.tensor)
            ins = [self.inputs[i] for i in indices]
            tensors = [slot.tensor for slot in ins] + [slot.tensor for slot in self.outputs]
            plan = (
                np.ndarray,
                np.empty,
                tuple(slot.dtype for slot in ins),
                tuple(slot.shape for slot in ins),
                tuple(slot.dtype for slot in self.outputs),
                tuple(slot.shape for slot in self.outputs),
            )
            fused = self._fused[indices] = (call, call.bound(tensors, len(indices), plan))
        return fused

    def run_into(self, arrays: dict[int, np.ndarray], outs: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Sets the inputs `arrays` (by index; each of its slot's shape and dtype, contiguous),
        runs, and returns every output, copied out (into `outs`, each its slot's shape and dtype,
        contiguous and writable, when given): one call into the library. Every array is alive for
        the whole call."""
        if self.unset:
            missing = self.unset.difference(arrays)
            if missing:
                names = [self.model._all_inputs[i].name for i in sorted(missing)]
                raise errors.InvalidKeyError(f"inputs never set: {', '.join(names)}")
        call, fast = self.fused(tuple(arrays))
        if outs is None:
            outs = [np.empty(slot.shape, dtype=slot.dtype) for slot in self.outputs]
        if fast is not None and _ffi.call_bound(fast, *arrays.values(), *outs):
            self.unset.difference_update(arrays)
            return outs
        try:
            for i, arr in arrays.items():
                self.inputs[i].tensor.data = _tensors.address(arr)
            for slot, out in zip(self.outputs, outs):
                slot.tensor.data = _tensors.address(out)
            call()
        finally:
            for i in arrays:
                self.inputs[i].tensor.data = None
            for slot in self.outputs:
                slot.tensor.data = None
        self.unset.difference_update(arrays)
        return outs

    def quick(self, named: Mapping[str, Any], outs: list[np.ndarray] | None = None) -> list[np.ndarray] | None:
        """The request `run(name=array, ...)` (or `run_into`) when it is the plainest one: inputs by
        name, each a numpy array of its slot's dtype and shape, every input not set before among
        them, and the compiled call there. Its outputs (in `outs` when given, which the caller
        checked), or None for the general path, which also says what is wrong with the rest. The
        compiled call refuses, before it runs, an array that is not C-contiguous or an output
        that is read-only: then None too."""
        names = tuple(named)
        if names in self._quick:
            plan = self._quick[names]
        else:
            plan = self._quick[names] = self._quick_plan(names)
        if plan is None:
            return None
        indices, request = plan
        if self.unset and not self.unset <= indices:
            return None
        got = request(tuple(named.values()), outs)
        if type(got) is list:
            if self.unset:
                self.unset -= indices
            return got
        if got is None:
            return None
        raise _ffi.lib().last_error()

    def _quick_plan(self, names: tuple[str, ...]) -> tuple[frozenset[int], Callable[..., Any]] | None:
        by_name = self.model._input_indices
        if len(set(names)) != len(names) or any(k not in by_name for k in names):
            return None
        indices = tuple(by_name[k] for k in names)
        _, fast = self.fused(indices)
        if fast is None:
            return None
        return frozenset(indices), fast.request

    def output(self, index: int, copy: bool) -> np.ndarray:
        slot = self.outputs[index]
        if copy or self.model.device.type != _ffi.CPU:
            out = np.empty(slot.shape, dtype=slot.dtype)
            slot.put(out)
            return out
        handle = self._get_output(index)
        t = _ffi.array_tensor(handle)
        owner = _tensors.ViewOwner(handle, self)
        self.views.add(owner)
        return _tensors.view_of_memory(t.data + t.byte_offset, slot.shape, slot.dtype, owner)

    def input(self, index: int) -> np.ndarray:
        info = self.model._all_inputs[index]
        out = np.empty(info.dims, dtype=_tensors.np_dtype(info.dtype))
        handle = self._get_input(index)
        lb = _ffi.lib()
        lb.check(lb.cdll.TVMArrayCopyToBytes(ctypes.c_void_p(handle.value), _tensors.address(out), out.nbytes))
        return out

    def memory_usage(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.function("get_memory_usage")())
        return result
