"""Device arguments, read the one way every model kind reads them."""

from __future__ import annotations

from typing import Any

from . import _ffi, errors

DeviceSpec = Any  # "auto", "cpu", "opencl", "opencl:1", or (device_type, device_id)


def module_type_keys(module: _ffi.Handle) -> list[str]:
    """The type keys of a module and everything it imports."""
    key = _ffi.global_function("runtime.ModuleGetTypeKey")
    size = _ffi.global_function("runtime.ModuleImportsSize")
    get = _ffi.global_function("runtime.ModuleGetImport")
    keys, stack = [], [module]
    while stack:
        m = stack.pop()
        keys.append(key(m))
        stack.extend(get(m, i) for i in range(size(m)))
    return keys


def device_of(spec: DeviceSpec, module: _ffi.Handle | None) -> _ffi.Device:
    if isinstance(spec, _ffi.Device):
        return spec
    if isinstance(spec, tuple):
        return _ffi.Device(int(spec[0]), int(spec[1]))
    if hasattr(spec, "device_type") and hasattr(spec, "device_id"):  # TVM's Device
        return _ffi.Device(int(spec.device_type), int(spec.device_id))
    name, _, index = str(spec).lower().partition(":")
    dev_id = int(index) if index else 0
    if name == "auto":
        if module is None:
            raise errors.InvalidValueError("device 'auto' names no device here: 'cpu', 'opencl' or 'opencl:N'")
        name = "opencl" if any(k in ("opencl", "cl") for k in module_type_keys(module)) else "cpu"
    if name in ("cpu", "llvm"):
        return _ffi.Device(_ffi.CPU, dev_id)
    if name in ("opencl", "cl"):
        return _ffi.Device(_ffi.OPENCL, dev_id)
    raise errors.InvalidValueError(f"device {spec!r}: use 'auto', 'cpu', 'opencl' or 'opencl:N'")


def looks_like_device(value: Any) -> bool:
    """Whether a positional argument is meant as a device (a name, ours, or TVM's ``Device``)."""
    return isinstance(value, (str, _ffi.Device)) or (hasattr(value, "device_type") and hasattr(value, "device_id"))
