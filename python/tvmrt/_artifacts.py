"""A model's artefacts: where the library, graph and params are, and what the graph says about its
inputs and outputs (read from the graph JSON itself, which the runtime validates when it plans)."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import numpy as np

from . import errors

PathLike = Union[str, "os.PathLike[str]"]

_PARAMS_MAGIC = 0xF7E58D4F05049CB7
_NDARRAY_MAGIC = 0xDD5E40F096B4A13F


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor of the model: an input, an output or a weight."""

    name: str
    #: -1 along an axis the model leaves open; None when not even the rank is known (a Relay VM
    #: executable records no parameter types: give ``input_specs=`` or a ``.meta``).
    shape: tuple[int, ...] | None
    #: "" when not known (as above).
    dtype: str

    def __repr__(self) -> str:
        if self.shape is None:
            return f"TensorInfo({self.name!r}, unknown: the executable records no types, give input_specs=)"
        return f"TensorInfo({self.name!r}, {self.dtype}{list(self.shape)})"

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape, which a graph model's tensors always have (a VM's may not: see ``shape``)."""
        if self.shape is None:
            raise errors.InvalidValueError(f"{self.name!r}: its shape is not known (give input_specs=)")
        return self.shape

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of the tensor (TVM's ``uint1`` is ``bool``; ``bfloat16`` is ml_dtypes')."""
        from ._tensors import np_dtype

        return np_dtype(self.dtype)

    def empty(self) -> np.ndarray:
        """A new array of the tensor's shape and dtype (for :meth:`tvmrt.Model.run_into`)."""
        return np.empty(self.dims, self.numpy_dtype)


@dataclass
class Artefacts:
    lib: Path
    graph: str | None
    params: Path | bytes | None
    #: The graph came from the folder, not from the caller: the library's own (an export_library
    #: factory carries it) comes first.
    graph_from_folder: bool = False
    #: The params came from the folder, not from the caller: used only when the library carries
    #: no weights of its own (as `tvmrt run` does).
    params_from_folder: bool = False
    #: What was looked for when no params were found (None: the caller named them, or said there
    #: are none).
    params_looked_for: str | None = None
    #: The files the model is read from (library, graph, params), for digests of what was loaded.
    files: list[Path] = field(default_factory=list)


# The names TVM's tutorials, tvmc and DLR give a params file, in the order they are preferred.
PARAMS_NAMES = ("params.bin", "params", "deploy_param.params")
LIBRARY_NAMES = ("lib.so", "deploy_lib.so", "mod.so")
GRAPH_NAMES = ("graph.json", "deploy_graph.json")


def _first_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def is_params_file(path: Path) -> bool:
    """Whether `path` is a regular file starting with TVM's params magic number."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and struct.unpack("<Q", head)[0] == _PARAMS_MAGIC


def find_params(folder: Path) -> Path | None:
    """The params file of a model folder: one of the usual names, else the one file of any name
    that starts with TVM's params magic number; several such files are an error naming them."""
    for n in PARAMS_NAMES:
        if (folder / n).is_file() and is_params_file(folder / n):
            return folder / n
    found = sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix not in (".so", ".json") and is_params_file(p)
    )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise errors.InvalidValueError(f"{folder}: several params files ({names}): name the one to use with params=")
    return found[0] if found else None


def params_looked_for(folder: Path | None) -> str:
    where = f" in {folder}" if folder is not None else ""
    return ", ".join(PARAMS_NAMES) + f", or any one file starting with TVM's params magic number{where}"


