"""The import paths users rely on still work after the layout regrouping.

``from mongomem import …`` (every name of ``__all__``), ``mongomem.sdk``,
``mongomem.sdk.spaces``, ``mongomem.spaces``, ``mongomem.testing``, the ``mongomem``
command and ``python -m mongomem.cli`` / ``python -m mongomem.service``: each in a new
interpreter, so nothing an earlier test imported hides a broken path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mongomem


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args] if not code else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_name_of_all_imports_from_mongomem() -> None:
    names = ", ".join(mongomem.__all__)
    done = _python(f"from mongomem import {names}\nprint(len([{names}]))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(mongomem.__all__))]


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("mongomem.sdk", "Memory, AsyncMemory, MemoryRequestContext, HttpTransport"),
        ("mongomem.sdk.spaces", "Spaces, HttpSpaces"),
        ("mongomem.spaces", "AsyncSpaces"),
        ("mongomem.testing", "FakeOpenAIServer"),
        ("mongomem.errors", "MongomemError, InputError"),
        ("mongomem.settings", "Settings, load_settings"),
    ],
)
def test_the_documented_modules_import(module: str, names: str) -> None:
    done = _python(f"from {module} import {names}")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", ["mongomem.cli", "mongomem.service"])
def test_python_dash_m_runs_the_command(module: str) -> None:
    done = _python("", "-m", module, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_mongomem_command_runs() -> None:
    command = Path(sys.executable).with_name("mongomem")
    done = subprocess.run(
        [str(command), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "usage: mongomem" in done.stdout
