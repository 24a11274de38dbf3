"""The bundled runtime library through its C API (TVM's classic packed-function API), by ctypes.

The library is loaded once, locally (``RTLD_LOCAL``) and under a file name of its own, so a process
that also imports TVM's own package (which loads its runtime globally) keeps the two apart: every
call here goes through this handle, never through a symbol looked up globally. ctypes releases the
GIL around each foreign call, so a model runs while other Python threads go on.

Only what any host of the C API could call is used: modules, packed functions, arrays.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from . import errors

try:
    # A request's call made from C (the buffer protocol instead of ctypes' per-array costs); not
    # there when the package was built without Python's headers, and unloadable where the stable
    # ABI is not (free-threaded builds, PyPy): then every call goes through ctypes.
    from . import _fast  # type: ignore[attr-defined]
except ImportError as e:
    # A release wheel always carries the module: where it must load (the wheels' tests, a
    # deployment that counts on it), a module that does not is an error, not a quiet fall-back.
    if os.environ.get("TVMRT_REQUIRE_FAST_CALLS") == "1":
        raise ImportError(
            f"tvmrt: the compiled call module (tvmrt._fast) does not load here ({e}); "
            "TVMRT_REQUIRE_FAST_CALLS=1 asks for it"
        ) from e
    _fast = None
if os.environ.get("TVMRT_NO_FAST_CALLS") == "1":  # for comparing the two, and testing the ctypes path
    _fast = None

# Packed-call type codes (c_runtime_api.h).
INT, FLOAT, HANDLE, NULL, DTYPE, DEVICE, DLTENSOR, OBJECT, MODULE, FUNC, STR, BYTES, NDARRAY = (
    0,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    12,
    13,
)

CPU, OPENCL = 1, 4
# TVM's names of DLPack's device types (what `tvm.device(name)` takes), for messages and reprs.
DEVICE_NAMES = {
    CPU: "cpu",
    2: "cuda",
    3: "cuda_host",
    OPENCL: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    11: "rocm_host",
    12: "ext_dev",
    13: "cuda_managed",
    14: "oneapi",
    15: "webgpu",
    16: "hexagon",
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class TVMValue(ctypes.Union):
    _fields_ = [
        ("v_int64", ctypes.c_int64),
        ("v_float64", ctypes.c_double),
        ("v_handle", ctypes.c_void_p),
        ("v_str", ctypes.c_char_p),
        ("v_type", DLDataType),
        ("v_device", DLDevice),
    ]


class TVMByteArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


def library_path() -> str:
    """The path of the runtime library this package bundles: a drop-in ``libtvm_runtime.so``.

    TVM's own Python package runs on it with ``TVM_USE_RUNTIME_LIB=1`` and ``TVM_LIBRARY_PATH`` set
    to its folder (in a process of its own: the compiler half of TVM needs its own library).
    """
    override = os.environ.get("TVMRT_LIBRARY")
    if override:
        return override
    return str(Path(__file__).resolve().parent / "_lib" / "libtvm_runtime.so")


class _Lib:
    """The loaded library and the signatures of the functions used."""

    def __init__(self, path: str) -> None:
        if not os.path.exists(path):
            raise errors.TVMRTError(f"the runtime library is missing: {path} (a broken install?)")
        self.cdll = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        c = self.cdll
        vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        c.TVMGetLastError.restype = ctypes.c_char_p
        c.TVMGetLastError.argtypes = []
        sigs: dict[str, list[Any]] = {
            "TVMFuncGetGlobal": [ctypes.c_char_p, ctypes.POINTER(vp)],
            "TVMFuncCall": [
                vp,
                ctypes.POINTER(TVMValue),
                ctypes.POINTER(i32),
                i32,
                ctypes.POINTER(TVMValue),
                ctypes.POINTER(i32),
            ],
            "TVMFuncFree": [vp],
            "TVMModLoadFromFile": [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(vp)],
            "TVMModGetFunction": [vp, ctypes.c_char_p, i32, ctypes.POINTER(vp)],
            "TVMModFree": [vp],
            "TVMObjectFree": [vp],
            "TVMArrayFree": [vp],
            "TVMArrayAlloc": [ctypes.POINTER(i64), i32, i32, i32, i32, i32, i32, ctypes.POINTER(vp)],
            "TVMArrayCopyToBytes": [vp, vp, ctypes.c_size_t],
        }
        for name, argtypes in sigs.items():
            f = getattr(c, name)
            f.argtypes = argtypes
            f.restype = ctypes.c_int
        self._kind: Callable[[], str] | None = None

    def check(self, rc: int) -> None:
        if rc != 0:
            raise self.last_error()

    def last_error(self) -> errors.TVMRTError:
        text = (self.cdll.TVMGetLastError() or b"").decode("utf-8", "replace")
        kind = self.last_kind()
        return errors.from_runtime(text, kind)

    def last_kind(self) -> str:
        """The finer kind of the thread's last error (`tvmrt.LastErrorKind`); asked right after a
        failure, before anything else can fail on this thread."""
        handle = ctypes.c_void_p()
        if self.cdll.TVMFuncGetGlobal(b"tvmrt.LastErrorKind", ctypes.byref(handle)) != 0 or not handle.value:
            return "TVMError"
        value, code = TVMValue(), ctypes.c_int()
        rc = self.cdll.TVMFuncCall(handle, None, None, 0, ctypes.byref(value), ctypes.byref(code))
        kind = value.v_str.decode() if rc == 0 and code.value == STR and value.v_str else "TVMError"
        self.cdll.TVMFuncFree(handle)
        return kind


_lib: _Lib | None = None
_lib_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # Another thread may have been loading the library: the child loads it itself if need be.
    global _lib_lock
    _lib_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def lib() -> _Lib:
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Lib(library_path())
    return _lib


class Handle:
    """A reference the runtime handed out (module, function, object or array), released once."""

    __slots__ = ("value", "code", "__weakref__")

    def __init__(self, value: int, code: int) -> None:
        self.value = value
        self.code = code

    def __del__(self) -> None:
        v, self.value = self.value, 0
        if not v or _lib is None:
            return
        free = {MODULE: _lib.cdll.TVMModFree, FUNC: _lib.cdll.TVMFuncFree, NDARRAY: _lib.cdll.TVMArrayFree}
        free.get(self.code, _lib.cdll.TVMObjectFree)(ctypes.c_void_p(v))


class Function:
    """A packed function: called with ints, floats, strings, bytes, handles, devices and tensors."""

    __slots__ = ("handle", "name")

    def __init__(self, handle: Handle, name: str) -> None:
        self.handle = handle
        self.name = name

    def __call__(self, *args: Any) -> Any:
        n = len(args)
        values = (TVMValue * max(n, 1))()
        codes = (ctypes.c_int * max(n, 1))()
        keep: list[Any] = []
        for i, a in enumerate(args):
            codes[i] = _pack(a, values[i], keep)
        ret, ret_code = TVMValue(), ctypes.c_int()
        lb = lib()
        rc = lb.cdll.TVMFuncCall(
            ctypes.c_void_p(self.handle.value), values, codes, n, ctypes.byref(ret), ctypes.byref(ret_code)
        )
        if rc != 0:
            raise lb.last_error()
        return _unpack(ret, ret_code.value)


class PreparedCall:
    """A packed call whose argument arrays are made once and refilled for each call: for the
    calls a run makes over and over (set an input, run, copy an output out). Not thread-safe: one
    per executor, which one caller uses at a time.

    The call goes through a function object of its own that declares no argument types, given
    ctypes objects made once: ctypes then passes each as it is, where declared types (or plain
    integers) would have it convert six arguments at every call (a third of a microsecond against
    a microsecond and a half). Like every ctypes call, it releases the GIL."""

    __slots__ = ("_args", "_codes", "_fn", "_raw", "ret", "ret_code", "values")

    def __init__(self, fn: Function, codes: Sequence[int]) -> None:
        n = len(codes)
        self._fn = fn  # keeps the function alive
        self.values = (TVMValue * max(n, 1))()
        self._codes = (ctypes.c_int * max(n, 1))(*codes)
        self.ret = TVMValue()
        self.ret_code = ctypes.c_int()
        cdll = lib().cdll
        raw = cdll._FuncPtr(("TVMFuncCall", cdll))
        raw.restype = ctypes.c_int
        self._raw = raw
        self._args = (
            ctypes.c_void_p(fn.handle.value),
            self.values,
            self._codes,
            ctypes.c_int(n),
            ctypes.byref(self.ret),
            ctypes.byref(self.ret_code),
        )

    def __call__(self) -> None:
        if self._raw(*self._args) != 0:
            raise lib().last_error()

    def result(self) -> Any:
        """What the last call returned (a handle among it is the caller's now)."""
        return _unpack(self.ret, self.ret_code.value)

    def bound(self, tensors: Sequence[ctypes.Structure], written: int, plan: tuple[Any, ...] = ()) -> Any:
        """This call made from C (``tvmrt._fast``) with `tensors` (DLTensors among its arguments)
        bound to the arrays given at each call, in order, those from index `written` on written
        into: ``bound(arrays...)`` returns the status (raising BufferError, ValueError or
        TypeError, before the call, for an array without a C-contiguous buffer, or a read-only
        one to write). With `plan` (numpy's ndarray and empty, the inputs' dtypes and shapes, the
        outputs'), ``bound.request(inputs, outputs or None)`` also checks the inputs and makes
        the outputs (see tvmrt/_fast.c). None where that module is not there; the caller keeps
        this object and the tensors alive as long as the result."""
        if _fast is None:
            return None
        fn = ctypes.cast(self._raw, ctypes.c_void_p).value
        try:
            call = _fast.Call(
                fn,
                self._args[0].value,
                ctypes.addressof(self.values),
                ctypes.addressof(self._codes),
                self._args[3].value,
                ctypes.addressof(self.ret),
                ctypes.addressof(self.ret_code),
                tuple(ctypes.addressof(t) for t in tensors),
                written,
                *([plan] if plan else []),
            )
        except ValueError:  # more arrays than it binds (64): by ctypes
            return None
        return call


def call_bound(call: Callable[..., int], *arrays: Any) -> bool:
    """Makes a call `PreparedCall.bound` made with `arrays`: True when it ran, False when an array
    has no buffer it binds (bfloat16, say), for the caller to go by ctypes; the runtime's failure
    raises."""
    try:
        status = call(*arrays)
    except (BufferError, ValueError, TypeError):
        return False
    if status != 0:
        raise lib().last_error()
    return True


class Device:
    """A device argument (type and ordinal)."""

    __slots__ = ("type", "id")

    def __init__(self, device_type: int, device_id: int = 0) -> None:
        self.type = device_type
        self.id = device_id

    def __repr__(self) -> str:
        return f"{DEVICE_NAMES.get(self.type, str(self.type))}({self.id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.type, self.id) == (other.type, other.id)

    def __hash__(self) -> int:
        return hash((self.type, self.id))


def _pack(a: Any, v: TVMValue, keep: list[Any]) -> int:
    if a is None:
        v.v_handle = None
        return NULL
    if isinstance(a, bool) or isinstance(a, int):
        v.v_int64 = int(a)
        return INT
    if isinstance(a, float):
        v.v_float64 = a
        return FLOAT
    if isinstance(a, str):
        # C reads a string up to its first NUL: the runtime would see another name.
        b = c_string(a)
        keep.append(b)
        v.v_str = b
        return STR
    if isinstance(a, (bytes, bytearray, memoryview)):
        buf = bytes(a)
        arr = TVMByteArray(ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p), len(buf))
        keep.extend((buf, arr))
        v.v_handle = ctypes.addressof(arr)
        return BYTES
    if isinstance(a, Handle):
        v.v_handle = a.value
        return a.code
    if isinstance(a, Function):
        v.v_handle = a.handle.value
        return FUNC
    if isinstance(a, Device):
        v.v_device = DLDevice(a.type, a.id)
        return DEVICE
    if isinstance(a, DLTensor):
        keep.append(a)
        v.v_handle = ctypes.addressof(a)
        return DLTENSOR
    tensor = getattr(a, "tensor", None)
    if isinstance(tensor, DLTensor):
        # A view over an array (`_tensors.TensorView`): kept, with the memory it points at, until
        # the call returns.
        keep.append(a)
        v.v_handle = ctypes.addressof(tensor)
        return DLTENSOR
    raise errors.InvalidTypeError(f"cannot pass a {type(a).__name__} to the runtime")


