"""Params files (TVM's ``save_param_dict`` format) as numpy arrays by name, and back: what
``tvm.relay.load_param_dict`` and ``save_param_dict`` did, with no TVM installed."""

from __future__ import annotations

import struct
from typing import Mapping

import numpy as np

from . import errors
from ._artifacts import _NDARRAY_MAGIC, _PARAMS_MAGIC, PathLike, read_params, read_params_file
from ._tensors import as_input, dl_dtype


def load_params(params: PathLike | bytes) -> dict[str, np.ndarray]:
    """The weights of a params file (or of its bytes) as numpy arrays by name, in file order. A
    prepared file (:meth:`Model.prepare_params`) gives its weights; what it adds is left out."""
    if isinstance(params, (bytes, bytearray, memoryview)):
        return read_params(params)
    return read_params(read_params_file(params))


def save_params(arrays: Mapping[str, object]) -> bytes:
    """A params blob of `arrays` (name to array), as ``tvm.relay.save_param_dict`` writes it:
    what :class:`Model` takes as ``params=`` and :meth:`Model.load_params` loads."""
    names = list(arrays)
    out = [struct.pack("<QQQ", _PARAMS_MAGIC, 0, len(names))]
    for n in names:
        if not isinstance(n, str):
            raise errors.InvalidTypeError(f"a params name is a str, not a {type(n).__name__}")
        b = n.encode()
        out.append(struct.pack("<Q", len(b)) + b)
    out.append(struct.pack("<Q", len(names)))
    for n in names:
        value = arrays[n]
        dtype = value.dtype if isinstance(value, np.ndarray) else np.asarray(value).dtype
        arr = as_input(value, dtype.newbyteorder("="), n)
        dl = dl_dtype(arr.dtype)
        out.append(struct.pack("<QQiiiBBH", _NDARRAY_MAGIC, 0, 1, 0, arr.ndim, dl.code, dl.bits, dl.lanes))
        out.append(struct.pack(f"<{arr.ndim}q", *arr.shape))
        out.append(struct.pack("<q", arr.nbytes))
        out.append(arr.tobytes())
    return b"".join(out)
