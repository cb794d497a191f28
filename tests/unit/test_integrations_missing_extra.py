"""An integration imported without its extra says which extra, in one line (SPEC N3)."""

from __future__ import annotations

import importlib
import sys

import pytest

from mongomem.errors import MissingExtra
from mongomem.extras import EXTRAS


@pytest.mark.parametrize(
    ("module", "extra", "package"),
    [
        ("langgraph", "langgraph", "langgraph"),
        ("openai_agents", "openai-agents", "agents"),
        ("llamaindex", "llamaindex", "llama_index"),
        ("crewai", "crewai", "crewai"),
    ],
)
def test_an_integration_without_its_extra_is_one_line_naming_it(
    module: str, extra: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert extra in EXTRAS
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delitem(sys.modules, f"mongomem.integrations.{module}", raising=False)
    with pytest.raises(MissingExtra) as err:
        importlib.import_module(f"mongomem.integrations.{module}")
    message = str(err.value)
    assert "\n" not in message
    assert message.endswith(f"pip install 'mongomem-ltm[{extra}]'")
    assert err.value.extra == extra


def test_the_integrations_package_imports_no_framework() -> None:
    import mongomem.integrations

    assert mongomem.integrations.__all__ == []
