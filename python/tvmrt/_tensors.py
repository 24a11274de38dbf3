"""What an input may be, and how it reaches the runtime: one rule for every route (``run``,
``set_input``, sessions, Serve).

An input reaches the kernels as a C-contiguous array of the input's dtype in the machine's byte
order, or it is refused with an error that says why; never as bytes read another way than they
were written. So:

- numpy arrays of the input's dtype are taken as they are (without a copy when they are already
  C-contiguous and native-endian); another byte order is converted (the values kept), strided or
  Fortran-ordered memory made contiguous, read-only arrays read;
- arrays of another dtype are refused (a ``TypeError`` naming both and the ``cast=True`` that casts
  as TVM's ``set_input`` did), or converted when the caller asked: ``cast="safe"`` for casts that
  keep every value (``int8`` to ``float32``), ``cast=True`` for any cast between numbers;
- Python numbers and nested lists (which have no dtype of their own) become the input's dtype when
  every value survives the conversion (floats to a float input, integers in range to any numeric
  input), else they are refused;
- DLPack producers on the host (PyTorch, JAX, CuPy's pinned memory...) are read through
  ``np.from_dlpack``, objects with ``__array__`` or the buffer protocol through ``np.asarray``, then
  as numpy arrays; masked arrays, object, string, complex and structured arrays are refused.
"""

from __future__ import annotations

import ctypes
from typing import Any, Union, cast

import numpy as np

from . import _ffi, errors
from ._ffi import CPU, DLDataType, DLDevice, DLTensor, shape_tuple

# DLPack type codes by numpy kind (bool apart: TVM's is unsigned, 1 bit, one byte a value).
_CODES = {"i": 0, "u": 1, "f": 2}
_BFLOAT = 4
# `cast`: False (the dtype must match), "safe" (value-preserving casts), True (any numeric cast).
Cast = Union[bool, str]


