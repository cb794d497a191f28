"""The public API: ``__all__`` is complete and sorted; the error tree is one tree.

(Which layer may import which is checked by ``lint-imports``: test_layer_contracts.py.)
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import mongomem
from mongomem import errors

MODULES = [
    "mongomem",
    "mongomem.errors",
    "mongomem.models",
    "mongomem.codec",
    "mongomem.settings",
    "mongomem.project_config",
    "mongomem.adapters.kafka",
    "mongomem.adapters.mongo",
    "mongomem.local.infra",
    "mongomem.adapters.embeddings",
    "mongomem.mcp_server",
    "mongomem.mcp_server.http",
    "mongomem.mcp_server.space_tools",
    "mongomem.sdk",
    "mongomem.sdk.errormap",
    "mongomem.sdk.http",
    "mongomem.sdk.service_client",
    "mongomem.sdk.spaces",
    "mongomem.sdk.spaces.http",
    "mongomem.sdk.spaces.sync",
    "mongomem.sdk.spaces.transport",
    "mongomem.sdk.spaces.wire",
    "mongomem.sdk.sync",
    "mongomem.sdk.wire",
    "mongomem.service",
    "mongomem.service.app",
    "mongomem.cli.service",
    "mongomem.service.keys",
    "mongomem.service.limits",
    "mongomem.service.spaces_routes",
    "mongomem.spaces",
    "mongomem.cli.spaces",
    "mongomem.spaces.models",
    "mongomem.spaces.scoring",
    "mongomem.testing",
    "mongomem.adapters.tls",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__

    def isort_key(symbol: str) -> tuple[int, str]:
        # ruff's RUF022 order: CONSTANTS, then Classes, then functions.
        kind = 0 if symbol.isupper() else 1 if symbol[0].isupper() else 2
        return kind, symbol

    assert list(exported) == sorted(exported, key=isort_key), f"{name}.__all__ is not sorted"
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"


def test_every_error_is_exported_and_rooted() -> None:
    classes = [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__ == "mongomem.errors"
    ]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, errors.MongomemError)
        assert cls.__name__ in errors.__all__
        assert cls.__name__ in mongomem.__all__
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} missing from the diagram"
        assert isinstance(cls.retriable, bool)


def test_retriable_flags() -> None:
    assert errors.StorageError.retriable
    assert errors.LLMRateLimited("x", retry_after=2).retry_after == 2
    assert errors.LLMRateLimited.retriable
    assert not errors.ResumeTokenLost.retriable
    assert not errors.InputError("x").retriable
    assert errors.InputError("bad", field="role").field == "role"


#: What ``from mongomem import …`` gives a user, beyond the error tree and the models.
USER_FACING = [
    "AsyncMemory",
    "AsyncSpaces",
    "HttpSpaces",
    "HttpTransport",
    "Memory",
    "MemoryRequestContext",
    "MongomemError",
    "Spaces",
]


def test_the_user_facing_names_are_exported_and_load_on_use() -> None:
    """The small public API: the user-facing names, from ``mongomem`` itself (SPEC G7)."""
    from mongomem.sdk import AsyncMemory, HttpTransport, Memory, MemoryRequestContext
    from mongomem.sdk.spaces import HttpSpaces, Spaces
    from mongomem.spaces import AsyncSpaces

    for name in USER_FACING:
        assert name in mongomem.__all__, name
    assert mongomem.Memory is Memory
    assert mongomem.AsyncMemory is AsyncMemory
    assert mongomem.MemoryRequestContext is MemoryRequestContext
    assert mongomem.HttpTransport is HttpTransport
    assert mongomem.Spaces is Spaces
    assert mongomem.HttpSpaces is HttpSpaces
    assert mongomem.AsyncSpaces is AsyncSpaces
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = mongomem.Nope


def test_import_mongomem_does_not_load_the_sdk() -> None:
    code = "import sys, mongomem; print('mongomem.sdk' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_users_own_pipeline_and_stages_folders_shadow_nothing(tmp_path: Path) -> None:
    for folder in ("pipeline", "stages", "pipeline/sdk"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("raise ImportError('the user folder')\n")
    code = (
        "from mongomem import Memory, AsyncSpaces\n"
        "import mongomem.stages.watcher, mongomem.stages.extractor, mongomem.sdk\n"
        "print(Memory.__module__, mongomem.stages.watcher.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["mongomem.sdk.sync", "mongomem.stages.watcher"]


def test_no_module_imports_the_folder_names() -> None:
    root = Path(mongomem.__file__).parent.parent
    old = re.compile(r"^\s*(from|import) (pipeline|stages)\b", re.M)
    for folder in ("pipeline", "stages", "tests", "bench"):
        for path in (root / folder).rglob("*.py"):
            assert not old.search(path.read_text()), f"{path} imports by folder name"


def test_every_package_folder_is_packaged() -> None:
    """A new subpackage must be listed in pyproject.toml, or the wheel would leave it out."""
    root = Path(mongomem.__file__).parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = {"pipeline": "mongomem", "stages": "mongomem.stages"}
    for folder, name in mapping.items():
        for init in (root / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(root / folder).parts
            assert ".".join((name, *parts)) in listed, init
    for folder, name in mapping.items():  # data folders (prompts) are packages too
        for prompts in (root / folder).rglob("prompts"):
            parts = prompts.relative_to(root / folder).parts
            assert ".".join((name, *parts)) in listed, prompts
