"""Runtime plug-ins: a vendor's library, written against TVM's C++ headers, that registers its
module types (the loaders of what its compiler put into an ``export_library`` artefact), file
formats and functions when loaded. Load it before the model that needs it: ``load_plugin(path)``,
``Model(..., plugins=[path])``, or ``TVMRT_PLUGINS`` (paths separated by ``:``) for every load."""

from __future__ import annotations

import os
from typing import Iterable

from . import _ffi
from ._artifacts import PathLike


def load_plugin(path: PathLike) -> None:
    """Loads the plug-in at `path` into this process, for its life (the functions it registers
    point into it); loading it again does nothing more."""
    _ffi.global_function("tvmrt.LoadPlugin")(os.fspath(path))


def load_plugins(paths: Iterable[PathLike] | PathLike | None) -> None:
    """Loads each of `paths` (one path, several, or none)."""
    if paths is None:
        return
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        load_plugin(p)
