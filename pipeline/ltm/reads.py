"""Reading long-term memory: by key, by similarity, by listing, and its history.

Every read is filtered on one scope (``scope.project_id`` and
``scope.user_id``, the latter ``None`` for project-wide types), so no read
crosses a user's or a project's scope (SPEC F3). When a crash or a race leaves
two ``current`` versions of one memory for a moment, reads keep the higher.
Versions are returned without their embedding (``embedding == ()``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem.errors import StorageError
from mongomem.lazy import lazy_module
from mongomem.ltm.documents import from_document, scope_filter
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.plan import history_order
from mongomem.models import MemoryScope, MemoryType, MemoryVersion

if TYPE_CHECKING:
    import numpy as np

    from mongomem.ltm.search import VectorSearch
    from mongomem.ranking import Ranked
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = ["MemoryReads"]

Doc = dict[str, Any]

#: Reads return versions without their embedding (``embedding == ()``): callers
#: rarely need it, and leaving 1.5 KB per document out makes reads several times faster.
NO_EMBEDDING = {"embedding": 0}


async def _run(op: Awaitable[Any]) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB read failed: {exc}") from exc


def _latest(docs: Sequence[Doc]) -> list[MemoryVersion]:
    """One version per memory (the highest), in the order first seen."""
    best: dict[str, Doc] = {}
    for doc in docs:
        seen = best.get(doc["memory_id"])
        if seen is None or doc["version"] > seen["version"]:
            best[doc["memory_id"]] = doc
    return [from_document(d) for d in best.values()]


class MemoryReads:
    """The read half of :class:`~mongomem.ltm.store.MemoryStore`."""

    memories: AsyncCollection[Doc]
    decisions: AsyncCollection[Doc]
    search_backend: VectorSearch

    def _current(self, scope: MemoryScope, memory_type: str) -> Doc:
        return {
            **scope_filter(scope.project_id, scope.user_id),
            "memory_type": memory_type,
            "status": "current",
        }

    async def get(self, scope: MemoryScope, memory_type: str, key: str) -> MemoryVersion | None:
        """The current version of the memory with this key, or ``None``."""
        query = {**self._current(scope, memory_type), "key_norm": normalize_key(key)}
        doc = await _run(
            self.memories.find_one(query, NO_EMBEDDING, sort=[("version", DESCENDING)])
        )
        return None if doc is None else from_document(doc)

    async def search(
        self,
        scope: MemoryScope,
        memory_type: str,
        vector: Sequence[float],
        limit: int = 5,
        key_prefix: str | None = None,
    ) -> list[tuple[MemoryVersion, float]]:
        """The ``limit`` current memories most similar to ``vector``, best first."""
        query = np.asarray(vector, dtype=np.float32)
        hits = await self.search_backend.search(scope, memory_type, query, limit, key_prefix)
        if not hits:
            return []
        ids = [version_id for version_id, _ in hits]
        found = {
            d["_id"]: d
            for d in await _run(self.memories.find({"_id": {"$in": ids}}, NO_EMBEDDING).to_list())
        }
        scope_query = self._current(scope, memory_type)
        out = []
        for version_id, score in hits:
            doc = found.get(version_id)
            # Re-check the scope on the document itself, whatever the index said.
            if doc is None or not _matches(doc, scope_query):
                continue
            out.append((from_document(doc), score))
        return out

    async def rank(
        self,
        scope: MemoryScope,
        memory_type: str,
        query: str,
        vector: Sequence[float],
        limit: int = 5,
        key_prefix: str | None = None,
    ) -> list[tuple[MemoryVersion, float, Ranked[str]]]:
        """The ``limit`` current memories best for ``query`` by hybrid search (SPEC M1):
        BM25 and cosine fused, best first, each with its cosine and its ranks."""
        hits = await self.search_backend.hybrid(
            scope, memory_type, query, np.asarray(vector, dtype=np.float32), limit, key_prefix
        )
        if not hits:
            return []
        ids = [version_id for version_id, _, _ in hits]
        found = {
            d["_id"]: d
            for d in await _run(self.memories.find({"_id": {"$in": ids}}, NO_EMBEDDING).to_list())
        }
        scope_query = self._current(scope, memory_type)
        return [
            (from_document(found[v]), cosine, ranked)
            for v, cosine, ranked in hits
            if v in found and _matches(found[v], scope_query)
        ]

    async def list_current(
        self,
        scope: MemoryScope,
        memory_type: str,
        limit: int = 50,
        key_prefix: str | None = None,
    ) -> list[MemoryVersion]:
        """Current memories, most recently updated first."""
        query = self._current(scope, memory_type)
        if key_prefix is not None:
            query["key_norm"] = {"$regex": "^" + _escape(normalize_key(key_prefix))}
        cursor = self.memories.find(
            query, NO_EMBEDDING, sort=[("updated_at", DESCENDING)], limit=limit * 2
        )
        return _latest(await _run(cursor.to_list()))[:limit]

    async def list_domains(self, project_id: str) -> list[str]:
        """The domains of a project's current taxonomic terms, sorted."""
        query = self._current(MemoryScope(project_id=project_id), MemoryType.TAXONOMIC)
        values = await _run(self.memories.distinct("fields.domain", query))
        return sorted({str(v) for v in values})

    async def history(self, memory_id: str, scopes: Sequence[MemoryScope]) -> list[MemoryVersion]:
        """Every version of the memory in the order of the world — by when each version's
        value was last said (:func:`~mongomem.ltm.plan.history_order`, SPEC L2), which is
        version order unless older statements arrived late — only if it lives in one of
        ``scopes``."""
        ors = [scope_filter(s.project_id, s.user_id) for s in scopes]
        query: Doc = {"memory_id": memory_id, "$or": ors}
        cursor = self.memories.find(query, NO_EMBEDDING, sort=[("version", ASCENDING)])
        return history_order([from_document(d) for d in await _run(cursor.to_list())])

    async def latest(self, memory_id: str, scopes: Sequence[MemoryScope]) -> MemoryVersion | None:
        """The memory's highest version (current, or its ``DELETE`` version once deleted) —
        only if it lives in one of ``scopes``."""
        ors = [scope_filter(s.project_id, s.user_id) for s in scopes]
        doc = await _run(
            self.memories.find_one(
                {"memory_id": memory_id, "$or": ors}, NO_EMBEDDING, sort=[("version", DESCENDING)]
            )
        )
        return None if doc is None else from_document(doc)

    async def decisions_for(self, memory_id: str) -> list[Doc]:
        """The decision-log entries that touched ``memory_id``, oldest first."""
        cursor = self.decisions.find({"memory_id": memory_id}, sort=[("at", ASCENDING)])
        return list(await _run(cursor.to_list()))


def _matches(doc: Doc, query: Doc) -> bool:
    scope = doc.get("scope", {})
    return (
        scope.get("project_id") == query["scope.project_id"]
        and scope.get("user_id") == query["scope.user_id"]
        and doc.get("memory_type") == query["memory_type"]
        and doc.get("status") == "current"
    )


def _escape(text: str) -> str:
    import re

    return re.escape(text)
