"""One stage module talks to Kafka's client library: the runtime's adapter."""

from __future__ import annotations

import ast
from pathlib import Path

STAGES = Path(__file__).resolve().parents[2] / "stages"
#: The faust engine (optional extra) is faust's own adapter; it brings aiokafka with it.
ALLOWED = {"runtime/kafka.py", "windowing/app.py"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_runtime_adapter_imports_aiokafka() -> None:
    importers = {
        str(path.relative_to(STAGES))
        for path in STAGES.rglob("*.py")
        if "aiokafka" in _imports(path)
    }
    assert importers <= ALLOWED
    assert "runtime/kafka.py" in importers