def locate(
    path: PathLike | None,
    lib: PathLike | None,
    graph: PathLike | str | None,
    params: PathLike | bytes | bool | None,
    weights_elsewhere: bool = False,
) -> Artefacts:
    """The artefacts named: a model folder (``lib.so``, with ``graph.json`` and a params file
    when the library does not carry them), a single ``export_library`` file, or each one
    explicitly (explicit ones win over the folder's). ``params=False`` says there are none."""
    folder: Path | None = None
    if path is not None:
        p = Path(path)
        if p.is_dir():
            folder = p
        elif p.is_file():
            if lib is not None:
                raise errors.InvalidValueError(f"give the library as the path or as lib=, not both ({p})")
            lib = p
        else:
            raise errors.InvalidValueError(f"{p}: no such model folder or library file")
    if lib is None:
        if folder is None:
            raise errors.InvalidValueError("name a model: a folder, a library file, or lib=")
        found = next((folder / n for n in LIBRARY_NAMES if (folder / n).is_file()), None)
        if found is None:
            so = sorted(folder.glob("*.so"))
            if len(so) != 1:
                listed = f" ({', '.join(s.name for s in so)})" if so else ""
                raise errors.InvalidValueError(
                    f"{folder}: no {' / '.join(LIBRARY_NAMES)} and {len(so)} other .so files{listed}: "
                    "name the library with lib="
                )
            found = so[0]
        lib = found
    lib_path = Path(lib)
    if not lib_path.is_file():
        raise errors.InvalidValueError(f"{lib_path}: no such library file")
    files = [lib_path]
    graph_text: str | None = None
    graph_from_folder = False
    if graph is not None:
        g = str(graph)
        if g.lstrip().startswith("{"):
            graph_text = g
        else:
            graph_text = Path(g).read_text()
            files.append(Path(g))
    elif folder is not None and (found_graph := _first_file(folder, GRAPH_NAMES)) is not None:
        graph_text = found_graph.read_text()
        graph_from_folder = True
        files.append(found_graph)
    params_src: Path | bytes | None = None
    from_folder = False
    looked: str | None = None
    if params is False or params is True:
        if params is True:
            raise errors.InvalidValueError("params=True: give a params file, its bytes, or False for none")
    elif isinstance(params, (bytes, bytearray, memoryview)):
        params_src = bytes(params)
    elif params is not None:
        params_src = Path(params)
        if not params_src.is_file():
            raise errors.InvalidValueError(f"{params_src}: no such params file")
    elif not weights_elsewhere:
        looked = params_looked_for(folder) if folder is not None else "no params= given"
        if folder is not None:
            params_src = find_params(folder)
            from_folder = params_src is not None
    if isinstance(params_src, Path):
        files.append(params_src)
    return Artefacts(lib_path, graph_text, params_src, graph_from_folder, from_folder, looked, files)


# The least a parameter takes: its name's length, and its record's magic, reserved word, device,
# ndim, dtype and byte count.
_MIN_BYTES_PER_PARAM = 8 + 40


def check_params_header(head: bytes, size: int) -> int:
    """The count of names a params file of `size` bytes declares in its first 24 bytes (`head`),
    refused at once when no file of that size could hold them."""
    if len(head) < 24:
        raise errors.InvalidValueError(f"a truncated params blob ({len(head)} bytes)")
    magic, _reserved, count = struct.unpack_from("<QQQ", head, 0)
    if magic != _PARAMS_MAGIC:
        raise errors.InvalidValueError("not a params blob (wrong magic number)")
    if count * _MIN_BYTES_PER_PARAM + 32 > size:
        raise errors.InvalidValueError(f"a params blob declaring {count} parameters in {size} bytes")
    return int(count)


def param_names(blob: bytes, size: int | None = None) -> list[str]:
    """The names in a params blob (TVM's ``save_param_dict`` format), read from its header (`blob`
    its first bytes, of a file of `size` bytes)."""
    count = check_params_header(blob[:24], len(blob) if size is None else size)
    try:
        at, names = 24, list[str]()
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", blob, at)
            if at + 8 + n > len(blob):
                raise struct.error(f"name {len(names)} runs past byte {len(blob)}")
            names.append(blob[at + 8 : at + 8 + n].decode())
            at += 8 + n
        return names
    except struct.error as e:
        raise errors.InvalidValueError(f"a truncated params blob: {e}") from None


# Records a prepared or aligned params file adds beside the weights.
NOT_WEIGHTS = ("__tvmrt.", "__tvmrt_align_pad_")


