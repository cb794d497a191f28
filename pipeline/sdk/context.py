"""``build_context``: the memories relevant to a query, composed from searches (SPEC E).

:func:`compose_context` is the one definition: one search per memory type in
``include`` (in that order, duplicates dropped), hits below ``min_score`` left
out, rendered within ``max_chars`` (:func:`~mongomem.sdk.render.render_context`).
:class:`~mongomem.sdk.DirectTransport` runs it in process; the memory service
runs it behind ``POST /v1/users/{user_id}/context``, so a client over HTTP gets
the same context in one round trip (:class:`~mongomem.sdk.HttpTransport`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mongomem.errors import InputError
from mongomem.models import MemoryType
from mongomem.sdk.identity import Identity
from mongomem.sdk.models import ContextItem, MemoryContext, MemoryRecord, SearchHit, dates_of
from mongomem.sdk.render import render_context

__all__ = ["DEFAULT_CONTEXT_TYPES", "Searcher", "check_context_arguments", "compose_context"]

#: What ``build_context`` includes unless told otherwise (SPEC E).
DEFAULT_CONTEXT_TYPES: tuple[str, ...] = (MemoryType.SEMANTIC, MemoryType.EPISODIC)


class Searcher(Protocol):
    """What a context is composed from: a transport's ``search`` (every
    :class:`~mongomem.sdk.MemoryTransport` is one)."""

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]: ...


def check_context_arguments(
    include: Sequence[str], limit_per_type: int, max_chars: int
) -> list[str]:
    """The types to search, in order and once each; an :class:`InputError` naming a bad
    argument (checked before any search)."""
    if isinstance(include, str):  # a str is a Sequence[str] too: "semantic" is not a list
        raise InputError("include must be a list of memory types", field="include")
    if max_chars < 1:
        raise InputError("max_chars must be positive", field="max_chars")
    if not 1 <= limit_per_type <= 1000:
        raise InputError("limit must be between 1 and 1000", field="limit")
    return list(dict.fromkeys(include))


async def compose_context(
    transport: Searcher,
    who: Identity,
    query: str,
    include: Sequence[str] = DEFAULT_CONTEXT_TYPES,
    limit_per_type: int = 5,
    max_chars: int = 4000,
    min_score: float | None = None,
) -> MemoryContext:
    """The context for ``who``, from ``transport``'s searches (see the module docstring)."""
    order = check_context_arguments(include, limit_per_type, max_chars)
    items: list[ContextItem] = []
    for memory_type in order:
        hits = await transport.search(who, memory_type, query, limit_per_type, None)
        items.extend(
            ContextItem(
                memory_type=memory_type,
                memory_id=h.memory.memory_id,
                key=h.memory.key,
                text=context_text(h.memory),
                score=h.score,
                when=dates_of(h.memory),
            )
            for h in hits
            if min_score is None or h.score >= min_score
        )
    return render_context(query, items, order, max_chars)


def context_text(record: MemoryRecord) -> str:
    """The line a memory contributes to a context."""
    f = record.fields
    match record.memory_type:
        case MemoryType.SEMANTIC:
            return str(f.get("text", record.text))
        case MemoryType.EPISODIC:
            return str(f.get("content", record.text))
        case MemoryType.PROCEDURAL:
            return f"{f.get('description', '')} {f.get('content', '')}".strip()
        case MemoryType.TAXONOMIC:
            return str(f.get("definition", record.text))
    return record.text
