"""No two modules of the package import each other, directly or around a loop.

Every import counts: at module level, under ``TYPE_CHECKING`` and inside
functions (a deferred import that closes a loop is still a cycle, only hidden).
An import of a package counts as an import of its ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mongomem

ROOT = Path(mongomem.__file__).parent.parent
FOLDERS = {"mongomem": ROOT / "pipeline", "mongomem.stages": ROOT / "stages"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    # a module's own package (``from mongomem.ltm.x import`` inside mongomem.ltm) is no edge
    return {t for t in targets & known if t != name and not name.startswith(t + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_deferred_import_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
