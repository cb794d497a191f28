"""The layer contracts (``.importlinter``) hold, and a planted violation turns them red.

``make lint`` runs ``lint-imports``; these tests run it the same way on a copy of
the package laid out as installed (``mongomem/`` with ``stages/`` inside), once
as it is and once with one forbidden import planted per contract, so a contract
that stopped seeing the package (a typo in a module name, the stages left out
of the layout) fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def lint() -> Callable[[Path], subprocess.CompletedProcess[str]]:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is missing: `make setup` installs import-linter (dev extra)")

    def run(tree: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(LINT_IMPORTS), "--no-cache", str(tree / ".importlinter")],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def _copy(tmp: Path) -> Path:
    """The package as installed: ``mongomem`` = pipeline/, ``mongomem.stages`` = stages/."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "pipeline", tmp / "mongomem", ignore=ignore)
    shutil.copytree(ROOT / "stages", tmp / "mongomem" / "stages", ignore=ignore)
    shutil.copy(ROOT / ".importlinter", tmp / ".importlinter")
    return tmp


def _plant(tree: Path, module: str, line: str) -> None:
    path = tree / "mongomem" / module
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contracts_hold_on_the_package(tmp_path: Path, lint) -> None:
    done = lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # core imports a surface
        ("settings.py", "import mongomem.sdk", "mongomem.settings is not allowed to import"),
        # an adapter imports a domain module
        (
            "adapters/mongo.py",
            "from mongomem.ltm import store",
            "mongomem.adapters is not allowed to import mongomem.ltm",
        ),
        # a stage imports the command line (the retention stage once did)
        (
            "stages/retention.py",
            "from mongomem.cli import retention",
            "mongomem.stages is not allowed to import mongomem.cli",
        ),
        # independent siblings: short-term memory imports long-term memory
        (
            "stm/recall.py",
            "import mongomem.ltm.plan",
            "mongomem.stm is not allowed to import mongomem.ltm",
        ),
        # an import inside a function counts as well
        (
            "operations/dlq.py",
            "def _late():\n    from mongomem.sdk import Memory",
            "mongomem.operations is not allowed to import mongomem.sdk",
        ),
        # product code imports the test doubles
        (
            "local/demo.py",
            "from mongomem.testing import FakeOpenAIServer",
            "mongomem.local is not allowed to import mongomem.testing",
        ),
        # pipeline/ imports a stage (the CLI starts one by its module name)
        (
            "cli/main.py",
            "from mongomem.stages import watcher",
            "mongomem.cli is not allowed to import mongomem.stages",
        ),
        # a stage other than the runtime's adapter imports aiokafka
        (
            "stages/watcher.py",
            "import aiokafka",
            "mongomem.stages.watcher -> aiokafka",
        ),
    ],
)
def test_a_planted_violation_turns_lint_imports_red(
    tmp_path: Path, lint, module: str, line: str, broken: str
) -> None:
    tree = _copy(tmp_path)
    _plant(tree, module, line)
    done = lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 broken" in done.stdout
    assert broken in done.stdout
