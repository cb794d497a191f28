"""Similarity search behind one interface: ``$vectorSearch`` where the server
has it, an exact cosine scan everywhere else; hybrid search (SPEC M1) beside it.

:meth:`VectorSearch.hybrid` ranks by BM25 and by cosine and fuses the two
(:func:`~mongomem.ranking.fuse`). In process, :class:`ExactCosineSearch`
answers it from the scope's cached index, whose BM25 postings follow every
write, update, delete and erasure as its matrix does. On a server with Atlas
Search, :func:`probe_text_search` (asked once, after the vector probe) finds a
queryable ``search`` index named :data:`TEXT_INDEX` and a working
``$rankFusion`` (MongoDB 8.1+); then :class:`AtlasVectorSearch` runs
``$search`` and ``$vectorSearch`` under one ``$rankFusion`` and reads the
ranks back from ``scoreDetails``. Without it, Atlas answers by cosine alone.

:func:`probe_vector_search` asks the server once: it is ``True`` only when the
``memories`` collection has a queryable vector search index named
:data:`VECTOR_INDEX` (Atlas, or MongoDB with a search node). Otherwise
:class:`ExactCosineSearch` answers from :class:`~mongomem.ltm.index.IndexCache`.
Both return the same thing: version ids with cosine similarities, best first.

Where ``$vectorSearch`` is used, new versions store their embedding as a BSON
vector (binary subtype 9), which Atlas indexes; elsewhere as plain float32
bytes (mongo-java-server drops the connection on subtype 9). Versions written
before a vector index existed are therefore not in it: create the index
(:func:`vector_index_definition`) before the first write, or re-encode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.errors import StorageError
from mongomem.lazy import lazy_module
from mongomem.ltm.documents import decode_embedding, scope_filter
from mongomem.ltm.index import IndexCache, Row, ScopeIndex, Vector
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.plan import Neighbour
from mongomem.models import MemoryCandidate, MemoryScope
from mongomem.ranking import LEXICAL_WEIGHT, Ranked, fuse

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = [
    "TEXT_INDEX",
    "VECTOR_INDEX",
    "AtlasVectorSearch",
    "ExactCosineSearch",
    "VectorSearch",
    "neighbours_in",
    "probe_text_search",
    "probe_vector_search",
    "text_index_definition",
    "vector_index_definition",
]

VECTOR_INDEX = "memories_vector"
TEXT_INDEX = "memories_text"
#: How many candidates each retriever hands to the fusion.
POOL = 20
Doc = dict[str, Any]
#: A hybrid hit: the version id, its cosine with the query, and how it was ranked.
HybridHit = tuple[str, float, Ranked[str]]


class VectorSearch(Protocol):
    """Finds the current memories of one (scope, type) nearest to a vector."""

    @property
    def name(self) -> str: ...

    async def search(
        self,
        scope: MemoryScope,
        memory_type: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[tuple[str, float]]:
        """``(version_id, cosine)`` pairs, best first."""
        ...

    async def neighbours(
        self, candidate: MemoryCandidate, limit: int, floor: float | None = None
    ) -> list[Neighbour]:
        """The candidate's key match (if any) and its ``limit`` nearest memories that are
        at least ``floor`` similar."""
        ...

    async def hybrid(
        self,
        scope: MemoryScope,
        memory_type: str,
        query: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[HybridHit]:
        """The ``limit`` best by BM25 and cosine fused, best first (see the module docstring)."""
        ...


def vector_index_definition(dimensions: int) -> dict[str, Any]:
    """The Atlas vector search index the memories collection needs."""
    return {
        "fields": [
            {
                "type": "vector",
                "path": "embedding",
                "numDimensions": dimensions,
                "similarity": "cosine",
            },
            {"type": "filter", "path": "scope.project_id"},
            {"type": "filter", "path": "scope.user_id"},
            {"type": "filter", "path": "memory_type"},
            {"type": "filter", "path": "status"},
        ]
    }


def text_index_definition() -> dict[str, Any]:
    """The Atlas Search index hybrid search needs on the memories collection."""
    return {
        "mappings": {
            "dynamic": False,
            "fields": {
                "text": {"type": "string", "analyzer": "lucene.english"},
                "scope": {
                    "type": "document",
                    "fields": {"project_id": {"type": "token"}, "user_id": {"type": "token"}},
                },
                "memory_type": {"type": "token"},
                "status": {"type": "token"},
            },
        }
    }


async def probe_text_search(memories: AsyncCollection[Doc]) -> bool:
    """True when ``$search`` on :data:`TEXT_INDEX` and ``$rankFusion`` both work on ``memories``.

    Asked only where :func:`probe_vector_search` was true. Any server error means
    no: the store then ranks by cosine alone.
    """
    try:
        cursor = await memories.list_search_indexes(TEXT_INDEX)
        found = await cursor.to_list()
        if not any(ix.get("queryable") and ix.get("type", "search") == "search" for ix in found):
            return False
        probe: list[Doc] = [
            {
                "$rankFusion": {
                    "input": {
                        "pipelines": {
                            "lexical": [
                                {
                                    "$search": {
                                        "index": TEXT_INDEX,
                                        "text": {"query": "probe", "path": "text"},
                                    }
                                },
                                {"$limit": 1},
                            ]
                        }
                    }
                }
            },
            {"$limit": 1},
        ]
        await (await memories.aggregate(probe)).to_list()
    except PyMongoError:
        return False
    return True


async def probe_vector_search(memories: AsyncCollection[Doc]) -> bool:
    """True when ``$vectorSearch`` with :data:`VECTOR_INDEX` can be used on ``memories``."""
    try:
        cursor = await memories.list_search_indexes(VECTOR_INDEX)
        found = await cursor.to_list()
    except OperationFailure:
        return False  # no search support on this server
    except PyMongoError as exc:
        raise StorageError(f"could not probe vector search: {exc}") from exc
    return any(ix.get("queryable") and ix.get("type") == "vectorSearch" for ix in found)


class ExactCosineSearch:
    """Exact cosine scan of the scope's current memories (cached per scope)."""

    def __init__(self, cache: IndexCache) -> None:
        self.cache = cache

    @property
    def name(self) -> str:
        return "exact-cosine"

    async def search(
        self,
        scope: MemoryScope,
        memory_type: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[tuple[str, float]]:
        index = await self.cache.fresh(scope, memory_type)
        return [(row.version_id, sim) for row, sim in index.top(vector, limit, key_prefix)]

    async def neighbours(
        self, candidate: MemoryCandidate, limit: int, floor: float | None = None
    ) -> list[Neighbour]:
        index = await self.cache.fresh(candidate.scope, candidate.memory_type)
        return neighbours_in(index, candidate, limit, floor=floor)

    async def hybrid(
        self,
        scope: MemoryScope,
        memory_type: str,
        query: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[HybridHit]:
        index = await self.cache.fresh(scope, memory_type)
        out: list[HybridHit] = []
        for row, cosine, ranked in index.hybrid(vector, query, limit, key_prefix, pool=POOL):
            out.append((row.version_id, cosine, ranked.rekey(row.version_id)))
        return out


def neighbours_in(
    index: ScopeIndex,
    candidate: MemoryCandidate,
    limit: int,
    known: tuple[int, Vector] | None = None,
    floor: float | None = None,
) -> list[Neighbour]:
    """The key match and the ``limit`` nearest rows (at least ``floor`` similar) of an
    (already fresh) index."""
    vector = np.asarray(candidate.embedding, dtype=np.float32)
    index.check_dims(vector)
    found: list[tuple[Row, float]] = index.top(vector, limit, known=known, floor=floor)
    keyed = index.keyed(candidate.key)
    if keyed is not None and all(r.memory_id != keyed.memory_id for r, _ in found):
        found.append((keyed, index.similarity(keyed, vector)))
    return [
        _neighbour(
            candidate, row.memory_id, row.version, row.key, row.text, sim, row.rank, row.head
        )
        for row, sim in found
    ]


def _neighbour(
    candidate: MemoryCandidate,
    memory_id: str,
    version: int,
    key: str,
    text: str,
    sim: float,
    rank: str = "",
    head: int | None = None,
) -> Neighbour:
    return Neighbour(
        memory_id=memory_id,
        version=version,
        memory_type=candidate.memory_type,
        scope=candidate.scope,
        key=key,
        text=text,
        similarity=sim,
        rank=rank,
        head=head,
    )


def _time_of(doc: Doc) -> tuple[str, int | None]:
    """The evidence rank and head of a memory document (SPEC L2)."""
    head = doc.get("head")
    return str(doc.get("observed_rank") or ""), int(head) if isinstance(head, int) else None


class AtlasVectorSearch:
    """``$vectorSearch`` on :data:`VECTOR_INDEX`, pre-filtered to one scope and type.

    Atlas reports cosine as ``(1 + cos) / 2``; it is converted back so both
    backends return plain cosine.
    """

    def __init__(
        self, memories: AsyncCollection[Doc], *, oversample: int = 20, text_search: bool = False
    ) -> None:
        self._memories = memories
        self._oversample = oversample
        #: ``$search`` + ``$rankFusion`` usable (:func:`probe_text_search`).
        self.text_search = text_search

    @property
    def name(self) -> str:
        return "atlas-vector-search"

    async def _aggregate(
        self, pipeline: list[Doc], stage: str, key_prefix: str | None
    ) -> list[Doc]:
        """Run a search pipeline (``stage`` names it in the error), keeping only the keys
        under ``key_prefix`` when one is given."""
        try:
            docs = await (await self._memories.aggregate(pipeline)).to_list()
        except PyMongoError as exc:
            raise StorageError(f"{stage} failed: {exc}") from exc
        if key_prefix is not None:
            prefix = normalize_key(key_prefix)
            docs = [d for d in docs if normalize_key(d["key"]).startswith(prefix)]
        return docs

    async def _query(
        self,
        scope: MemoryScope,
        memory_type: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None,
    ) -> list[Doc]:
        filters: dict[str, Any] = {
            **scope_filter(scope.project_id, scope.user_id),
            "memory_type": memory_type,
            "status": "current",
        }
        fetch = limit * 4 if key_prefix else limit
        pipeline: list[Doc] = [
            {
                "$vectorSearch": {
                    "index": VECTOR_INDEX,
                    "path": "embedding",
                    "queryVector": [float(x) for x in vector],
                    "numCandidates": max(100, fetch * self._oversample),
                    "limit": fetch,
                    "filter": filters,
                }
            },
            {
                "$project": {
                    "memory_id": 1,
                    "version": 1,
                    "key": 1,
                    "text": 1,
                    "observed_rank": 1,
                    "head": 1,
                    "score": {"$meta": "vectorSearchScore"},
                }
            },
        ]
        docs = await self._aggregate(pipeline, "$vectorSearch", key_prefix)
        return docs[:limit]

    async def search(
        self,
        scope: MemoryScope,
        memory_type: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[tuple[str, float]]:
        docs = await self._query(scope, memory_type, vector, limit, key_prefix)
        return [(d["_id"], 2.0 * float(d["score"]) - 1.0) for d in docs]

    async def neighbours(
        self, candidate: MemoryCandidate, limit: int, floor: float | None = None
    ) -> list[Neighbour]:
        vector = np.asarray(candidate.embedding, dtype=np.float32)
        docs = await self._query(candidate.scope, candidate.memory_type, vector, limit, None)
        if floor is not None:
            docs = [d for d in docs if 2.0 * float(d["score"]) - 1.0 >= floor]
        found = [
            _neighbour(
                candidate,
                d["memory_id"],
                int(d["version"]),
                d["key"],
                d["text"],
                2.0 * float(d["score"]) - 1.0,
                *_time_of(d),
            )
            for d in docs
        ]
        query = {
            **scope_filter(candidate.scope.project_id, candidate.scope.user_id),
            "memory_type": candidate.memory_type,
            "key_norm": normalize_key(candidate.key),
            "status": "current",
        }
        try:
            keyed = await self._memories.find_one(
                query,
                {
                    "memory_id": 1,
                    "version": 1,
                    "key": 1,
                    "text": 1,
                    "embedding": 1,
                    "observed_rank": 1,
                    "head": 1,
                },
                sort=[("version", -1)],
            )
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc
        if keyed is not None and all(n.memory_id != keyed["memory_id"] for n in found):
            stored = decode_embedding(keyed["embedding"])
            denom = float(np.linalg.norm(stored) * np.linalg.norm(vector)) or 1.0
            sim = float(stored @ vector) / denom
            found.append(
                _neighbour(
                    candidate,
                    keyed["memory_id"],
                    int(keyed["version"]),
                    keyed["key"],
                    keyed["text"],
                    sim,
                    *_time_of(keyed),
                )
            )
        return found

    def _filters(self, scope: MemoryScope, memory_type: str) -> Doc:
        return {
            **scope_filter(scope.project_id, scope.user_id),
            "memory_type": memory_type,
            "status": "current",
        }

    async def hybrid(
        self,
        scope: MemoryScope,
        memory_type: str,
        query: str,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
    ) -> list[HybridHit]:
        if not self.text_search:
            dense = await self.search(scope, memory_type, vector, limit, key_prefix)
            return [(v, s, r) for r, (v, s) in zip(fuse([], dense, limit), dense, strict=True)]
        fetch = max(POOL, limit * 4 if key_prefix else limit)
        filters = self._filters(scope, memory_type)
        equals = [{"equals": {"path": path, "value": value}} for path, value in filters.items()]
        pipeline: list[Doc] = [
            {
                "$rankFusion": {
                    "input": {
                        "pipelines": {
                            "dense": [
                                {
                                    "$vectorSearch": {
                                        "index": VECTOR_INDEX,
                                        "path": "embedding",
                                        "queryVector": [float(x) for x in vector],
                                        "numCandidates": max(100, fetch * self._oversample),
                                        "limit": fetch,
                                        "filter": filters,
                                    }
                                }
                            ],
                            "lexical": [
                                {
                                    "$search": {
                                        "index": TEXT_INDEX,
                                        "compound": {
                                            "must": [{"text": {"query": query, "path": "text"}}],
                                            "filter": equals,
                                        },
                                    }
                                },
                                {"$limit": fetch},
                            ],
                        }
                    },
                    # the in-process weights (Atlas's RRF constant is its own, 60)
                    "combination": {"weights": {"dense": 1, "lexical": LEXICAL_WEIGHT}},
                    "scoreDetails": True,
                }
            },
            {"$limit": fetch},
            {
                "$project": {
                    "key": 1,
                    "embedding": 1,
                    "details": {"$meta": "scoreDetails"},
                }
            },
        ]
        docs = await self._aggregate(pipeline, "$rankFusion", key_prefix)
        return [_fused_hit(d, vector, rank) for rank, d in enumerate(docs[:limit], start=1)]


def _fused_hit(doc: Doc, vector: Vector, rank: int) -> HybridHit:
    """A ``$rankFusion`` result as a hybrid hit: cosine recomputed, ranks from scoreDetails."""
    stored = decode_embedding(doc["embedding"])
    denom = float(np.linalg.norm(stored) * np.linalg.norm(vector)) or 1.0
    details = doc.get("details") or {}
    ranks: dict[str, tuple[int, float]] = {}
    for part in details.get("details", []):
        name, at = part.get("inputPipelineName"), part.get("rank")
        if isinstance(name, str) and isinstance(at, int) and at > 0:
            ranks[name] = (at, float(part.get("value", 0.0)))
    lexical, dense = ranks.get("lexical"), ranks.get("dense")
    ranked = Ranked(
        key=str(doc["_id"]),
        fused=float(details.get("value", 0.0)),
        rank=rank,
        lexical_rank=None if lexical is None else lexical[0],
        dense_rank=None if dense is None else dense[0],
        lexical_score=None if lexical is None else lexical[1],
        dense_score=None if dense is None else dense[1],
    )
    return str(doc["_id"]), float(stored @ vector) / denom, ranked
