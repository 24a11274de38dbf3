"""What a forked child puts right in the package. A child has only the thread that forked: a lock
another thread held at the fork stays held in it for ever. Every object with a lock of its own
registers here, and the child gives each a new one (the runtime puts its own state right itself:
its fork handlers wait for its locks and let them go in the child)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol


class _Locked(Protocol):
    _lock: threading.Lock


_HOLDERS: weakref.WeakSet[_Locked] = weakref.WeakSet()
_HOLDERS_LOCK = threading.Lock()


def track(holder: _Locked) -> None:
    """Gives `holder` a new `_lock` in every forked child while it lives."""
    with _HOLDERS_LOCK:
        _HOLDERS.add(holder)


def _after_fork_in_child() -> None:
    global _HOLDERS_LOCK
    _HOLDERS_LOCK = threading.Lock()
    for holder in list(_HOLDERS):
        holder._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