def _bfloat16() -> np.dtype | None:
    """ml_dtypes' bfloat16 (what JAX and others use; numpy has none), when it is installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    bf16: np.dtype = np.dtype(ml_dtypes.bfloat16)
    return bf16


def dl_dtype(dtype: np.dtype) -> DLDataType:
    """The DLPack type of a numpy dtype."""
    if dtype.kind == "b":
        return DLDataType(1, 1, 1)
    if dtype.name == "bfloat16":
        return DLDataType(_BFLOAT, 16, 1)
    code = _CODES.get(dtype.kind)
    if code is None or dtype.itemsize > 8:
        raise errors.InvalidTypeError(f"the runtime takes no arrays of dtype {dtype}")
    return DLDataType(code, dtype.itemsize * 8, 1)


def address(arr: np.ndarray) -> int:
    """The address of `arr`'s first byte, the cheapest way numpy allows: through the buffer of a
    writable array (a third of ``arr.ctypes.data``'s cost), else its array interface. The caller
    keeps `arr` alive while the address is used."""
    if arr.flags.writeable and arr.size:
        try:
            # (Any: numpy's stubs do not say that an ndarray is a buffer.)
            return ctypes.addressof(ctypes.c_char.from_buffer(cast(Any, arr)))
        except (ValueError, TypeError, BufferError):  # a dtype the buffer protocol has no code for
            pass
    addr: int = arr.__array_interface__["data"][0]
    return addr


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a TVM dtype name (``bfloat16`` through ml_dtypes)."""
    if name == "uint1":  # TVM's other name for bool ("bool" numpy reads itself)
        return np.dtype(np.bool_)
    if name == "bfloat16":
        bf16 = _bfloat16()
        if bf16 is None:
            raise errors.InvalidTypeError("a bfloat16 tensor needs the ml_dtypes package (pip install ml_dtypes)")
        return bf16
    try:
        return np.dtype(name)
    except TypeError:
        raise errors.InvalidTypeError(f"no numpy dtype for {name}") from None


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf" or dtype.name == "bfloat16"


def _as_array(value: Any, what: str) -> tuple[np.ndarray, bool]:
    """`value` as a numpy array, and whether it came from a Python literal (numbers, lists),
    which has no dtype of its own."""
    if isinstance(value, np.ma.MaskedArray):
        raise errors.InvalidTypeError(f"{what}: a masked array (fill it first: np.ma.filled(x, value))")
    if isinstance(value, np.ndarray):
        return value, False
    if hasattr(value, "__dlpack__"):
        device = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (CPU, 0)
        if int(device[0]) not in (CPU, 3):  # CPU, or CUDA-pinned host memory
            raise errors.InvalidTypeError(
                f"{what}: an array on DLPack device {tuple(device)}; this package takes host (CPU) arrays"
            )
        try:
            return np.from_dlpack(value), False
        except (TypeError, BufferError, RuntimeError, ValueError) as e:
            raise errors.InvalidTypeError(f"{what}: numpy cannot read this array through DLPack ({e})") from None
    if isinstance(value, (bool, int, float, np.generic, list, tuple)):
        try:
            arr = np.asarray(value)
        except ValueError as e:  # ragged nesting
            raise errors.InvalidValueError(f"{what}: not an array of numbers ({e})") from None
        return arr, not isinstance(value, np.generic)
    try:
        return np.asarray(value), False  # __array__, __array_interface__, the buffer protocol
    except (TypeError, ValueError) as e:
        raise errors.InvalidTypeError(f"{what}: a {type(value).__name__} is not an array ({e})") from None


def _literal(arr: np.ndarray, want: np.dtype, what: str) -> np.ndarray:
    """Numbers written in Python as the input's dtype, when every value survives."""
    if arr.dtype.kind not in "biuf":
        raise errors.InvalidTypeError(f"{what} takes {want} numbers, got {arr.dtype} values")
    if want.kind == "b":
        if arr.dtype.kind != "b" and not np.isin(arr, (0, 1)).all():
            raise errors.InvalidValueError(f"{what} is bool: values other than 0 and 1 given")
        return arr.astype(want)
    if want.kind in "iu":
        if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
            raise errors.InvalidTypeError(f"{what} is {want}: non-integer values given")
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise errors.InvalidValueError(f"{what} is {want}: values outside [{info.min}, {info.max}] given")
    # Floats (Python's are float64) round to the input's float type, as a literal would.
    return arr.astype(want)


def _cast(arr: np.ndarray, want: np.dtype, cast: Cast, what: str) -> np.ndarray:
    if cast is not False and cast is not True and cast != "safe":
        raise errors.InvalidValueError(f"cast={cast!r}: use False, 'safe' or True")
    if not _numeric(arr.dtype):
        raise errors.InvalidTypeError(f"{what} is {want}, got an array of {arr.dtype}")
    if cast is True or (cast == "safe" and np.can_cast(arr.dtype, want, "safe")):
        return arr.astype(want)
    hint = f"convert it (x.astype('{want}'))" + ("" if cast == "safe" else " or pass cast=True")
    raise errors.InvalidTypeError(f"{what} is {want}, got {arr.dtype}", advice=hint)


def as_input(value: Any, want: np.dtype, name: str, cast: Cast = False) -> np.ndarray:
    """`value` as input `name` of dtype `want` takes it: C-contiguous, native byte order, of
    `want`'s dtype (see the module's rules), or an error saying why not."""
    what = f"input {name!r}"
    arr, literal = _as_array(value, what)
    if literal:
        arr = _literal(arr, want, what)
    if not arr.dtype.isnative:
        # Another byte order (np.load of a file written elsewhere, '>f4'): the values, in ours.
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype != want:
        arr = _cast(arr, want, cast, what)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


class TensorView:
    """A DLTensor over a numpy array's memory; the array (and the shape the tensor points at) live
    as long as the view, which the packed call keeps for its whole duration."""

    __slots__ = ("array", "shape", "tensor")

    def __init__(self, array: np.ndarray) -> None:
        if not (array.flags.c_contiguous and array.dtype.isnative):
            raise errors.InvalidValueError("internal: a tensor view needs a contiguous native array")
        self.array = array
        self.shape = shape_tuple(array.shape)
        t = DLTensor()
        t.data = address(array)
        t.device = DLDevice(CPU, 0)
        t.ndim = array.ndim
        t.dtype = dl_dtype(array.dtype)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        t.byte_offset = 0
        self.tensor = t


class ViewOwner:
    """What arrays handed out without a copy keep alive: the runtime's array and the executor
    whose memory they show. The executor is not given to another caller while one lives."""

    __slots__ = ("__weakref__", "executor", "handle")

    def __init__(self, handle: Any, executor: Any) -> None:
        self.handle = handle
        self.executor = executor


def view_of_memory(address: int, shape: tuple[int, ...], dtype: np.dtype, owner: ViewOwner) -> np.ndarray:
    """A numpy array over `address` (host memory the runtime keeps alive through `owner`), with no
    copy: `owner` stays alive as long as the array (or any view of it) does."""
    count = int(np.prod(shape, dtype=np.int64))
    buf = (ctypes.c_uint8 * max(count * dtype.itemsize, 1)).from_address(address)
    # The ctypes array is the numpy array's base: it keeps `owner` (and so the memory) alive.
    buf._owner = owner  # type: ignore[attr-defined]
    array: np.ndarray = np.frombuffer(cast(Any, buf), dtype=dtype, count=count).reshape(shape)
    return array


def array_to_numpy(handle: _ffi.Handle) -> np.ndarray:
    """A copy of a runtime NDArray (a handle the runtime returned) as a numpy array."""
    t = _ffi.array_tensor(handle)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    code, bits = t.dtype.code, t.dtype.bits
    if code == 1 and bits == 1:
        dtype = np.dtype(np.bool_)
    else:
        dtype = np_dtype({0: "int", 1: "uint", 2: "float", 4: "bfloat"}[code] + str(bits))
    out = np.empty(shape, dtype=dtype)
    lb = _ffi.lib()
    lb.check(lb.cdll.TVMArrayCopyToBytes(ctypes.c_void_p(handle.value), out.ctypes.data, out.nbytes))
    return out
