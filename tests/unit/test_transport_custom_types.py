"""The direct transport's reads take the custom types project-config.yaml declares, each
in its own scope, and read the file only for a type that is not built in."""

from __future__ import annotations

from pathlib import Path

import pytest

from mongomem.errors import ConfigError, InputError
from mongomem.models import MemoryScope
from mongomem.sdk import DirectTransport, MemoryRequestContext
from mongomem.sdk.identity import resolve_identity
from mongomem.settings import load_settings

CONFIG = """
memory:
  extraction:
    custom:
      - {name: preference, scope: user, key: [topic], fields: {topic: t, value: v},
         instructions: "Extract preferences."}
      - {name: house-rule, scope: project, key: [rule], fields: {rule: r},
         instructions: "Extract house rules."}
"""

WHO = resolve_identity("p", MemoryRequestContext(user_id="u"))


def transport(config: Path | None) -> DirectTransport:
    return DirectTransport(load_settings(project_config=config))


def test_declared_types_read_in_their_own_scope(tmp_path: Path) -> None:
    path = tmp_path / "project-config.yaml"
    path.write_text(CONFIG)
    t = transport(path)
    assert sorted(t.custom_types()) == ["house-rule", "preference"]
    assert t._scope_of(WHO, "preference") == MemoryScope(project_id="p", user_id="u")
    assert t._scope_of(WHO, "house-rule") == MemoryScope(project_id="p")
    assert t._scope_of(WHO, "taxonomic") == MemoryScope(project_id="p")
    with pytest.raises(InputError, match="unknown memory type 'shoes'") as err:
        t._scope_of(WHO, "shoes")
    assert err.value.field == "memory_type"


def test_without_a_config_only_the_built_in_types_are_known() -> None:
    t = transport(None)
    assert t.custom_types() == {}
    with pytest.raises(InputError, match="unknown memory type 'preference'"):
        t._scope_of(WHO, "preference")


def test_a_broken_config_does_not_stop_reads_of_built_in_types(tmp_path: Path) -> None:
    t = transport(tmp_path / "missing.yaml")
    assert t._scope_of(WHO, "semantic") == MemoryScope(project_id="p", user_id="u")
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        t._scope_of(WHO, "preference")
