"""Models compiled with ``relay.vm.compile`` (the Relay VM: shapes that move, control flow), run with
inputs of any shape the model accepts, from many threads at once.

Every thread gets a VM of its own; the VMs of a model share its executable: the code, the
constants (once on the host, once per device) and the pools their storage comes from (reused
across shapes, trimmed as shapes change). A VM executable carries no parameter types: inputs are
checked against ``input_specs`` when given (or when a DLR-style ``.meta`` file is beside the
model), otherwise only by what the kernels check (rank, dtype).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import numpy as np

from . import _bound, _ffi, _fork, _tensors, errors
from ._artifacts import LIBRARY_NAMES, PathLike, TensorInfo
from ._devices import device_of, looks_like_device
from .plugins import load_plugins
from .profiling import TVM_LOOP_TUNING, BenchmarkResult, Report, time_runs

VM_MAGIC = 0xD225DE2F4214151D
# The executables' type keys, and how each appears in a module blob (a dmlc string): the Relay
# VM's, and the Relax VM's (TVM 0.19, then 0.20 to 0.27).
RELAY_KEY = "VMExecutable"
RELAX_KEYS = ("relax.Executable", "relax.VMExecutable")
_BLOB_MARKS = [struct.pack("<Q", len(k)) + k.encode() for k in (RELAY_KEY, *RELAX_KEYS)]

Nested = Union[np.ndarray, tuple[Any, ...]]


def is_vm_library(path: PathLike) -> bool:
    """Whether `path` is an ``export_library`` file whose module blob holds a VM executable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return any(mark in data for mark in _BLOB_MARKS)


def is_vm_code(path: PathLike) -> bool:
    """Whether `path` is a VM bytecode file (what ``exe.save()`` returns)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and struct.unpack("<Q", head)[0] == VM_MAGIC


@dataclass
class VMArtefacts:
    #: The library: the whole executable (one-file form), or the kernels (split form).
    lib: Path
    #: The bytecode of the split form.
    code: Path | None = None
    #: A DLR-style .meta file beside the model (its inputs' names, dtypes and shapes).
    meta: Path | None = None


def locate_vm(path: PathLike | None, lib: PathLike | None = None, code: PathLike | None = None) -> VMArtefacts | None:
    """The VM artefacts named, or None when they are not a VM model."""
    if code is not None:
        if lib is None and path is not None and Path(path).is_dir():
            lib = next((Path(path) / n for n in LIBRARY_NAMES if (Path(path) / n).is_file()), None)
        if lib is None:
            raise errors.InvalidValueError("code= (a VM's bytecode) needs its kernel library: lib=")
        if not is_vm_code(code):
            raise errors.InvalidValueError(f"{code}: not a Relay VM bytecode file (exe.save()'s first part)")
        return VMArtefacts(Path(lib), Path(code))
    if lib is not None:
        return VMArtefacts(Path(lib)) if is_vm_library(lib) else None
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return VMArtefacts(p) if is_vm_library(p) else None
    if not p.is_dir():
        return None
    meta = next(iter(sorted(p.glob("*.meta"))), None)
    codes = sorted(c for c in p.iterdir() if c.is_file() and c.suffix not in (".so", ".json") and is_vm_code(c))
    libs = sorted(p.glob("*.so"))
    whole = [so for so in libs if is_vm_library(so)]
    if whole:
        return VMArtefacts(whole[0], None, meta)
    if codes:
        if len(codes) > 1:
            raise errors.InvalidValueError(
                f"{p}: several VM bytecode files ({', '.join(c.name for c in codes)}): name one with code="
            )
        kernel = next((p / n for n in LIBRARY_NAMES if (p / n).is_file()), libs[0] if len(libs) == 1 else None)
        if kernel is None:
            raise errors.InvalidValueError(f"{p}: VM bytecode {codes[0].name} but no single kernel library: lib=")
        return VMArtefacts(kernel, codes[0], meta)
    return None


def constants_file(art: VMArtefacts) -> Path:
    """Where an executable's constants are kept aligned for mapping (``map_constants=True``): the
    user's own folder (see ``_cache``), named by the bytes of the library and bytecode, so every
    process loading the same model maps the same file and another model never does."""
    from ._cache import default_prepared_dir, private_dir

    h = hashlib.sha256()
    for f in (art.lib, art.code):
        if f is not None:
            with open(f, "rb") as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
    return private_dir(default_prepared_dir()) / f"{art.lib.stem}-{h.hexdigest()[:32]}.vmconst"


def _read_meta(meta: Path) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs and outputs a DLR-style .meta file lists (``{"Model": {"Inputs": [{"name",
    "dtype", "shape"}], "Outputs": [...]}}``, -1 or null along an open axis)."""
    try:
        doc = json.loads(meta.read_text())
        model = doc.get("Model", doc)

        def infos(key: str, default_name: str) -> list[TensorInfo]:
            return [
                TensorInfo(
                    str(i.get("name", f"{default_name}_{k}")),
                    tuple(-1 if d is None else int(d) for d in i.get("shape", [])),
                    str(i["dtype"]),
                )
                for k, i in enumerate(model.get(key, []))
            ]

        return infos("Inputs", "input"), infos("Outputs", "output")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise errors.InvalidValueError(f"{meta}: not a model .meta ({e})") from None