def _unpack(v: TVMValue, code: int) -> Any:
    if code == INT:
        return v.v_int64
    if code == FLOAT:
        return v.v_float64
    if code == NULL:
        return None
    if code == STR:
        return (v.v_str or b"").decode("utf-8", "replace")
    if code == BYTES:
        arr = ctypes.cast(v.v_handle, ctypes.POINTER(TVMByteArray)).contents
        return ctypes.string_at(arr.data, arr.size) if arr.size else b""
    if code == FUNC:
        return Function(Handle(v.v_handle or 0, code), "a returned function")
    if code in (OBJECT, MODULE, NDARRAY):
        return Handle(v.v_handle or 0, code)
    if code == DEVICE:
        return Device(v.v_device.device_type, v.v_device.device_id)
    if code == HANDLE:
        return v.v_handle
    raise errors.InvalidTypeError(f"the runtime returned a value of type code {code}")


def c_string(text: str) -> bytes:
    """`text` for a C string argument: refused if it holds a NUL (C would read a shorter one)."""
    if "\0" in text:
        raise errors.InvalidValueError(f"{text!r}: a name or path with a NUL character")
    return text.encode()


def global_function(name: str) -> Function:
    lb = lib()
    h = ctypes.c_void_p()
    lb.check(lb.cdll.TVMFuncGetGlobal(c_string(name), ctypes.byref(h)))
    if not h.value:
        raise errors.TVMRTError(f"the runtime has no global function {name}")
    return Function(Handle(h.value, FUNC), name)


