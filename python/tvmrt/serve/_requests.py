"""Requests as the model's inputs: what a request may hold (the model's data inputs, rows of a
shape some build takes, along the axes the builds vary and no other), and request bodies read
within bounds (a body's size, a ``.npy``'s or an ``.npz`` member's header checked before any
array is made, so a small body cannot make a large array).

Every refusal is a :class:`BadRequest`: an HTTP status and a message a client can act on.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Mapping, Sequence

import numpy as np

from .. import _tensors, errors


class BadRequest(errors.InvalidValueError):
    """A request refused before it runs: ``status`` is the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InputSpec:
    """A data input as requests give it: its dtype and, per build, the shape of one row."""

    name: str
    #: None: any numeric dtype (a Relay VM model, whose executable records no types).
    dtype: np.dtype | None
    #: The shapes of one row, one per bucket of builds (sequence lengths...).
    row_shapes: tuple[tuple[int, ...], ...]
    #: The axes of a row along which the builds differ (a request may be shorter there: padded).
    varying: frozenset[int]
    #: Any shape is taken as it is (a Relay VM model runs every shape it accepts).
    any_shape: bool = False

    def row_bytes(self) -> int:
        if self.any_shape or self.dtype is None:
            return 1 << 62  # bounded by the body's size alone
        largest = max(int(np.prod(s, dtype=np.int64)) for s in self.row_shapes)
        return largest * self.dtype.itemsize

    def fits(self, row: tuple[int, ...]) -> bool:
        """Whether rows of shape `row` fit a build: equal on every axis but those the builds vary,
        at most the build's along those."""
        if self.any_shape:
            return True
        return any(
            len(s) == len(row) and all(r == d or (a in self.varying and r <= d) for a, (r, d) in enumerate(zip(row, s)))
            for s in self.row_shapes
        )

    def accepted(self) -> str:
        if self.any_shape:
            return "any shape"
        shapes = " or ".join(str(list(s)) for s in self.row_shapes)
        shorter = f" (or shorter along axes {sorted(a + 1 for a in self.varying)})" if self.varying else ""
        return f"{self.dtype} rows of {shapes}{shorter}"


def specs(row_shapes: Sequence[Mapping[str, tuple[int, ...]]], dtypes: Mapping[str, str]) -> dict[str, InputSpec]:
    """The data inputs of a model whose builds take rows of `row_shapes` (one mapping per build)."""
    out = {}
    for name, dtype in dtypes.items():
        shapes = tuple(dict.fromkeys(b[name] for b in row_shapes))
        varying = {a for s in shapes for t in shapes if len(s) == len(t) for a in range(len(s)) if s[a] != t[a]}
        out[name] = InputSpec(name, _tensors.np_dtype(dtype), shapes, frozenset(varying))
    return out


@dataclass
class Limits:
    """How much a request may hold: rows, and bytes of body."""

    max_rows: int
    max_body: int


def check_header(spec: InputSpec | None, name: str, dtype: np.dtype, shape: tuple[int, ...], limits: Limits) -> None:
    """An array's declared dtype and shape against the input, before the array is made."""
    if spec is None:
        raise BadRequest(f"no input named {name!r}")
    if dtype.hasobject or not (dtype.kind in "biuf" or dtype.name == "bfloat16"):
        raise BadRequest(f"input {name!r} is {spec.dtype or 'numeric'}, got {dtype}")
    if spec.dtype is not None and dtype.newbyteorder("=") != spec.dtype and not np.can_cast(dtype, spec.dtype, "safe"):
        raise BadRequest(f"input {name!r} is {spec.dtype}, got {dtype}")
    if spec.any_shape:
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > 4 * limits.max_body:
            raise BadRequest(f"input {name!r}: {list(shape)} is larger than a request may be", 413)
        return
    if len(shape) < 1 or shape[0] < 1:
        raise BadRequest(f"input {name!r} needs rows along its first axis, got shape {list(shape)}")
    if shape[0] > limits.max_rows:
        raise BadRequest(f"a request of {shape[0]} rows: at most {limits.max_rows} (max_request_rows)", 413)
    if not spec.fits(tuple(shape[1:])):
        raise BadRequest(f"input {name!r} takes {spec.accepted()}, got rows of {list(shape[1:])}")


