"""The node's prepared-params files: one per content (every build's library, graph and params as
loaded, the device and this package's version), in a folder of the user's own, made by whichever
replica comes first and verified by every replica before it maps it.

- **Where**: ``TVMRT_PREPARED_DIR``, else ``<tmp>/tvmrt-prepared-<uid>``; made 0700, and refused
  when it is a link, another user's, or writable by others (a file planted there would be mapped
  as weights).
- **Named by content**: a digest of the bytes every build is loaded from, so another version of
  the weights (in ``params.bin``, ``deploy_param.params``, a library's own...) gets a file of its
  own, and two models of one folder name never share one. Nodes that share the folder (nodes of
  one machine) share the file.
- **Verified**: under the lock, a file found is checked (its stamp: the weights' digest and the
  derived records', kept in the file) before use; one that fails (damaged, edited, cut short) is
  made again, and said so.
- **Held while used**: every replica keeps a shared lock on the file's lock file while it lives;
  a replica starting removes the files of the folder nobody holds (older than a minute), so files
  of models no longer served do not pile up.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Callable, Sequence

from .. import _ffi, errors
from .._artifacts import PathLike, locate
from .._cache import private_dir

logger = logging.getLogger("ray.serve")

# Files nobody has held for this long may be removed by a replica starting.
UNUSED_FOR = 60.0


def content_key(builds: Sequence[PathLike], device: str, params: Sequence[PathLike | None] | None = None) -> str:
    """A digest of what the builds are loaded from (each file, by its role, as the package finds
    it; `params`: each build's params file, where not its folder's), the device, and this
    package's version."""
    from .. import __version__

    h = hashlib.sha256()
    h.update(f"tvmrt {__version__} device {device}\n".encode())
    for b, p in zip(builds, params or [None] * len(builds)):
        art = locate(b, None, None, p)
        h.update(f"build {len(art.files)}\n".encode())
        for f in art.files:
            h.update(f"{f.name}\n".encode())
            with open(f, "rb") as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:32]


def prepared_file(
    builds: Sequence[PathLike], prepared_dir: str, device: str = "auto", params: Sequence[PathLike | None] | None = None
) -> Path:
    """The prepared-params file for `builds` (one model's) in `prepared_dir` (made private)."""
    folder = private_dir(prepared_dir)
    return folder / f"{Path(builds[0]).name}-{content_key(builds, device, params)}.prepared"


def check(path: Path) -> str | None:
    """Why the prepared file at `path` cannot be used, or None when it can: a file this user
    owns, whose stamp holds (its weights and derived records are the ones it was made with)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        return "not a regular file of this user's"
    try:
        info = json.loads(_ffi.global_function("tvmrt.params.Check")(str(path)))
    except errors.TVMRTError as e:
        return f"unreadable ({e})"
    prepared = info.get("prepared")
    if not prepared:
        return "not a prepared file (no stamp)"
    if not prepared.get("verified"):
        return str(prepared.get("why", "its stamp does not hold"))
    return None


class Holding:
    """A shared lock on a prepared file's use-lock, held while a replica uses the file: a replica
    cleaning the folder removes no file somebody holds."""

    def __init__(self, lock: IO[bytes]) -> None:
        self._lock: IO[bytes] | None = lock

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()


def _lock_files(path: Path) -> tuple[Path, Path]:
    """The lock held shared by every replica using `path`, and the one held exclusively by the
    replica checking or making it."""
    return path.with_name(path.name + ".use"), path.with_name(path.name + ".make")


def ensure_prepared(path: Path, make: Callable[[str], None]) -> tuple[bool, Holding]:
    """Makes `path` with ``make(temporary_path)`` unless a file that passes :func:`check` is
    there; True when this call made it. Replicas starting together check it in turn (an
    exclusive lock): the first makes (or remakes) the file into a temporary file of an
    unpredictable name, renamed over `path` once whole and verified; the others find it.
    Returns holding the file (see :class:`Holding`), which it held before looking at it."""
    use_path, make_path = _lock_files(path)
    use = open(use_path, "a+b")  # kept open by the Holding
    try:
        fcntl.flock(use, fcntl.LOCK_SH)
        with open(make_path, "a+b") as making:
            fcntl.flock(making, fcntl.LOCK_EX)
            why = check(path)
            made = why is not None
            if made:
                if why != "missing":
                    logger.warning("tvmrt: the prepared file %s is not usable (%s): making it again", path, why)
                _make(path, make)
                with open(path.parent / "made.log", "a") as log:
                    log.write(f"{path.name} {os.getpid()} {time.time():.3f}\n")
        return made, Holding(use)
    except BaseException:
        use.close()
        raise


def _make(path: Path, make: Callable[[str], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        make(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        why = check(Path(tmp))
        if why is not None:
            raise errors.RuntimeFailure(f"the prepared file just made does not verify: {why}")
        os.chmod(tmp, 0o600)  # this user's replicas map it
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remove_unused(folder: Path, keep: Path) -> list[str]:
    """Removes the prepared files of `folder` that no replica holds (and nobody touched for a
    minute), but `keep`; returns their names."""
    removed = []
    now = time.time()
    for f in folder.glob("*.prepared"):
        if f == keep:
            continue
        use_path, make_path = _lock_files(f)
        try:
            with open(use_path, "a+b") as use:
                try:
                    fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use (or being made: a maker holds it shared)
                if now - f.stat().st_mtime < UNUSED_FOR:
                    continue
                f.unlink()
                for lock in (use_path, make_path):
                    lock.unlink(missing_ok=True)
                removed.append(f.name)
        except FileNotFoundError:
            continue
    for t in folder.glob(".*.tmp"):
        try:
            if now - t.stat().st_mtime > 3600:  # left by a replica killed while making one
                t.unlink()
        except FileNotFoundError:
            pass
    return removed
