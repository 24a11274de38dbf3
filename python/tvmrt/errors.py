"""The exceptions this package raises, each also a subclass of the built-in a caller would catch.

The runtime's C API reports its own failures as ``InternalError: <message>`` (upstream's class,
which TVM's Python turns into a ``RuntimeError``); the finer kind comes from the runtime too
(``tvmrt.LastErrorKind``), so a wrong input name is a ``KeyError``, a wrong shape a ``ValueError``
and a wrong dtype a ``TypeError``, each with the runtime's own message.
"""

from __future__ import annotations


class TVMRTError(Exception):
    """The base of every error from this package."""

    def __str__(self) -> str:
        # KeyError would quote its message; every class here shows it as written.
        return str(self.args[0]) if self.args else ""


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