def as_rows(spec: InputSpec, value: Any, limits: Limits) -> np.ndarray:
    """A value of a request as `spec`'s rows (dtype converted when no value changes)."""
    try:
        if spec.dtype is None:
            # No type known (a VM executable records none): an array's own; JSON's numbers as
            # TVM's usual float32 and int32 (input_specs= says otherwise).
            raw, literal = _tensors._as_array(value, f"input {spec.name!r}")
            want = raw.dtype.newbyteorder("=")
            if literal:
                want = np.dtype({"f": "float32", "i": "int32", "u": "int32"}.get(raw.dtype.kind, want.str))
            arr = _tensors.as_input(value, want, spec.name)
        else:
            arr = _tensors.as_input(value, spec.dtype, spec.name, cast="safe")
    except (errors.InvalidTypeError, errors.InvalidValueError) as e:
        raise BadRequest(errors.client_message(e)) from None
    check_header(spec, spec.name, arr.dtype, arr.shape, limits)
    return arr


def read_npy(f: IO[bytes], name: str, spec: InputSpec | None, limits: Limits, size: int) -> np.ndarray:
    """One ``.npy`` stream of `size` bytes, its header checked before its data is read."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise BadRequest(f"{name}: an .npy of format {version}, not 1.0 or 2.0")
    except BadRequest:
        raise
    except (ValueError, OSError, SyntaxError, TypeError) as e:
        raise BadRequest(f"{name}: not an .npy array ({e})") from None
    check_header(spec, name, dtype, tuple(shape), limits)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    left = size - f.tell()
    if nbytes != left:
        raise BadRequest(f"{name}: the .npy declares {nbytes} bytes of data for {dtype} {list(shape)}, holds {left}")
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise BadRequest(f"{name}: a truncated .npy")
    arr = np.frombuffer(data, dtype=dtype, count=count)
    if fortran:
        return arr.reshape(shape[::-1]).transpose()
    return arr.reshape(shape)


def read_npz(body: bytes, specs_: Mapping[str, InputSpec], limits: Limits) -> dict[str, np.ndarray]:
    """An ``.npz`` of the inputs by name: each member's declared size and header checked before
    it is inflated."""
    try:
        z = zipfile.ZipFile(io.BytesIO(body))
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise BadRequest(f"the body is not an .npz (a zip archive): {e}") from None
    with z:
        members = z.infolist()
        if len(members) > len(specs_):
            raise BadRequest(f"an .npz of {len(members)} arrays: the model takes {len(specs_)} ({', '.join(specs_)})")
        out: dict[str, np.ndarray] = {}
        for m in members:
            name = m.filename[: -len(".npy")] if m.filename.endswith(".npy") else m.filename
            spec = specs_.get(name)
            if spec is None:
                raise BadRequest(f"the .npz holds {name!r}, which is not an input ({', '.join(specs_)})")
            if name in out:
                raise BadRequest(f"the .npz holds {name!r} twice")
            if m.file_size > min(4 * limits.max_body, limits.max_rows * spec.row_bytes() + 4096):
                raise BadRequest(f"{name}: {m.file_size} bytes, more than {limits.max_rows} rows can be", 413)
            try:
                with z.open(m) as f:
                    out[name] = read_npy(f, name, spec, limits, m.file_size)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                if isinstance(e, BadRequest):
                    raise
                raise BadRequest(f"{name}: a damaged .npz member ({e})") from None
        return out


def read_json(body: bytes) -> Any:
    """A JSON body, or a refusal saying what a body may be."""
    try:
        return json.loads(body or b"{}")
    except RecursionError:
        raise BadRequest("the JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(
            f'the body is not JSON ({e}): send JSON {{"inputs": {{"<name>": [rows...]}}}}, an .npy '
            "(Content-Type: application/x-npy) or an .npz (application/x-npz)"
        ) from None
