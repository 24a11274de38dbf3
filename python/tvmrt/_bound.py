"""Parameters a Relax function takes as arguments (``nn.Module`` exports: the weights follow the
data), bound once for every VM of a model: read from a params file, an ``.npz``, a mapping of
arrays, or MLC's ``tensor-cache.json`` (``ndarray-cache.json``) with its shards, and copied once
into the runtime's own arrays, which every call of every VM of the model passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import _ffi, _tensors, errors
from ._artifacts import PathLike, read_param_names, read_params_file
from .params import save_params

CACHE_NAMES = ("tensor-cache.json", "ndarray-cache.json")


def _tensor_cache(index: Path) -> dict[str, np.ndarray]:
    """MLC's weights: ``records`` of shards (``dataPath``, ``format: raw-shard``), each listing
    its tensors (``name``, ``shape``, ``dtype``, ``format: raw``, ``byteOffset``, ``nbytes``);
    the shards mapped read-only, each tensor a view of its bytes."""
    try:
        doc = json.loads(index.read_text())
        shards = doc["records"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise errors.InvalidValueError(f"{index}: not a tensor cache index ({e})") from None
    out: dict[str, np.ndarray] = {}
    for shard in shards:
        path = index.parent / shard["dataPath"]
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for r in shard["records"]:
            if r.get("format", "raw") != "raw":
                raise errors.InvalidValueError(f"{index}: {r['name']!r} is stored as {r['format']!r}; raw only")
            dtype = _tensors.np_dtype(r["dtype"])
            start, size = int(r["byteOffset"]), int(r["nbytes"])
            if start < 0 or start + size > data.size:
                raise errors.InvalidValueError(f"{index}: {r['name']!r} lies past the end of {path.name}")
            out[r["name"]] = data[start : start + size].view(dtype).reshape([int(d) for d in r["shape"]])
    return out


def _read(params: PathLike | Mapping[str, Any]) -> bytes | dict[str, Any]:
    """A params blob (a params file's bytes, used as they are) or arrays by name."""
    if isinstance(params, Mapping):
        return dict(params)
    path = Path(params)
    if path.is_dir():
        found = [path / n for n in CACHE_NAMES if (path / n).is_file()]
        if not found:
            raise errors.InvalidValueError(f"{path}: a folder of parameters holds {' or '.join(CACHE_NAMES)}")
        path = found[0]
    if path.name in CACHE_NAMES:
        return _tensor_cache(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    return read_params_file(path)


def bind(
    params: PathLike | Mapping[str, Any],
    function_params: list[str],
    described: Mapping[str, tuple[tuple[int, ...], str]],
) -> dict[str, _ffi.Handle]:
    """The runtime arrays of the function parameters `params` gives, by name, each checked
    against what the executable says the parameter is (`described`: name to shape and dtype)."""
    read = _read(params)
    names = read_param_names(read) if isinstance(read, bytes) else list(read)
    blob = read if isinstance(read, bytes) else save_params(read)
    arrays = _ffi.global_function("runtime.LoadParams")(blob)
    get = _ffi.global_function("runtime.MapGetItem")
    bound: dict[str, _ffi.Handle] = {}
    for name in names:
        if name not in function_params:
            raise errors.InvalidKeyError(
                f"the parameters given name {name!r}, which the function does not take "
                f"(its parameters: {', '.join(function_params)})"
            )
        value = get(arrays, name)
        if name in described:
            shape, dtype = described[name]
            t = _ffi.array_tensor(value)
            have = tuple(t.shape[i] for i in range(t.ndim))
            want = _tensors.dl_dtype(_tensors.np_dtype(dtype))
            same_type = (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (want.code, want.bits, want.lanes)
            if not same_type or len(have) != len(shape) or any(s not in (-1, h) for s, h in zip(shape, have)):
                raise errors.InvalidValueError(
                    f"parameter {name!r} is {dtype}{list(shape)}; the parameters given hold one of shape {list(have)}"
                    + ("" if same_type else " and another dtype")
                )
        bound[name] = value
    return bound