def read_params(blob: bytes | memoryview) -> dict[str, np.ndarray]:
    """The weights of a params blob (TVM's ``save_param_dict`` format; a prepared file's extra
    records left out) as numpy arrays by name, each a copy."""
    view = memoryview(blob)
    names = param_names(bytes(view[: min(len(view), 1 << 24)]), len(view))
    at = 24 + sum(8 + len(n.encode()) for n in names)

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal at
        size = struct.calcsize(fmt)
        if at + size > len(view):
            raise errors.InvalidValueError(f"a truncated params blob (at byte {at})")
        values = struct.unpack_from(fmt, view, at)
        at += size
        return values

    (count,) = take("<Q")
    if count != len(names):
        raise errors.InvalidValueError(f"a params blob of {len(names)} names and {count} arrays")
    out: dict[str, np.ndarray] = {}
    for name in names:
        magic, _reserved, device_type, _device_id, ndim, code, bits, lanes = take("<QQiiiBBH")
        if magic != _NDARRAY_MAGIC or device_type != 1 or not 0 <= ndim <= 32 or lanes != 1:
            raise errors.InvalidValueError(f"params record {name!r}: not a host tensor this package reads")
        shape = take(f"<{ndim}q")
        (nbytes,) = take("<q")
        dtype = _record_dtype(code, bits, name)
        count_ = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if min(shape, default=0) < 0 or nbytes != count_ * dtype.itemsize or at + nbytes > len(view):
            raise errors.InvalidValueError(f"params record {name!r}: its size does not match {dtype} {list(shape)}")
        if not name.startswith(NOT_WEIGHTS):
            out[name] = np.frombuffer(view, dtype=dtype, count=count_, offset=at).reshape(shape).copy()
        at += nbytes
    return out


def _record_dtype(code: int, bits: int, name: str) -> np.dtype:
    from ._tensors import np_dtype

    kinds = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}
    if code == 1 and bits == 1:
        return np.dtype(np.bool_)
    if code not in kinds:
        raise errors.InvalidValueError(f"params record {name!r}: a dtype of code {code} this package does not read")
    return np_dtype(f"{kinds[code]}{bits}")


def names_blob(names: list[str]) -> bytes:
    """A params header naming `names` with no arrays: what ``share_params`` reads (the names of
    the weights to bind to the other executor's)."""
    out = [struct.pack("<QQQ", _PARAMS_MAGIC, 0, len(names))]
    for n in names:
        b = n.encode()
        out.append(struct.pack("<Q", len(b)) + b)
    out.append(struct.pack("<Q", len(names)))
    return b"".join(out)


def read_params_file(path: PathLike) -> bytes:
    """A params file's bytes, its header checked against its size before the rest is read."""
    with open(path, "rb") as f:
        head = f.read(24)
        check_params_header(head, os.fstat(f.fileno()).st_size)
        return head + f.read()


def read_param_names(src: Path | bytes) -> list[str]:
    if isinstance(src, bytes):
        return param_names(src)
    with open(src, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(1 << 16)
        count = check_params_header(head[:24], size)
        try:
            return param_names(head, size)
        except errors.InvalidValueError:
            # Names past the first 64 KiB: read as far as they go (each at most what is left).
            at, more = len(head), bytearray(head)
            while count and at < size:
                chunk = f.read(max(1 << 16, len(more)))
                if not chunk:
                    break
                more += chunk
                at += len(chunk)
                try:
                    return param_names(bytes(more), size)
                except errors.InvalidValueError:
                    continue
            return param_names(bytes(more), size)


class Graph:
    """What the graph JSON says about the model's interface."""

    def __init__(self, text: str) -> None:
        try:
            g = json.loads(text)
            nodes = g["nodes"]
            row_ptr = g["node_row_ptr"]
            shapes = g["attrs"]["shape"][1]
            dtypes = g["attrs"]["dltype"][1]
            self.inputs = [
                TensorInfo(nodes[n]["name"], tuple(shapes[row_ptr[n]]), dtypes[row_ptr[n]]) for n in g["arg_nodes"]
            ]
            self.outputs = [
                TensorInfo(f"output_{i}", tuple(shapes[row_ptr[h[0]] + h[1]]), dtypes[row_ptr[h[0]] + h[1]])
                for i, h in enumerate(g["heads"])
            ]
            device_index = g["attrs"].get("device_index")
            self.device_types = sorted(set(device_index[1])) if device_index else []
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise errors.InvalidValueError(f"a graph JSON this runtime cannot read: {e!r}") from None
        self.text = text
