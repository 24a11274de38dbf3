"""A model's artefacts: where the library, graph and params are, and what the graph says about its
inputs and outputs (read from the graph JSON itself, which the runtime validates when it plans)."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from . import errors

PathLike = Union[str, "os.PathLike[str]"]

_PARAMS_MAGIC = 0xF7E58D4F05049CB7


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor of the model: an input, an output or a weight."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}{list(self.shape)})"


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


def locate(
    path: PathLike | None, lib: PathLike | None, graph: PathLike | str | None, params: PathLike | bytes | None
) -> Artefacts:
    """The artefacts named: a model folder (``lib.so``, with ``graph.json`` and ``params.bin`` or
    ``params`` when the library does not carry them), a single ``export_library`` file, or each
    one explicitly (explicit ones win over the folder's)."""
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
        candidates = [folder / n for n in ("lib.so", "deploy_lib.so", "mod.so")]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            so = sorted(folder.glob("*.so"))
            if len(so) != 1:
                raise errors.InvalidValueError(
                    f"{folder}: no lib.so (and {len(so)} other .so files): name the library with lib="
                )
            found = so[0]
        lib = found
    lib_path = Path(lib)
    if not lib_path.is_file():
        raise errors.InvalidValueError(f"{lib_path}: no such library file")
    graph_text: str | None = None
    graph_from_folder = False
    if graph is not None:
        g = str(graph)
        graph_text = g if g.lstrip().startswith("{") else Path(g).read_text()
    elif folder is not None and (folder / "graph.json").is_file():
        graph_text = (folder / "graph.json").read_text()
        graph_from_folder = True
    params_src: Path | bytes | None = None
    from_folder = False
    if isinstance(params, (bytes, bytearray, memoryview)):
        params_src = bytes(params)
    elif params is not None:
        params_src = Path(params)
        if not params_src.is_file():
            raise errors.InvalidValueError(f"{params_src}: no such params file")
    elif folder is not None:
        names = ("params.bin", "params", "deploy_param.params")
        params_src = next((folder / n for n in names if (folder / n).is_file()), None)
        from_folder = params_src is not None
    return Artefacts(lib_path, graph_text, params_src, graph_from_folder, from_folder)


def param_names(blob: bytes) -> list[str]:
    """The names in a params blob (TVM's ``save_param_dict`` format), read from its header."""
    try:
        magic, _reserved, count = struct.unpack_from("<QQQ", blob, 0)
        if magic != _PARAMS_MAGIC:
            raise errors.InvalidValueError("not a params blob (wrong magic number)")
        at, names = 24, []
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", blob, at)
            names.append(blob[at + 8 : at + 8 + n].decode())
            at += 8 + n
        return names
    except struct.error as e:
        raise errors.InvalidValueError(f"a truncated params blob: {e}") from None


def names_blob(names: list[str]) -> bytes:
    """A params header naming `names` with no arrays: what ``share_params`` reads (the names of
    the weights to bind to the other executor's)."""
    out = [struct.pack("<QQQ", _PARAMS_MAGIC, 0, len(names))]
    for n in names:
        b = n.encode()
        out.append(struct.pack("<Q", len(b)) + b)
    out.append(struct.pack("<Q", len(names)))
    return b"".join(out)


def read_param_names(src: Path | bytes) -> list[str]:
    if isinstance(src, bytes):
        return param_names(src)
    with open(src, "rb") as f:
        head = f.read(1 << 16)
        try:
            return param_names(head)
        except errors.InvalidValueError:
            return param_names(head + f.read())


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
