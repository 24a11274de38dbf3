#!/usr/bin/env python3
"""Checks that every ELF file in a wheel is built for one machine: the wheel's own architecture.

    scripts/wheel/check_machines.py WHEEL ARCH     (ARCH: x86_64 or aarch64)

A wheel for aarch64 carrying an x86-64 module imports on arm64 as if the module were absent (the
package then falls back to ctypes without a word), so the release build and the wheel tests refuse
it here. Exits 1 naming each file of another machine, or when the wheel has no ELF file at all."""

from __future__ import annotations

import struct
import sys
import zipfile

# e_machine values (the ELF specification's table).
MACHINES = {"x86_64": 62, "aarch64": 183}


def elf_machine(data: bytes) -> int | None:
    """The e_machine of a little-endian ELF image, or None for a file that is not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        return None
    (machine,) = struct.unpack_from("<H", data, 18)
    return machine


def check(wheel: str, arch: str) -> list[str]:
    want = MACHINES[arch]
    wrong, seen = [], 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            with z.open(name) as f:
                head = f.read(20)
            machine = elf_machine(head)
            if machine is None:
                continue
            seen += 1
            if machine != want:
                named = {v: k for k, v in MACHINES.items()}.get(machine, f"machine {machine}")
                wrong.append(f"{name} is built for {named}, not {arch}")
    if seen == 0:
        wrong.append("no ELF file at all")
    return wrong


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[2] not in MACHINES:
        print(__doc__, file=sys.stderr)
        return 2
    wrong = check(sys.argv[1], sys.argv[2])
    for w in wrong:
        print(f"{sys.argv[1]}: {w}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
