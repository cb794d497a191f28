"""Spaces as documents: checking a caller's settings, and the stored form.

Pure functions used by :class:`~mongomem.spaces.AsyncSpaces`: each check
raises an :class:`~mongomem.errors.InputError` naming the field before
anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mongomem.adapters.mongo import Document
from mongomem.errors import InputError
from mongomem.models import check_identifier, stable_id
from mongomem.spaces.models import MAX_ARGUMENTS, RecallSettings, SearchKey, Space, validated

__all__ = [
    "KeysArg",
    "agents_document",
    "check_id",
    "check_keys",
    "check_recall",
    "check_text",
    "key_change_warning",
    "space_document",
    "space_from_doc",
]

#: Search keys as callers give them: models, or mappings validated into them.
KeysArg = Sequence[SearchKey | Mapping[str, Any]]


def check_id(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{field} must be a string", field=field)
    try:
        return check_identifier(value)
    except ValueError as exc:
        raise InputError(f"{field} {exc}", field=field) from exc


def check_text(value: Any, field: str, *, max_chars: int, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InputError(f"{field} must be a string", field=field)
    if not allow_empty and not value.strip():
        raise InputError(f"{field} must not be blank", field=field)
    if len(value) > max_chars:
        raise InputError(f"{field} is longer than {max_chars} characters", field=field)
    return value


def check_keys(value: Any, field: str = "keys") -> tuple[SearchKey, ...]:
    """At least one key, at most :data:`MAX_ARGUMENTS`, each argument once."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence) or not value:
        raise InputError(f"{field} must be a non-empty list of search keys", field=field)
    if len(value) > MAX_ARGUMENTS:
        raise InputError(f"{field}: at most {MAX_ARGUMENTS} search keys", field=field)
    keys: list[SearchKey] = []
    for i, key in enumerate(value):
        if isinstance(key, SearchKey):
            keys.append(key)
        elif isinstance(key, Mapping):
            keys.append(validated(SearchKey, dict(key), prefix=f"{field}.{i}"))
        else:
            raise InputError(f"{field}.{i} must be a SearchKey", field=f"{field}.{i}")
    arguments = [k.argument for k in keys]
    if len(set(arguments)) != len(arguments):
        raise InputError(f"{field}: an argument is listed twice", field=field)
    return tuple(keys)


def check_recall(value: Any, base: RecallSettings | None = None) -> RecallSettings:
    """Recall settings from a model or a mapping (a mapping edits ``base`` field by field)."""
    if isinstance(value, RecallSettings):
        return value
    if not isinstance(value, Mapping):
        raise InputError("recall must be RecallSettings or a mapping", field="recall")
    current = base.model_dump() if base is not None else {}
    return validated(RecallSettings, {**current, **value}, prefix="recall")


def _keys_doc(keys: Sequence[SearchKey] | None) -> list[Document] | None:
    return None if keys is None else [k.model_dump() for k in keys]


def space_document(space: Space) -> Document:
    """The stored form of a space (``_id`` is stable per project and space id)."""
    doc = space.model_dump(exclude={"agents", "keys", "item_count"})
    doc.update(
        _id=stable_id("space", space.project_id, space.space_id),
        keys=_keys_doc(space.keys),
        agents=agents_document(space.agents),
    )
    return doc


def agents_document(agents: Mapping[str, Sequence[SearchKey] | None]) -> list[Document]:
    """Agents as a list (agent ids may hold characters MongoDB field names must not)."""
    return [{"agent_id": a, "keys": _keys_doc(k)} for a, k in sorted(agents.items())]


def space_from_doc(doc: Mapping[str, Any], item_count: int = 0) -> Space:
    agents = {
        a["agent_id"]: None if a.get("keys") is None else tuple(SearchKey(**k) for k in a["keys"])
        for a in doc.get("agents") or []
    }
    return Space(
        project_id=doc["project_id"],
        space_id=doc["space_id"],
        name=doc["name"],
        description=doc.get("description", ""),
        kind=doc["kind"],
        encrypted=doc["encrypted"],
        keys=tuple(SearchKey(**k) for k in doc["keys"]),
        recall=RecallSettings(**doc["recall"]),
        agents=agents,
        embedder=doc["embedder"],
        dimensions=doc["dimensions"],
        key_id=doc.get("key_id"),
        created_at=doc["created_at"],
        updated_at=doc["updated_at"],
        item_count=item_count,
    )


def key_change_warning(space: Space, new_keys: Sequence[SearchKey]) -> tuple[str, tuple[str, ...]]:
    """The warning for a key change (SPEC H6) and the agents it affects: every agent
    of the space that inherits its keys (agents with their own keys are not affected)."""
    affected = tuple(sorted(a for a, keys in space.agents.items() if not keys))
    overriding = sorted(a for a, keys in space.agents.items() if keys)
    old = ", ".join(f"{k.argument}×{k.weight:g}" for k in space.keys)
    new = ", ".join(f"{k.argument}×{k.weight:g}" for k in new_keys)
    who = ", ".join(affected) if affected else "no registered agent"
    text = (
        f"changing the search keys of space {space.space_id!r} from [{old}] to [{new}] "
        f"changes recall for every agent that inherits them: {who}"
    )
    if overriding:
        text += f" (agents with their own keys, not affected: {', '.join(overriding)})"
    return text + ". Pass confirm=True to apply.", affected
