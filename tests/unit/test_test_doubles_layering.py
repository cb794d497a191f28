"""Product code never reaches into the test doubles: only ``mongomem.testing`` imports itself.

Every module of the package (``pipeline/`` is ``mongomem``, ``stages/`` is
``mongomem.stages``) outside ``mongomem.testing`` is parsed; an import of
``mongomem.testing`` anywhere in it (top level or inside a function,
absolute or relative), or a module name ``mongomem.testing…`` passed as a
string (``python -m``, ``importlib.import_module``), fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"mongomem": ROOT / "pipeline", "mongomem.stages": ROOT / "stages"}
TESTING = "mongomem.testing"


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _is_testing(name: str) -> bool:
    return name == TESTING or name.startswith(TESTING + ".")


def _testing_references(module: str, is_package: bool, tree: ast.AST) -> list[str]:
    """Where ``tree`` (the source of ``module``) imports or names ``mongomem.testing``."""
    found = []
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            names = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and not any(c.isspace() for c in node.value)  # a module name, not prose
        ):
            names = [node.value]
        found += [
            f"line {getattr(node, 'lineno', 0)}: {name}" for name in names if _is_testing(name)
        ]
    return found


def _product_modules() -> list[tuple[str, Path]]:
    modules = []
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            name = _module_name(package, root, path)
            if package == "mongomem" and path.is_relative_to(root / "stages"):
                continue
            if not _is_testing(name):
                modules.append((name, path))
    return modules


def test_no_product_module_imports_the_test_doubles() -> None:
    modules = _product_modules()
    assert len(modules) > 50  # the scan sees the package
    offenders = {}
    for name, path in modules:
        tree = ast.parse(path.read_text(), filename=str(path))
        found = _testing_references(name, path.name == "__init__.py", tree)
        if found:
            offenders[name] = found
    assert offenders == {}, f"product modules that import mongomem.testing: {offenders}"


def test_the_scan_catches_each_form_of_import() -> None:
    sources = {
        "from mongomem.testing import FakeOpenAIServer": "mongomem.x",
        "def f():\n    import mongomem.testing.server": "mongomem.x",
        "from .testing import replies": "mongomem.x",
        "from ..testing.stand_in import StandInResponder": "mongomem.sdk.x",
        "from . import testing": "mongomem.x",
        "cmd = ['python', '-m', 'mongomem.testing', '--stand-in']": "mongomem.x",
    }
    for source, module in sources.items():
        assert _testing_references(module, False, ast.parse(source)), source
    assert not _testing_references("mongomem.x", False, ast.parse('"""See mongomem.testing."""'))
    assert not _testing_references("mongomem.x", False, ast.parse("from mongomem import llm"))
