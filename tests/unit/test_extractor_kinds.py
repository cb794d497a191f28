"""Extracted memories are stored in the same shape as direct saves (mongomem.ltm.kinds).

If the extractor and the SDK disagreed on field names, keys or embedded text,
an extracted fact and a saved one could never REINFORCE each other and the
SDK could not read what the pipeline wrote.
"""

from __future__ import annotations

from typing import Any

import pytest

from mongomem.ltm.kinds import KINDS, scope_for
from mongomem.models import BUILTIN_MEMORY_TYPES, ScopeKind, utcnow
from mongomem.sdk.models import MemoryRecord, typed
from mongomem.stages.extractor.core import scope_of
from mongomem.stages.extractor.types import builtin_spec
from mongomem.testing import make_snapshot

ITEMS: dict[str, dict[str, Any]] = {
    "semantic": {"label": "Home Airport", "fact": "The user's home airport is Boston."},
    "episodic": {
        "title": "Trip planning",
        "account": "Planned a summer trip to Lisbon.",
        "participants": ["user", "assistant"],
        "valid_from": "2026-05-01",
    },
    "procedural": {
        "name": "compare flights",
        "description": "Compare flight options.",
        "steps": ["Rank by price", "Then by stops"],
    },
    "taxonomic": {"domain": "Airline", "term": "Red-eye", "definition": "An overnight flight."},
}


@pytest.mark.parametrize("memory_type", sorted(KINDS))
def test_extracted_fields_match_the_shared_kind(memory_type: str) -> None:
    """Each built-in type's fields, extracted and saved alike (SPEC C2)."""
    spec = builtin_spec(memory_type)
    kind = KINDS[memory_type]
    fields = spec.normalise(spec.item_model.model_validate(ITEMS[memory_type]).model_dump())
    assert set(kind.fields) <= set(fields)
    kind.check(fields)  # raises if a stored field is missing or empty
    assert spec.key_of(fields) == kind.key(fields)
    assert spec.text_of(fields) == kind.text(fields)
    now = utcnow()
    record = MemoryRecord(
        memory_id="m",
        version=1,
        version_id="v",
        memory_type=memory_type,
        key=kind.key(fields),
        text=kind.text(fields),
        fields=fields,
        reinforcement_count=1,
        created_at=now,
        updated_at=now,
    )
    assert typed(record).memory_type == memory_type  # the SDK reads it back


#: The four built-in types, their stored fields and their scope.
BUILT_IN = {
    "semantic": (("label", "text"), ScopeKind.USER),
    "episodic": (("title", "content"), ScopeKind.USER),
    "procedural": (("name", "description", "content"), ScopeKind.USER),
    "taxonomic": (("domain", "term", "definition"), ScopeKind.PROJECT),
}


def test_the_four_built_in_types_with_their_fields_and_scopes() -> None:
    """Semantic, episodic and procedural memories are a user's; taxonomic terms are shared
    by the whole project, extracted and saved alike (SPEC C2)."""
    assert sorted(BUILTIN_MEMORY_TYPES) == sorted(KINDS) == sorted(BUILT_IN)
    snapshot = make_snapshot([("user", "x")], project_id="p", user_id="u")
    for memory_type, (fields, scope) in BUILT_IN.items():
        assert (KINDS[memory_type].fields, KINDS[memory_type].scope) == (fields, scope)
        assert builtin_spec(memory_type).scope is scope, memory_type
        extracted = scope_of(builtin_spec(memory_type), snapshot)
        assert extracted == scope_for(memory_type, "p", "u"), memory_type
        assert extracted.kind is scope, memory_type
