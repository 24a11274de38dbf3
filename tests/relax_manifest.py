"""A Relax fixture's cases as its manifest.txt lists them, and a result's tensors flattened: what
the TVM-side tests (tests/python_relax for TVM 0.19, tests/python_relax_ffi for 0.25-0.27) read,
each under its own TVM's Python."""

import pathlib

import numpy as np


def manifest(model_dir: pathlib.Path) -> list:
    """Per case: {"inputs": [arrays], "outputs": [arrays]}."""
    cases, case = [], None
    for line in (model_dir / "manifest.txt").read_text().splitlines():
        t = line.split()
        if not t:
            continue
        if t[0] == "case":
            case = {"inputs": [], "outputs": []}
            cases.append(case)
        elif t[0] in ("input", "output"):
            dtype, rest = (t[2], t[3:]) if t[0] == "input" else (t[1], t[2:])
            nd = int(rest[0])
            shape = [int(d) for d in rest[1 : 1 + nd]]
            case[t[0] + "s"].append(np.fromfile(model_dir / rest[1 + nd], dtype=dtype).reshape(shape))
    return cases


def flatten(o, out: list) -> list:
    """The tensors of a result (tuples nested in any depth) as numpy arrays, appended to `out`."""
    if hasattr(o, "numpy"):
        out.append(o.numpy())
    else:
        for x in o:
            flatten(x, out)
    return out
