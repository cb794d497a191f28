"""A CrewAI memory storage on mongomem (SPEC N2): ``MongomemStorage``.

::

    from crewai import Memory as CrewMemory
    from mongomem.sdk import Memory
    from mongomem.integrations.crewai import MongomemStorage

    storage = MongomemStorage(Memory(project_id="travel-agent"), user_id="crew_1")
    crew_memory = CrewMemory(storage=storage, llm=..., embedder=...)
    crew = Crew(agents=[...], tasks=[...], memory=crew_memory)

CrewAI 1.x has no ``ExternalMemory`` any more: one ``Memory`` class with a pluggable
``StorageBackend`` (save, search, delete, update, get, list, scopes, categories, count,
reset, and their async twins). CrewAI embeds with its own embedder, analyses each
record with its LLM (scope, categories, importance), and searches storage by *its*
vectors; so its records cannot be mongomem's typed memories (whose fields, keys and
embeddings are memory's own) without dropping most of each record. This storage keeps
them whole instead:

**Records are turns.** The storage is the mongomem session ``(project, user_id,
session_id)`` (``session_id`` default ``"crewai-memory"``). ``save`` records each record
as an ``assistant`` turn whose content is the record's content and whose metadata holds
the whole record (``metadata["crewai"]``: its JSON and its embedding), so everything
comes back as it went in, and the pipeline extracts long-term memory from what the crew
remembered, as from any conversation. ``update``, ``delete`` and ``reset`` are
``system`` marker turns that replace or withdraw records (turns are evidence and are
never rewritten): every read replays the session's turns, oldest first.

**Search** is CrewAI's: the records' own embeddings against the query's, scored as its
bundled LanceDB storage scores (``1 / (1 + L2 distance)``), with its scope-prefix,
category (any of) and metadata (equality) filters and ``min_score``. A record without an
embedding is listed but never found by search.

**Limits.** Each read is one pass over the session's turns (a page per 1,000); meant for
a crew's memory, not millions of records. A record larger than short-term memory's
limits (``MONGOMEM_STM_MAX_METADATA_BYTES``, 64 KiB by default: a 3,072-float embedding
is about that) is refused with :class:`~mongomem.errors.InputError`: raise the limit or
use a smaller embedder. ``reset`` withdraws records; it does not erase them (the turns
stay, as in :mod:`mongomem.integrations.openai_agents`): to forget, erase the session.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from mongomem.extras import require
from mongomem.models import Role
from mongomem.sdk import AsyncBoundMemory, Memory, MemoryRequestContext

with require("crewai"):
    from crewai.memory.types import MemoryRecord, ScopeInfo

__all__ = ["MongomemStorage"]

T = TypeVar("T")

#: The metadata key that holds this integration's part of a turn.
META = "crewai"
_PAGE = 1000


def _in_scope(record: MemoryRecord, prefix: str | None) -> bool:
    if prefix is None or prefix.strip("/") == "":
        return True
    base = "/" + prefix.strip("/")
    scope = "/" + str(record.scope).strip("/")
    return scope == base or scope.startswith(base + "/")


def _matches(
    record: MemoryRecord,
    scope_prefix: str | None,
    categories: list[str] | None,
    metadata_filter: dict[str, Any] | None,
) -> bool:
    return (
        _in_scope(record, scope_prefix)
        and (not categories or any(c in record.categories for c in categories))
        and (
            not metadata_filter
            or all(record.metadata.get(k) == v for k, v in metadata_filter.items())
        )
    )


def _score(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return 0.0
    return 1.0 / (1.0 + math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True))))


def _entry(record: MemoryRecord) -> dict[str, Any]:
    return {"record": record.model_dump_json(), "embedding": record.embedding}


def _record(entry: dict[str, Any]) -> MemoryRecord:
    record = MemoryRecord.model_validate_json(entry["record"])
    record.embedding = entry.get("embedding")
    return record


def _naive(at: datetime) -> datetime:
    return at.replace(tzinfo=None) if at.tzinfo else at


class MongomemStorage:
    """CrewAI's ``StorageBackend`` on a mongomem session (see the module)."""

    def __init__(self, memory: Memory, *, user_id: str, session_id: str = "crewai-memory") -> None:
        self.memory = memory
        self.user_id = user_id
        self.session_id = session_id

    # -- plumbing ------------------------------------------------------------------------

    @property
    def _chat(self) -> AsyncBoundMemory:
        return self.memory._async.bind(
            MemoryRequestContext(user_id=self.user_id, session_id=self.session_id)
        )

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.memory._call(coro)

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.memory._runner.loop
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def _records(self) -> dict[str, MemoryRecord]:
        """The records as they stand: the session's turns replayed, oldest first."""
        records: dict[str, MemoryRecord] = {}
        cursor: str | None = None
        chat = self._chat
        while True:
            page = await chat.browse_turns(limit=_PAGE, cursor=cursor)
            for turn in page.items:
                entry = turn.metadata.get(META)
                if not isinstance(entry, dict):
                    continue
                if "record" in entry:
                    record = _record(entry)
                    records[record.id] = record
                for gone in entry.get("withdraw", ()):
                    records.pop(gone, None)
            cursor = page.next_cursor
            if cursor is None:
                return records

    async def _save(self, records: list[MemoryRecord], verb: str = "save") -> None:
        chat = self._chat
        for record in records:
            content = record.content.strip() or f"[crewai {verb}]"
            await chat.record_turn(Role.ASSISTANT, content, {META: _entry(record)})

    async def _delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        gone = [
            r.id
            for r in (await self._records()).values()
            if _matches(r, scope_prefix, categories, metadata_filter)
            and (record_ids is None or r.id in record_ids)
            and (older_than is None or _naive(r.created_at) < _naive(older_than))
        ]
        if gone:
            note = f"crewai: {len(gone)} memory record(s) withdrawn"
            await self._chat.record_turn(Role.SYSTEM, note, {META: {"withdraw": gone}})
        return len(gone)

    async def _search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        scored = [
            (r, _score(query_embedding, r.embedding))
            for r in (await self._records()).values()
            if r.embedding and _matches(r, scope_prefix, categories, metadata_filter)
        ]
        found = sorted((p for p in scored if p[1] >= min_score), key=lambda p: -p[1])
        return found[:limit]

    async def _list(self, scope_prefix: str | None, limit: int, offset: int) -> list[MemoryRecord]:
        records = [r for r in (await self._records()).values() if _in_scope(r, scope_prefix)]
        records.sort(key=lambda r: _naive(r.created_at), reverse=True)
        return records[offset : offset + limit]

    async def _scope_info(self, scope: str) -> ScopeInfo:
        inside = [r for r in (await self._records()).values() if _in_scope(r, scope)]
        times = [_naive(r.created_at) for r in inside]
        return ScopeInfo(
            path=scope,
            record_count=len(inside),
            categories=sorted({c for r in inside for c in r.categories}),
            oldest_record=min(times) if times else None,
            newest_record=max(times) if times else None,
            child_scopes=await self._scopes(scope),
        )

    async def _scopes(self, parent: str = "/") -> list[str]:
        base = "/" + parent.strip("/") if parent.strip("/") else ""
        children = set()
        for record in (await self._records()).values():
            scope = "/" + record.scope.strip("/")
            if scope.startswith(base + "/") and scope != base:
                rest = scope[len(base) + 1 :].split("/")[0]
                if rest:
                    children.add(f"{base}/{rest}")
        return sorted(children)

    # -- StorageBackend ------------------------------------------------------------------

    def save(self, records: list[MemoryRecord]) -> None:
        """Record each record as a turn (see the module)."""
        self._run(self._save(records))

    def search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        """Records nearest ``query_embedding``, best first (see the module for the score)."""
        return self._run(
            self._search(
                query_embedding, scope_prefix, categories, metadata_filter, limit, min_score
            )
        )

    def delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        """Withdraw the records meeting every criterion given; how many."""
        return self._run(
            self._delete(scope_prefix, categories, record_ids, older_than, metadata_filter)
        )

    def update(self, record: MemoryRecord) -> None:
        """Replace the record with the same id (a new turn that supersedes it)."""
        self._run(self._save([record], "update"))

    def get_record(self, record_id: str) -> MemoryRecord | None:
        return self._run(self._records()).get(record_id)

    def list_records(
        self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0
    ) -> list[MemoryRecord]:
        """Records in a scope, newest first."""
        return self._run(self._list(scope_prefix, limit, offset))

    def get_scope_info(self, scope: str) -> ScopeInfo:
        return self._run(self._scope_info(scope))

    def list_scopes(self, parent: str = "/") -> list[str]:
        """The immediate child scopes of ``parent`` that hold records."""
        return self._run(self._scopes(parent))

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        records = self._run(self._records()).values()
        return dict(Counter(c for r in records if _in_scope(r, scope_prefix) for c in r.categories))

    def count(self, scope_prefix: str | None = None) -> int:
        return sum(1 for r in self._run(self._records()).values() if _in_scope(r, scope_prefix))

    def reset(self, scope_prefix: str | None = None) -> None:
        """Withdraw every record in the scope (all of them without one); not an erasure."""
        self._run(self._delete(scope_prefix))

    async def asave(self, records: list[MemoryRecord]) -> None:
        await self._on_loop(self._save(records))

    async def asearch(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        return await self._on_loop(
            self._search(
                query_embedding, scope_prefix, categories, metadata_filter, limit, min_score
            )
        )

    async def adelete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        return await self._on_loop(
            self._delete(scope_prefix, categories, record_ids, older_than, metadata_filter)
        )