class _VM:
    """One VM of the model: used by one thread (or session) at a time."""

    __slots__ = ("__weakref__", "_direct", "_invoke", "_set_input", "module", "quick")

    def __init__(self, model: VMModel, debug: bool = False) -> None:
        if model.relax:
            load = "vm_profiler_load_executable" if debug else "vm_load_executable"
            self.module = _ffi.method(model._exe, load)()
        else:
            make = "runtime._VirtualMachineDebug" if debug else "runtime._VirtualMachine"
            self.module = _ffi.global_function(make)(model._exe)
        init: list[Any] = []
        for d in model._devices:
            init += [d.type, d.id, 2]
        _ffi.method(self.module, "init")(*init)
        if model.num_threads is not None:
            _ffi.method(self.module, "set_num_threads")(model.num_threads)
        self._set_input = _ffi.method(self.module, "set_input")
        self._invoke = _ffi.method(self.module, "invoke")
        # A Relax VM's functions take their inputs in the call itself: one call, not two.
        self._direct = _ffi.method(self.module, model.function) if model.relax else None
        #: The quick requests learned, by the inputs' shapes (None: that request takes the
        #: general path; see VMModel._quick).
        self.quick: dict[tuple[tuple[int, ...], ...], _Quick | None] = {}

    def run(self, func: str, arrays: Sequence[Any]) -> Any:
        # Bound parameters are the runtime's arrays already; inputs are viewed where they are.
        views = [a if isinstance(a, _ffi.Handle) else _tensors.TensorView(a) for a in arrays]
        if self._direct is not None:
            return self._direct(*views)
        self._set_input(func, *views)
        return self._invoke(func)