def load_module(path: str, fmt: str = "") -> Handle:
    lb = lib()
    h = ctypes.c_void_p()
    lb.check(lb.cdll.TVMModLoadFromFile(c_string(path), c_string(fmt), ctypes.byref(h)))
    return Handle(h.value or 0, MODULE)


def module_function(module: Handle, name: str, query_imports: bool = True) -> Function | None:
    lb = lib()
    h = ctypes.c_void_p()
    lb.check(
        lb.cdll.TVMModGetFunction(ctypes.c_void_p(module.value), c_string(name), int(query_imports), ctypes.byref(h))
    )
    return Function(Handle(h.value, FUNC), name) if h.value else None


def method(module: Handle, name: str) -> Function:
    """Function `name` of `module` itself (not its imports), which it must have."""
    f = module_function(module, name, False)
    if f is None:
        raise errors.RuntimeFailure(f"the module has no function {name}")
    return f


def array_tensor(array: Handle) -> DLTensor:
    """The DLTensor an NDArray handle points at (valid while the handle lives)."""
    return ctypes.cast(array.value, ctypes.POINTER(DLTensor)).contents


def shape_tuple(values: Sequence[int]) -> Any:
    """A C array of int64 for a DLTensor's shape."""
    return (ctypes.c_int64 * max(len(values), 1))(*values)
