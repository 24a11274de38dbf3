"""The exceptions this package raises, each also a subclass of the built-in a caller would catch.

The runtime's C API reports its own failures as ``InternalError: <message>`` (upstream's class,
which TVM's Python turns into a ``RuntimeError``); the finer kind comes from the runtime too
(``tvmrt.LastErrorKind``), so a wrong input name is a ``KeyError``, a wrong shape a ``ValueError``
and a wrong dtype a ``TypeError``, each with the runtime's own message.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType


class TVMRTError(Exception):
    """The base of every error from this package."""

    def __init__(self, *args: object, advice: str = "") -> None:
        super().__init__(*args)
        #: What to do about it in Python (``x.astype('float32')``, ``cast=True``), kept apart from
        #: :attr:`message` so a server answers its clients (curl, Triton's) without Python advice.
        self.advice = advice

    @property
    def message(self) -> str:
        """What went wrong, without the Python advice."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        # KeyError would quote its message; every class here shows it as written.
        return f"{self.message}: {self.advice}" if self.advice else self.message


def client_message(e: BaseException) -> str:
    """An error as a server tells its client: this package's without its Python advice."""
    return e.message if isinstance(e, TVMRTError) else str(e)


class InvalidKeyError(TVMRTError, KeyError):
    """A name the model does not have (an input, an output, a weight)."""


class InvalidValueError(TVMRTError, ValueError):
    """A value the model cannot take: a shape, a size, a malformed file, a bad argument."""


class InvalidTypeError(TVMRTError, TypeError):
    """A value of the wrong type: an input's dtype, an argument's Python type."""


class InvalidIndexError(TVMRTError, IndexError):
    """An input or output index out of range."""


class RuntimeFailure(TVMRTError, RuntimeError):
    """A failure while running: a kernel, a device, memory."""


class UncheckedInputsWarning(UserWarning):
    """A model whose inputs cannot be checked before it runs: a Relay VM executable records no
    shapes or dtypes, and neither ``input_specs=`` nor a ``.meta`` gave them."""


def warn(warning: Warning) -> None:
    """Issues `warning` at the caller's line: the first frame outside this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame: FrameType | None = sys._getframe(1)
    level = 2  # stacklevel 1 is this function, 2 its caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


_BY_KIND: dict[str, type[TVMRTError]] = {
    "KeyError": InvalidKeyError,
    "ValueError": InvalidValueError,
    "TypeError": InvalidTypeError,
    "IndexError": InvalidIndexError,
    "AttributeError": InvalidKeyError,
}

_KINDS = ("InternalError", "TVMError", "RPCError", *_BY_KIND)


def from_runtime(text: str, kind: str) -> TVMRTError:
    """The exception for the runtime's last error: its message (without the class prefix the C
    API puts first) in the class its kind names."""
    for k in _KINDS:
        if text.startswith(k + ": "):
            text = text[len(k) + 2 :]
            break
    return _BY_KIND.get(kind, RuntimeFailure)(text)
