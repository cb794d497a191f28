"""The public API: ``__all__`` is complete and sorted; the error tree is one tree."""

from __future__ import annotations

import importlib
import inspect

import pytest

import pipeline
from pipeline import errors

MODULES = [
    "pipeline",
    "pipeline.errors",
    "pipeline.models",
    "pipeline.codec",
    "pipeline.settings",
    "pipeline.project_config",
    "pipeline.kafka",
    "pipeline.mongo",
    "pipeline.infra",
    "pipeline.embeddings",
    "pipeline.mcp_server",
    "pipeline.mcp_server.http",
    "pipeline.mcp_server.space_tools",
    "pipeline.sdk",
    "pipeline.sdk.errormap",
    "pipeline.sdk.http",
    "pipeline.sdk.service_client",
    "pipeline.sdk.sync",
    "pipeline.sdk.wire",
    "pipeline.service",
    "pipeline.service.app",
    "pipeline.service.cli",
    "pipeline.service.keys",
    "pipeline.service.limits",
    "pipeline.service.spaces_routes",
    "pipeline.spaces",
    "pipeline.spaces.cli",
    "pipeline.spaces.http",
    "pipeline.spaces.models",
    "pipeline.spaces.scoring",
    "pipeline.spaces.sync",
    "pipeline.spaces.wire",
    "pipeline.testing",
    "pipeline.tls",
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
        if issubclass(obj, Exception) and obj.__module__ == "pipeline.errors"
    ]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, errors.MongomemError)
        assert cls.__name__ in errors.__all__
        assert cls.__name__ in pipeline.__all__
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} missing from the diagram"
        assert isinstance(cls.retriable, bool)


def test_retriable_flags() -> None:
    assert errors.StorageError.retriable
    assert errors.LLMRateLimited("x", retry_after=2).retry_after == 2
    assert errors.LLMRateLimited.retriable
    assert not errors.ResumeTokenLost.retriable
    assert not errors.InputError("x").retriable
    assert errors.InputError("bad", field="role").field == "role"


def test_pipeline_never_imports_stages() -> None:
    import pathlib

    root = pathlib.Path(pipeline.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import stages" not in text, path
        assert "from stages" not in text, path
