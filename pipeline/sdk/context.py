"""``build_context``: the memories relevant to a query, composed from searches (SPEC E).

:func:`compose_context` is the one definition: one search per memory type in
``include`` (in that order, duplicates dropped), hits below ``min_score`` left
out, rendered within ``max_chars`` (:func:`~mongomem.sdk.render.render_context`).

Time-aware (SPEC M1): a time expression in the query ("last May", "two weeks
ago", :mod:`mongomem.time_expressions`) is resolved against the moment the
context is built (``now``, default the clock), so no ``as_of`` is needed for
it. Its words are left out of what each memory search reads, each type is
asked for more hits (:data:`WIDE`) and those whose event range (else
``observed_at``) meets the window are boosted before the ``limit_per_type``
cut (:func:`~mongomem.sdk.time_boost.boost_by_time`); a strong match from
outside the window can still win. The raw turns (``include_turns``) are
boosted the same way by turn search, which resolves the expression against
the same moment.
:class:`~mongomem.sdk.DirectTransport` runs it in process; the memory service
runs it behind ``POST /v1/users/{user_id}/context``, so a client over HTTP gets
the same context in one round trip (:class:`~mongomem.sdk.HttpTransport`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from mongomem.errors import InputError
from mongomem.models import MemoryType, utcnow
from mongomem.sdk.identity import Identity
from mongomem.sdk.models import ContextItem, MemoryContext, MemoryRecord, SearchHit, dates_of
from mongomem.sdk.recall_time import check_as_of
from mongomem.sdk.render import TURN_SECTION, render_context
from mongomem.sdk.time_boost import boost_by_time
from mongomem.stm.search import TurnHit, TurnQuery
from mongomem.time_expressions import find_time_window

__all__ = ["DEFAULT_CONTEXT_TYPES", "Searcher", "check_context_arguments", "compose_context"]

#: What ``build_context`` includes unless told otherwise (SPEC E).
DEFAULT_CONTEXT_TYPES: tuple[str, ...] = (MemoryType.SEMANTIC, MemoryType.EPISODIC)


class Searcher(Protocol):
    """What a context is composed from: a transport's ``search`` and ``search_turns``
    (every :class:`~mongomem.sdk.MemoryTransport` is one)."""

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]: ...

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]: ...


#: How many times ``limit_per_type`` each memory search is asked for when the query
#: has a time expression, so that the boost can lift a hit from below the cut (as
#: the SDK's time-aware search does; at most 1000).
WIDE = 4

#: The most raw turns ``build_context(include_turns=)`` adds.
MAX_CONTEXT_TURNS = 50


def check_context_arguments(
    include: Sequence[str], limit_per_type: int, max_chars: int, include_turns: int = 0
) -> list[str]:
    """The types to search, in order and once each; an :class:`InputError` naming a bad
    argument (checked before any search)."""
    if isinstance(include, str):  # a str is a Sequence[str] too: "semantic" is not a list
        raise InputError("include must be a list of memory types", field="include")
    if max_chars < 1:
        raise InputError("max_chars must be positive", field="max_chars")
    if not 1 <= limit_per_type <= 1000:
        raise InputError("limit must be between 1 and 1000", field="limit")
    if isinstance(include_turns, bool) or not 0 <= include_turns <= MAX_CONTEXT_TURNS:
        raise InputError(
            f"include_turns must be between 0 and {MAX_CONTEXT_TURNS}", field="include_turns"
        )
    return list(dict.fromkeys(include))


async def compose_context(
    transport: Searcher,
    who: Identity,
    query: str,
    include: Sequence[str] = DEFAULT_CONTEXT_TYPES,
    limit_per_type: int = 5,
    max_chars: int = 4000,
    min_score: float | None = None,
    include_turns: int = 0,
    *,
    now: datetime | None = None,
    time_aware: bool = True,
) -> MemoryContext:
    """The context for ``who``, from ``transport``'s searches (see the module docstring).

    ``include_turns`` adds that many of the best raw turns of the user's whole
    history (turn search, :mod:`mongomem.stm.search`), each with its date and
    session, in a last section and within the same ``max_chars``. ``now`` is
    when the question is asked (an aware datetime; default the clock): a time
    expression in ``query`` is resolved against it, and turns said after it are
    left out. ``time_aware=False`` reads the whole query as words with no boost
    (for a ``transport`` whose searches are time-aware themselves).
    """
    order = check_context_arguments(include, limit_per_type, max_chars, include_turns)
    asked = check_as_of(now)
    window = find_time_window(query, asked or utcnow()) if time_aware else None
    words = query if window is None else window.without(query)
    wide = limit_per_type if window is None else min(1000, limit_per_type * WIDE)
    items: list[ContextItem] = []
    for memory_type in order:
        hits = await transport.search(who, memory_type, words, wide, None)
        if window is not None:
            hits = boost_by_time(hits, window)[:limit_per_type]
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
    if include_turns:
        q = TurnQuery(query=query, limit=include_turns, as_of=asked, time_aware=time_aware)
        found = await transport.search_turns(who, q)
        items.extend(
            ContextItem(
                memory_type=TURN_SECTION,
                memory_id=h.turn.turn_id,
                key=f"{h.created_at:%Y-%m-%d %H:%M} UTC, session {h.session_id}",
                text=h.turn.content,
                score=1.0 / h.ranks.fused_rank,  # in fused order within the section
            )
            for h in found
        )
        order = [*order, TURN_SECTION]
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
