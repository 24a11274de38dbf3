"""The package's modules import each other without cycles, counting every import: at the top,
inside functions, and those made for type checking only (a protocol describes the model to the
modules it makes, rather than an import back)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tvmrt"


def edges() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    names = {p.stem for p in PACKAGE.glob("*.py")}
    for path in PACKAGE.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(a.name for a in node.names if a.name in names)
        found.discard(path.stem)
        out[path.stem] = found & names - {"__init__"}
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycles():
    graph = edges()
    assert "session" in graph["model"] and "_executor" in graph["session"], graph  # imports are seen
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_a_cycle_is_noticed():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
