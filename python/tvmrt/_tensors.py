"""numpy arrays and DLPack producers as the runtime's tensors (``DLTensor`` over their memory)."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import errors
from ._ffi import CPU, DLDataType, DLDevice, DLTensor, shape_tuple

_CODES = {"i": 0, "u": 1, "f": 2}


def dl_dtype(dtype: np.dtype) -> DLDataType:
    """The DLPack type of a numpy dtype (``bool`` as TVM's: unsigned, 1 bit, one byte a value)."""
    if dtype.kind == "b":
        return DLDataType(1, 1, 1)
    code = _CODES.get(dtype.kind)
    if code is None:
        raise errors.InvalidTypeError(f"the runtime takes no arrays of dtype {dtype}")
    return DLDataType(code, dtype.itemsize * 8, 1)


def np_dtype(name: str) -> np.dtype:
    if name in ("bool", "uint1"):
        return np.dtype(np.bool_)
    try:
        return np.dtype(name)
    except TypeError:
        raise errors.InvalidTypeError(f"no numpy dtype for {name}") from None


def as_host_array(value: Any, dtype: str | np.dtype) -> np.ndarray:
    """`value` as a C-contiguous numpy array over host memory, without a copy when it already is
    one: a numpy array as it is (its dtype the runtime's to check), a DLPack producer on the CPU
    through ``np.from_dlpack``, anything else (lists, scalars) converted to the input's dtype."""
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "__dlpack__"):
        device = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (CPU, 0)
        if int(device[0]) not in (CPU, 3):  # CPU, or CUDA-pinned host memory
            raise errors.InvalidTypeError(
                f"an input on DLPack device {tuple(device)}: this package takes host (CPU) arrays"
            )
        arr = np.from_dlpack(value)
    else:
        arr = np.asarray(value, dtype=dtype if isinstance(dtype, np.dtype) else np_dtype(dtype))
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


class TensorView:
    """A DLTensor over a numpy array's memory, kept alive with the array."""

    __slots__ = ("array", "shape", "tensor")

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.shape = shape_tuple(array.shape)
        t = DLTensor()
        t.data = array.ctypes.data
        t.device = DLDevice(CPU, 0)
        t.ndim = array.ndim
        t.dtype = dl_dtype(array.dtype)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        t.byte_offset = 0
        self.tensor = t


def view_of_memory(address: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any) -> np.ndarray:
    """A numpy array over `address` (host memory the runtime keeps alive through `owner`), with no
    copy: `owner` stays alive as long as the array (or any view of it) does."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(address)
    # The ctypes array is the numpy array's base: it keeps `owner` (and so the memory) alive.
    buf._owner = owner  # type: ignore[attr-defined]
    return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)
