"""tvmrt: run TVM's Relay-era models (``relay.build`` + ``export_library`` graph-executor builds, and
``relay.vm.compile`` executables, AOT executor builds; TVM 0.8 to 0.19) on CPython 3.9 to 3.13, with no
TVM installed.

>>> import tvmrt, numpy as np
>>> model = tvmrt.Model("my_model")                 # lib.so (+ graph.json, params.bin)
>>> [y] = model.run(data=np.zeros((1, 64), "float32"))

A :class:`Model` may be called from many threads at once: its executors share one copy of the
weights and draw activations from a pool of arenas sized by the runs in flight.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._artifacts import TensorInfo
from ._ffi import library_path
from .aot import AOTModel
from .errors import (
    InvalidIndexError,
    InvalidKeyError,
    InvalidTypeError,
    InvalidValueError,
    RuntimeFailure,
    TVMRTError,
    UncheckedInputsWarning,
)
from .model import Model
from .params import load_params, save_params
from .plugins import load_plugin
from .profiling import BenchmarkResult, Report
from .session import Session, Tensor
from .vm import VMModel

try:
    __version__ = _metadata.version("tvmrt")
except _metadata.PackageNotFoundError:  # a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "AOTModel",
    "BenchmarkResult",
    "InvalidIndexError",
    "InvalidKeyError",
    "InvalidTypeError",
    "InvalidValueError",
    "Model",
    "Report",
    "RuntimeFailure",
    "Session",
    "TVMRTError",
    "Tensor",
    "VMModel",
    "TensorInfo",
    "UncheckedInputsWarning",
    "__version__",
    "library_path",
    "load_params",
    "load_plugin",
    "save_params",
]