class _Quick:
    """A Relax request as one call from C (``tvmrt._fast``): ``tvmrt.run_into`` prepared for inputs
    of the shapes and dtypes an earlier request had, and outputs as its result had them. The
    runtime writes the outputs only when this call's result has those shapes too; otherwise it
    returns the result, which is then read the general way."""

    __slots__ = ("call", "fast", "keep")

    def __init__(self, vm: _VM, model: VMModel, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        every = model._every_param
        name = _ffi.c_string(model.function)
        codes = [_ffi.STR, _ffi.INT]
        codes += [model._bound[p].code if p in model._bound else _ffi.DLTENSOR for p in every]
        codes += [_ffi.DLTENSOR] * len(outputs)
        self.call = _ffi.PreparedCall(_ffi.method(vm.module, "tvmrt.run_into"), codes)
        self.keep: list[Any] = [name]
        self.call.values[0].v_str = name
        self.call.values[1].v_int64 = len(every)
        given = iter(inputs)
        tensors = []
        for k, p in enumerate(every):
            bound = model._bound.get(p)
            if bound is not None:
                self.call.values[2 + k].v_handle = bound.value
                continue
            tensors.append(self._tensor(next(given)))
            self.call.values[2 + k].v_handle = ctypes.addressof(tensors[-1])
        for k, o in enumerate(outputs):
            tensors.append(self._tensor(o))
            self.call.values[2 + len(every) + k].v_handle = ctypes.addressof(tensors[-1])
        plan = (
            np.ndarray,
            np.empty,
            tuple(a.dtype for a in inputs),
            tuple(a.shape for a in inputs),
            tuple(o.dtype for o in outputs),
            tuple(o.shape for o in outputs),
        )
        self.fast = self.call.bound(tensors, len(inputs), plan)

    def _tensor(self, like: np.ndarray) -> Any:
        """A host DLTensor of `like`'s shape and dtype over no memory yet (each call binds it)."""
        shape = _ffi.shape_tuple(like.shape)
        t = _ffi.DLTensor()
        t.device = _ffi.DLDevice(_ffi.CPU, 0)
        t.ndim = like.ndim
        t.dtype = _tensors.dl_dtype(like.dtype)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        self.keep += [shape, t]
        return t

    def request(self, inputs: tuple[Any, ...]) -> tuple[list[np.ndarray] | None, bool]:
        """The outputs (None: an input not as planned, for the general path), and whether the
        plan still holds (False: the outputs' shapes followed the data, this time they differed)."""
        got = self.fast.request(inputs, None)
        if type(got) is not list:
            if got is None:
                return None, True
            raise _ffi.lib().last_error()
        ret = self.call.result()
        if ret == 0 and type(ret) is int:
            return got, True
        flat: list[np.ndarray] = []
        _unpack(ret, flat, _ARRAY)
        return flat, False


# How a result's tuples are read: a Relay VM's are ADTs, a Relax VM's arrays.
_ADT = ("runtime.GetADTSize", "runtime.GetADTFields")
_ARRAY = ("runtime.ArraySize", "runtime.ArrayGetItem")


def _unpack(value: Any, flat: list[np.ndarray], tuples: tuple[str, str] = _ADT) -> Nested:
    """A result as numpy arrays (tuples nested as the model returns them), also appended to `flat`."""
    if isinstance(value, _ffi.Handle) and value.code == _ffi.NDARRAY:
        a = _tensors.array_to_numpy(value)
        flat.append(a)
        return a
    if isinstance(value, _ffi.Handle):
        size = _ffi.global_function(tuples[0])(value)
        get = _ffi.global_function(tuples[1])
        return tuple(_unpack(get(value, i), flat, tuples) for i in range(size))
    raise errors.RuntimeFailure(f"the VM returned a {type(value).__name__}")


class VMModel:
    """A VM model: a Relay VM's (``relay.vm.compile``) or a Relax VM's (TVM 0.19 to 0.27's
    ``relax.build`` / ``tvm.compile`` exported, every ABI generation). ``path`` is a folder
    (``vm.so``, or the split form's bytecode ``*.ro`` beside its kernel library), one
    ``export_library`` file of the executable,
    or ``code=`` and ``lib=`` (``exe.save()``'s two parts). ``run`` takes inputs of any shape the
    model accepts and returns numpy arrays: a tuple result flattened in order (``nested=True``:
    as the model nests it). Made by :class:`tvmrt.Model` for VM artefacts."""

    #: The model's kind in the Open Inference Protocol's metadata.
    platform = "tvm_relay_vm"

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        lib: PathLike | None = None,
        code: PathLike | None = None,
        device: Any = "auto",
        num_threads: int | None = None,
        input_specs: Sequence[TensorInfo] | Mapping[str, tuple[Sequence[int], str]] | None = None,
        function: str = "main",
        map_constants: bool = False,
        plugins: Sequence[PathLike] | PathLike | None = None,
        params: PathLike | Mapping[str, Any] | None = None,
        **unused: Any,
    ) -> None:
        load_plugins(plugins)
        # Graph models' name for weights mapped from one prepared file: the same here.
        map_constants = map_constants or bool(unused.pop("map_params", False))
        if unused.get("share_weights_with") is not None:
            raise errors.InvalidValueError(
                f"{path or lib}: a Relay VM model is no variant of a graph model; its executable runs every "
                "batch size and sequence length itself, so load it as a Model of its own"
            )
        bad = sorted(k for k, v in unused.items() if v not in (None, False))
        if bad:
            raise errors.InvalidValueError(f"a Relay VM model takes no {', '.join(bad)} (graph-executor options)")
        art = locate_vm(path, lib, code)
        if art is None:
            raise errors.InvalidValueError(f"{path or lib}: not a Relay VM model")
        self.artefacts = art
        self._closed = False
        self._lock = threading.Lock()
        self._local = threading.local()
        self._free: list[_VM] = []
        self.num_threads = num_threads
        self.function = function
        library = _ffi.load_module(str(art.lib))
        if art.code is not None:
            self._exe = _ffi.global_function("runtime.Load_Executable")(art.code.read_bytes(), library)
        else:
            self._exe = library
        key = _ffi.global_function("runtime.ModuleGetTypeKey")(self._exe)
        if key not in (RELAY_KEY, *RELAX_KEYS):
            raise errors.InvalidValueError(f"{art.lib}: its root module is a {key}, not a VM executable")
        #: Whether this is a Relax VM executable (TVM 0.19 to 0.27) rather than a Relay VM's.
        self.relax = key in RELAX_KEYS
        if self.relax:
            self.platform = "tvm_relax_vm"
        #: The aligned constants file mapped (``map_constants=True``), and whether this load wrote it.
        self.constants_file: Path | None = None
        self.made_constants_file = False
        if map_constants:
            self.constants_file = constants_file(art)
            made = _ffi.method(self._exe, "tvmrt.map_constants")(str(self.constants_file))
            self.made_constants_file = bool(made)
        self.library_path = str(art.lib)
        self.description: dict[str, Any] = json.loads(_ffi.method(self._exe, "tvmrt.describe")())
        funcs = {f["name"]: f for f in self.description["functions"]}
        if function not in funcs:
            raise errors.InvalidKeyError(f"no function {function!r} (the executable's: {', '.join(funcs)})")
        every_param: list[str] = list(funcs[function]["params"])
        described = {
            i["name"]: (tuple(i["shape"]), i["dtype"])
            for i in funcs[function].get("inputs", [])
            if i["dtype"] and i["shape"] is not None
        }
        if params is not None and not self.relax:
            raise errors.InvalidValueError(
                f"{art.lib}: params= binds a Relax function's parameters; a Relay VM executable holds its weights"
            )
        #: Parameters bound at load (``params=``): the runtime's arrays, passed to every call.
        self._bound: dict[str, _ffi.Handle] = _bound.bind(params, every_param, described) if params is not None else {}
        self._every_param = every_param
        #: The function's parameters a call gives (those ``params=`` did not bind), in order.
        self.params: list[str] = [p for p in every_param if p not in self._bound]
        self.device = device_of(device, self._exe)
        self._devices = [self.device] if self.device.type == _ffi.CPU else [self.device, _ffi.Device(_ffi.CPU, 0)]
        recorded = _read_meta(art.meta) if art.meta is not None else None
        if recorded is None and self.relax:
            # A Relax executable's own checks say its parameters' dtypes and shapes (-1: symbolic).
            checks = [i for i in funcs[function].get("inputs", []) if i["name"] not in self._bound]
            if checks and all(i["dtype"] and i["shape"] is not None for i in checks):
                recorded = ([TensorInfo(i["name"], tuple(i["shape"]), i["dtype"]) for i in checks], [])
        #: The inputs' names, dtypes and shapes: from ``input_specs``, else the ``.meta`` beside
        #: the model, else unknown (shape None, dtype "": the executable records none).
        given = input_specs if input_specs is not None else (recorded[0] if recorded is not None else None)
        self.inputs: list[TensorInfo] = self._specs(given)
        #: The outputs (a tuple result flattened), as the ``.meta`` records them; [] when unknown.
        self.outputs: list[TensorInfo] = recorded[1] if recorded is not None else []
        self.weights: list[TensorInfo] = []
        _VM(self)  # made once now: a missing kernel or device is an error at load
        if not self.described:
            example = ", ".join(f"{p!r}: ((None, ...), 'float32')" for p in self.params)
            errors.warn(
                errors.UncheckedInputsWarning(
                    f"{art.lib}: the executable records no input shapes or dtypes, and no input_specs= or .meta "
                    "gives them, so inputs are checked only by what the kernels check (a wrong size along a fixed "
                    f"axis is read as it lies, as by upstream's runtime): give input_specs={{{example}}} with the "
                    "model's shapes (None where an axis varies) to have every input checked and described "
                    "(docs/dynamic-shapes.md)"
                )
            )
        _fork.track(self)

    @property
    def described(self) -> bool:
        """Whether every input's dtype and rank are known (``input_specs`` or a ``.meta``)."""
        return all(t.shape is not None and t.dtype for t in self.inputs)

    def _specs(self, given: Any) -> list[TensorInfo]:
        if given is None:
            return [TensorInfo(p, None, "") for p in self.params]
        if isinstance(given, Mapping):
            specs = [
                TensorInfo(n, tuple(-1 if d is None else int(d) for d in s), str(t)) for n, (s, t) in given.items()
            ]
        else:
            specs = list(given)
        names = [s.name for s in specs]
        if names != self.params:
            raise errors.InvalidValueError(f"input_specs name {names}; the function takes {self.params}")
        return specs

    # VMs to threads and sessions.
    def _check_open(self) -> None:
        if self._closed:
            raise errors.RuntimeFailure("the model is closed")

    def _vm(self) -> _VM:
        self._check_open()
        vm: _VM | None = getattr(self._local, "vm", None)
        if vm is None:
            with self._lock:
                vm = self._free.pop() if self._free else None
            vm = vm or _VM(self)
            self._local.vm = vm
            # When the thread ends, its VM serves another (the model held weakly: no cycle).
            weakref.finalize(threading.current_thread(), VMModel._give_back, weakref.ref(self), vm)
        return vm

    @staticmethod
    def _give_back(model: weakref.ref[VMModel], vm: _VM) -> None:
        m = model()
        if m is not None:
            with m._lock:
                if not m._closed:
                    m._free.append(vm)

    def _feed(self, args: Sequence[Any], named: Mapping[str, Any], cast: _tensors.Cast) -> list[np.ndarray]:
        if len(args) == 1 and isinstance(args[0], Mapping):
            named = {**args[0], **named}
            args = ()
        elif len(args) == 1 and isinstance(args[0], (list, tuple)) and len(self.params) > 1:
            args = tuple(args[0])
        if len(args) + len(named) != len(self.params):
            raise errors.InvalidValueError(
                f"{self.function} takes {len(self.params)} inputs ({', '.join(self.params)}); "
                f"{len(args) + len(named)} given"
            )
        values: list[Any] = list(args) + [None] * (len(self.params) - len(args))
        for k, v in named.items():
            if k not in self.params:
                raise errors.InvalidKeyError(f"no input named {k!r} (inputs: {', '.join(self.params)})")
            i = self.params.index(k)
            if values[i] is not None:
                raise errors.InvalidValueError(f"input {k!r} given twice")
            values[i] = v
        out = []
        for spec, v in zip(self.inputs, values):
            if spec.dtype and spec.shape is not None:
                arr = _tensors.as_input(v, _tensors.np_dtype(spec.dtype), spec.name, cast)
                if len(arr.shape) != len(spec.shape) or any(s not in (-1, a) for s, a in zip(spec.shape, arr.shape)):
                    raise errors.InvalidValueError(
                        f"input {spec.name!r} is {spec.dtype}{list(spec.shape)}, got {list(arr.shape)}"
                    )
            else:
                raw, _ = _tensors._as_array(v, f"input {spec.name!r}")
                arr = _tensors.as_input(v, raw.dtype.newbyteorder("="), spec.name, cast)
            out.append(arr)
        return out

    def _with_bound(self, arrays: list[np.ndarray]) -> list[Any]:
        """Every parameter of the function, in order: the inputs given, the bound ones between."""
        if not self._bound:
            return list(arrays)
        given = iter(arrays)
        return [self._bound[p] if p in self._bound else next(given) for p in self._every_param]

    def run(self, *args: Any, cast: _tensors.Cast = False, nested: bool = False, **named: Any) -> Any:
        """Runs the function on inputs given in order, by name, or as a mapping; returns its
        outputs as numpy arrays (flattened, or ``nested``)."""
        quick = self.relax and not named and not nested and cast is False
        if quick:
            got = self._quick(args)
            if got is not None:
                return got
        fed = self._feed(args, named, cast)
        vm = self._vm()
        result = vm.run(self.function, self._with_bound(fed))
        flat: list[np.ndarray] = []
        tree = _unpack(result, flat, _ARRAY if self.relax else _ADT)
        if quick and len(fed) == len(args) and all(f is a for f, a in zip(fed, args)):
            self._learn(vm, fed, flat)
        return tree if nested else flat

    #: How many input shapes a VM keeps quick requests for (a model of many sequence lengths
    #: takes the general path for the rest).
    QUICK_SHAPES = 64

    def _quick(self, args: tuple[Any, ...]) -> list[np.ndarray] | None:
        """The plainest Relax request (numpy arrays in order, of shapes an earlier request had) as
        one call from C; None for the general path."""
        vm = self._vm()
        try:
            key = tuple(a.shape for a in args)
        except AttributeError:
            return None
        q = vm.quick.get(key)
        if q is None:
            return None
        got, holds = q.request(args)
        if not holds:
            vm.quick[key] = None
        return got

    def _learn(self, vm: _VM, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Prepares the quick request for inputs of these shapes (the general path just ran it)."""
        key = tuple(a.shape for a in inputs)
        if key in vm.quick or len(vm.quick) >= self.QUICK_SHAPES:
            return
        q = _Quick(vm, self, inputs, outputs)
        vm.quick[key] = q if q.fast is not None else None

    __call__ = run

    def benchmark(
        self,
        *args: Any,
        repeat: int = 5,
        number: int = 5,
        warmup: int = 1,
        min_repeat_ms: int | None = None,
        end_to_end: bool = False,
        func_name: str | None = None,
        **named: Any,
    ) -> BenchmarkResult:
        """Seconds per run, measured from Python, on the inputs given as to :meth:`run`
        (``benchmark(x)``, ``benchmark(data=x)``). TVM's VirtualMachine form is taken too: a device
        first (the model's), ``func_name``, and ``min_repeat_ms`` / ``end_to_end`` (every run here
        is timed from Python, as end to end). A VM keeps no inputs between calls: without them, the
        error says what to pass."""
        named_device = [named.pop(k) for k in ("device", "dev") if k in named]
        if named_device or (args and looks_like_device(args[0])):
            given = device_of(named_device[0] if named_device else args[0], None)
            if given != self.device:
                raise errors.InvalidValueError(f"benchmark: the model runs on {self.device}, not {given}")
            args = args if named_device else args[1:]
        if func_name is not None and func_name != self.function:
            raise errors.InvalidValueError(
                f"benchmark: func_name {func_name!r}: this model times {self.function!r} (function= at load)"
            )
        for name in TVM_LOOP_TUNING:
            named.pop(name, None)
        del min_repeat_ms, end_to_end
        if not args and not named and self.params:
            example = ", ".join(f"{p}=..." for p in self.params)
            raise errors.InvalidValueError(
                f"benchmark: no inputs; a VM keeps none between calls, so give them as run takes them: "
                f"benchmark({example}, repeat=5, number=5)"
            )
        arrays = self._with_bound(self._feed(args, named, False))
        vm = self._vm()
        return time_runs(lambda: vm.run(self.function, arrays), repeat, number, warmup)

    def profile(self, *args: Any, **named: Any) -> Report:
        """Profiles a run as TVM's profiler VM does (three warm-up runs, then every kernel and
        allocation timed)."""
        arrays = self._with_bound(self._feed(args, named, False))
        vm = _VM(self, debug=True)
        views = [a if isinstance(a, _ffi.Handle) else _tensors.TensorView(a) for a in arrays]
        _ffi.method(vm.module, "set_input")(self.function, *views)
        return Report(_ffi.method(vm.module, "profile")(self.function, None))

    def memory_usage(self) -> dict[str, Any]:
        """The constants (host, device copies) and the storage pools every VM draws from, in bytes."""
        self._check_open()
        usage: dict[str, Any] = json.loads(_ffi.method(self._exe, "tvmrt.memory_usage")())
        return usage

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._free.clear()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"tvmrt.VMModel({self.library_path!r}, device={self.device!r}, inputs={self.params})"
