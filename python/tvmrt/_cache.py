"""The user's own folder for files this package makes to share between processes (prepared
params, mapped constants): made 0700, and refused when it is a link, another user's, or
writable by others (a file planted there would be mapped as weights)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from . import errors


def default_prepared_dir() -> str:
    """Where prepared-params and mapped-constants files are kept: ``TVMRT_PREPARED_DIR``, else a folder of the
    user's own in the node's temporary directory (node-local on every cluster Ray runs on)."""
    return os.environ.get("TVMRT_PREPARED_DIR") or os.path.join(tempfile.gettempdir(), f"tvmrt-prepared-{os.getuid()}")


def private_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a folder only this user can write: made 0700 if missing; refused if it is a
    link, not a folder, another user's, or writable by group or others."""
    p = Path(path)
    try:
        p.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(p)
    why = None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        why = "not a folder (a link, or a file)"
    elif st.st_uid != os.getuid():
        why = f"owned by user {st.st_uid}, not this one ({os.getuid()})"
    elif st.st_mode & 0o022:
        why = f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    if why:
        raise errors.InvalidValueError(
            f"the prepared-params folder {p} is {why}: weights found there could be anyone's "
            "(choose another with prepared_dir= or TVMRT_PREPARED_DIR)"
        )
    return p
