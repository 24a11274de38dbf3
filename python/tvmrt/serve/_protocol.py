"""The Open Inference Protocol (KServe v2, what Triton, KServe, MLServer and Seldon speak) over HTTP:
its requests read and its answers written, with no Ray in sight (the replica routes to these).

- ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2`` (server metadata),
  ``/v2/models/{name}[/versions/{v}]`` (model metadata), ``.../ready``;
- ``POST /v2/models/{name}[/versions/{v}]/infer``: tensors as JSON (``data`` flat in row-major
  order, or nested) or in the binary tensor data extension (the JSON header's length in
  ``Inference-Header-Content-Length``, each tensor's bytes after it, in order, sized by its
  ``binary_data_size``); outputs as asked (by name, ``binary_data`` per output or
  ``binary_data_output`` for all), the request's ``id`` echoed;
- errors as ``{"error": message}``: 400 for a request the model cannot take, 404 for a model or
  path the server does not have, 413 past the request limits, 500 for a run that failed.

Every size a request declares is checked against the body before an array is made.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .. import _tensors
from ._requests import BadRequest, Limits, read_json

HEADER_LENGTH = "inference-header-content-length"

# The protocol's datatypes and numpy's; BYTES (strings) has no tensor in TVM.
_DATATYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BF16": "bfloat16",
}
_NAMES = {v: k for k, v in _DATATYPES.items()}
_MAX_RANK = 32


def datatype_of(dtype: np.dtype | None) -> str:
    """The protocol's name of a numpy dtype (FP32 for a VM input of no recorded type: what JSON
    numbers are taken as)."""
    if dtype is None:
        return "FP32"
    name = "bool" if dtype.kind == "b" else dtype.name
    return _NAMES.get(name, name.upper())


def dtype_of(datatype: Any, what: str) -> np.dtype:
    if not isinstance(datatype, str) or datatype not in _DATATYPES:
        known = ", ".join(_DATATYPES)
        raise BadRequest(f"{what}: datatype {datatype!r} is none of {known}")
    return _tensors.np_dtype(_DATATYPES[datatype])


class NotFound(BadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, 404)


@dataclass
class Route:
    """What a path asks for: ``kind`` is live, ready, server, model, model_ready or infer."""

    kind: str
    model: str | None = None
    version: str | None = None


def route(method: str, path: str) -> Route | None:
    """The protocol's endpoint a request names (`path` from ``/v2`` on), None when the path is not
    the protocol's."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] != "v2":
        return None
    rest = parts[1:]
    get, post = method == "GET", method == "POST"
    if get and rest in (["health", "live"], ["health", "ready"]):
        return Route(rest[1])
    if get and not rest:
        return Route("server")
    if len(rest) >= 2 and rest[0] == "models":
        model, tail = rest[1], rest[2:]
        version = None
        if len(tail) >= 2 and tail[0] == "versions":
            version, tail = tail[1], tail[2:]
        if get and not tail:
            return Route("model", model, version)
        if get and tail == ["ready"]:
            return Route("model_ready", model, version)
        if post and tail == ["infer"]:
            return Route("infer", model, version)
    raise NotFound(f"{method} {path}: not an endpoint of the Open Inference Protocol here")


@dataclass
class TensorMeta:
    name: str
    datatype: str
    shape: list[int]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": self.shape}


@dataclass
class ModelMeta:
    name: str
    platform: str
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    versions: list[str] = field(default_factory=lambda: ["1"])
    #: Why the inputs cannot be described (a Relay VM model with no types given), or None.
    unknown: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": self.versions,
            "platform": self.platform,
            "inputs": [t.as_json() for t in self.inputs],
            "outputs": [t.as_json() for t in self.outputs],
        }

    def check(self, r: Route) -> None:
        """The model and version a route names are this one, else a 404."""
        if r.model != self.name:
            raise NotFound(f"no model named {r.model!r} here (this server has {self.name!r})")
        if r.version is not None and r.version not in self.versions:
            raise NotFound(f"model {self.name!r} has no version {r.version!r} (versions: {', '.join(self.versions)})")


