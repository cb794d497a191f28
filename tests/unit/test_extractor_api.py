"""The extraction modules' ``__all__`` is sorted and resolves (like tests/unit/test_public_api)."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "mongomem.adapters.llm",
    "mongomem.local.llm_stand_in",
    "mongomem.local.llm_stand_in.chat",
    "mongomem.local.llm_stand_in.http",
    "mongomem.local.llm_stand_in.rules",
    "mongomem.local.llm_stand_in.server",
    "mongomem.adapters.readiness",
    "mongomem.testing",
    "mongomem.testing.replies",
    "mongomem.testing.server",
    "mongomem.testing.snapshots",
    "mongomem.stages.extractor",
    "mongomem.stages.extractor.core",
    "mongomem.stages.extractor.handler",
    "mongomem.stages.extractor.types",
    "mongomem.operations.usage",
    "mongomem.stages.extractor.worker",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)

    def order(symbol: str) -> tuple[int, str]:
        kind = 0 if symbol.isupper() else 1 if symbol[0].isupper() else 2
        return kind, symbol

    assert exported == sorted(exported, key=order)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"


def test_stage_entry_point_matches_the_cli() -> None:
    from mongomem.cli.main import STAGES

    module_name, _, attr = STAGES["extractor"].partition(":")
    entry = getattr(importlib.import_module(module_name), attr)
    assert entry.__name__ == "main"