@dataclass
class InferRequest:
    """An infer request, read: the inputs by name, and how to answer."""

    id: str | None
    inputs: dict[str, np.ndarray]
    #: The outputs asked for, by name, with whether each comes back binary (None: every output,
    #: binary when ``binary_default``).
    outputs: list[tuple[str, bool]] | None
    binary_default: bool


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > _MAX_RANK:
        raise BadRequest(f"{what}: shape is a list of at most {_MAX_RANK} dimensions")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise BadRequest(f"{what}: shape {value!r} holds something other than sizes of 0 or more")
    return tuple(value)


def _parameters(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{what}: parameters is an object")
    return value


def _flat(data: Any, count: int, what: str) -> list[Any]:
    """The values of a JSON tensor's ``data`` (flat or nested lists), row-major, exactly `count`."""
    out: list[Any] = []
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            out.append(v)
            if len(out) > count:
                raise BadRequest(f"{what}: data holds more than the {count} values its shape says")
    if len(out) != count:
        raise BadRequest(f"{what}: data holds {len(out)} values, its shape says {count}")
    return out


def _from_json(values: list[Any], dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    """JSON values as an array of `dtype`, each value of the datatype's kind and kept exactly."""
    kind = dtype.kind
    if kind == "b":
        if not all(isinstance(v, bool) for v in values):
            raise BadRequest(f"{what}: BOOL data is true and false")
        return np.array(values, dtype=dtype).reshape(shape)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise BadRequest(f"{what}: {datatype_of(dtype)} data is numbers")
    if kind in "iu":
        if not all(isinstance(v, int) for v in values):
            raise BadRequest(f"{what}: {datatype_of(dtype)} data is integers")
        info = np.iinfo(dtype)
        if values and (min(values) < info.min or max(values) > info.max):
            raise BadRequest(f"{what}: a value outside {datatype_of(dtype)}'s range")
        return np.array(values, dtype=dtype).reshape(shape)
    try:
        wide = np.array(values, dtype=np.float64)
    except OverflowError:
        # An integer of hundreds of digits: no float holds it.
        raise BadRequest(f"{what}: a value outside {datatype_of(dtype)}'s range") from None
    with np.errstate(over="ignore", invalid="ignore"):
        arr = wide.astype(dtype)
    # A finite number that becomes infinite (FP32 1e300, FP16 70000) is not the value sent.
    if not np.array_equal(np.isfinite(arr), np.isfinite(wide)):
        raise BadRequest(f"{what}: a value outside {datatype_of(dtype)}'s range")
    return arr.reshape(shape)


def read_infer(body: bytes, header_length: str | None, limits: Limits) -> InferRequest:
    """An infer request's body: the JSON header (all of the body, or its first
    ``Inference-Header-Content-Length`` bytes) and the binary tensors after it."""
    if header_length is None:
        split = len(body)
    else:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise BadRequest(
                f"Inference-Header-Content-Length {header_length!r}: a byte count within the body's {len(body)}"
            )
        split = int(header_length)
    doc = read_json(body[:split]) if split else None
    if not isinstance(doc, dict):
        raise BadRequest('an infer request is a JSON object: {"inputs": [{"name", "shape", "datatype", "data"}]}')
    rid = doc.get("id")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("id is a string")
    params = _parameters(doc.get("parameters"), "the request")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequest('an infer request names its inputs: "inputs": [{"name", "shape", "datatype", "data"}]')
    binary = memoryview(body)[split:]
    at = 0
    inputs: dict[str, np.ndarray] = {}
    for k, t in enumerate(raw_inputs):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest(f"input {k}: an object with a name")
        name = t["name"]
        what = f"input {name!r}"
        if name in inputs:
            raise BadRequest(f"{what} is given twice")
        dtype = dtype_of(t.get("datatype"), what)
        shape = _shape(t.get("shape"), what)
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes > limits.max_body * 4:
            raise BadRequest(f"{what}: {list(shape)} is larger than a request may be", 413)
        size = _parameters(t.get("parameters"), what).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size != nbytes:
                declared = f"{t.get('datatype')} {list(shape)}"
                raise BadRequest(f"{what}: binary_data_size {size!r}, while {declared} is {nbytes} bytes")
            if at + size > len(binary):
                raise BadRequest(f"{what}: {size} bytes of binary data declared, {len(binary) - at} left in the body")
            inputs[name] = np.frombuffer(binary[at : at + size], dtype=dtype.newbyteorder("<")).reshape(shape)
            at += size
        else:
            if "data" not in t:
                raise BadRequest(f"{what}: no data (JSON data, or binary_data_size and the bytes after the header)")
            inputs[name] = _from_json(_flat(t["data"], count, what), dtype, shape, what)
    if at != len(binary):
        raise BadRequest(f"{len(binary) - at} bytes after the last input's binary data")
    binary_default = params.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise BadRequest("binary_data_output is true or false")
    outputs = None
    raw_outputs = doc.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise BadRequest('"outputs" is a list of {"name": ...}')
        outputs = []
        for k, o in enumerate(raw_outputs):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                raise BadRequest(f"requested output {k}: an object with a name")
            p = _parameters(o.get("parameters"), f"output {o['name']!r}")
            if "classification" in p:
                raise BadRequest(f"output {o['name']!r}: the classification extension is not served")
            flag = p.get("binary_data", binary_default)
            if not isinstance(flag, bool):
                raise BadRequest(f"output {o['name']!r}: binary_data is true or false")
            outputs.append((o["name"], flag))
    return InferRequest(rid, inputs, outputs, binary_default)


def check_datatypes(request: InferRequest, meta: ModelMeta) -> None:
    """Each input's datatype is the model's, as the metadata states it: the protocol converts
    nothing (as Triton refuses a datatype it was not configured with). A name the model does not
    have is left to the model's own check, which lists the inputs."""
    want = {t.name: t.datatype for t in meta.inputs}
    for name, arr in request.inputs.items():
        given = datatype_of(arr.dtype)
        if name in want and given != want[name]:
            raise BadRequest(
                f"input {name!r} is {_DATATYPES.get(want[name], want[name])}, got {arr.dtype} "
                f"(datatype {given} where the model takes {want[name]}: the protocol converts nothing)"
            )


def write_infer(
    model: str, version: str, request: InferRequest, names: Sequence[str], arrays: Sequence[np.ndarray]
) -> tuple[bytes, dict[str, str]]:
    """The answer to `request`: its outputs (of `names`, `arrays`) as asked, JSON or JSON header
    and binary tensors; the headers to send with it."""
    by_name = dict(zip(names, arrays))
    wanted = request.outputs if request.outputs is not None else [(n, request.binary_default) for n in names]
    unknown = [n for n, _ in wanted if n not in by_name]
    if unknown:
        raise BadRequest(f"no output named {', '.join(map(repr, unknown))} (the outputs: {', '.join(names)})")
    outputs, blobs = [], []
    for name, binary in wanted:
        a = np.asarray(by_name[name])
        meta: dict[str, Any] = {"name": name, "datatype": datatype_of(a.dtype), "shape": list(a.shape)}
        if binary:
            data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
            meta["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            flat = a.reshape(-1)
            meta["data"] = (flat.astype(np.float64) if a.dtype.name == "bfloat16" else flat).tolist()
        outputs.append(meta)
    doc: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": outputs}
    if request.id is not None:
        doc["id"] = request.id
    header = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return header, {"content-type": "application/json"}
    return header + b"".join(blobs), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }


def error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()
