"""Exact cosine search over a scope's current memories, cached per scope.

Where ``$vectorSearch`` is missing (mongo-java-server, MongoDB without a search
node) similarity search is an exact scan: the current memories of one
(scope, type) are held as a float32 matrix and a query is one matrix-vector
product plus a partial sort.

Keeping the cache fresh without re-reading the scope: every write to a scope
first writes its memory documents, then bumps that scope's entry in
``memory_scope_log`` — ``rev`` +1 and the changed version ids pushed onto a
short ``log`` — in one single-document update. A reader fetches that entry
(one lookup by ``_id``): the same ``rev`` means the cache is fresh; a small
gap is closed by re-reading just the logged versions; a larger gap (or a cold
cache) reloads the scope after reading ``rev``. Because documents are written
before the bump, anything the log names is already visible; replaying an entry
twice is harmless. Writers in this process apply their own change directly.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection

from mongomem.adapters.lexical import LexicalIndex
from mongomem.errors import InputError
from mongomem.lazy import lazy_module
from mongomem.ltm.documents import decode_embedding, scope_filter
from mongomem.ltm.kinds import normalize_key
from mongomem.models import CLOSED_STATUSES, MemoryScope, stable_id
from mongomem.ranking import Ranked, fuse

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = [
    "LOG_LENGTH",
    "SCOPE_LOG",
    "IndexCache",
    "Row",
    "ScopeIndex",
    "bump_scope",
    "fresh_since",
]

SCOPE_LOG = "memory_scope_log"
LOG_LENGTH = 256
Vector: TypeAlias = "np.ndarray[Any, np.dtype[np.float32]]"
Doc = dict[str, Any]

#: What the cache reads of a memory document.
PROJECTION = {
    "memory_id": 1,
    "version": 1,
    "key": 1,
    "text": 1,
    "embedding": 1,
    "status": 1,
    "observed_rank": 1,
    "head": 1,
}


#: Within :func:`fresh_since`: the monotonic time a scope-log read must be sent after.
_FRESH_SINCE: ContextVar[float | None] = ContextVar("mongomem_fresh_since", default=None)


@contextmanager
def fresh_since(since: float) -> Iterator[None]:
    """Within this block, :meth:`IndexCache.fresh` takes an index whose scope-log read was
    sent at or after ``since`` (monotonic) as fresh, without reading the log again.

    For one operation that brought the index up to date at its start (a save reads
    the log beside its embedding call): its plan then sees what was committed when
    the operation began, as a read made a moment later would, give or take the
    writes of those few milliseconds — which a concurrent writer may make between
    any read and write anyway (a clash on a version id is a conflict and retried).
    """
    token = _FRESH_SINCE.set(since)
    try:
        yield
    finally:
        _FRESH_SINCE.reset(token)


def scope_log_id(scope: MemoryScope, memory_type: str) -> str:
    return stable_id("scope", scope.project_id, scope.user_id or "", memory_type)


async def bump_scope(
    log: AsyncCollection[Doc],
    scope: MemoryScope,
    memory_type: str,
    changed: Iterable[str],
    *,
    session: AsyncClientSession | None = None,
    deleted: int = 0,
) -> int:
    """Record that ``changed`` versions of the scope were written; the new ``rev``.

    ``deleted`` counts memories the write deleted: the entry keeps their total
    (``deletes``), so an ADD need only check for a deleted memory's id where
    there are some (:meth:`~mongomem.ltm.store.MemoryStore.decide`).
    """
    entry = {"ids": list(changed)}
    inc = {"rev": 1, "deletes": deleted} if deleted else {"rev": 1}
    doc = await log.find_one_and_update(
        {"_id": scope_log_id(scope, memory_type)},
        {"$inc": inc, "$push": {"log": {"$each": [entry], "$slice": -LOG_LENGTH}}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
        projection={"rev": 1},
        session=session,
    )
    return int(doc["rev"]) if doc else 0


@dataclass(frozen=True)
class Row:
    version_id: str
    memory_id: str
    version: int
    key: str
    text: str
    #: the evidence order of the version's latest evidence, and the memory's highest
    #: version number when history was written after it (SPEC L2; see ``Neighbour``)
    rank: str = ""
    head: int | None = None

    @staticmethod
    def of(doc: Doc) -> Row:
        head = doc.get("head")
        return Row(
            doc["_id"],
            doc["memory_id"],
            int(doc["version"]),
            doc["key"],
            doc["text"],
            str(doc.get("observed_rank") or ""),
            int(head) if isinstance(head, int) else None,
        )


@dataclass
class ScopeIndex:
    """The current memories of one (scope, type): rows plus a float32 matrix."""

    rev: int = -1
    dims: int | None = None
    rows: list[Row | None] = field(default_factory=list)
    matrix: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    alive: np.ndarray[Any, np.dtype[np.bool_]] = field(
        default_factory=lambda: np.zeros(0, dtype=bool)
    )
    by_memory: dict[str, int] = field(default_factory=dict)
    by_key: dict[str, int] = field(default_factory=dict)
    dead: int = 0
    deletes: int = 0  # memories ever deleted in this scope (the scope log's ``deletes``)
    generation: int = 0  # changes whenever rows move (compaction, reload)
    #: monotonic time the scope-log read that last brought ``rev`` up to date was sent
    read_at: float = float("-inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: BM25 over the rows' text, at the rows' positions (kept in step by upsert/drop).
    lexical: LexicalIndex = field(default_factory=LexicalIndex)

    def __len__(self) -> int:
        return len(self.by_memory)

    def replace_with(self, other: ScopeIndex) -> None:
        self.generation += 1
        self.dims, self.rows, self.matrix = other.dims, other.rows, other.matrix
        self.alive = other.alive
        self.by_memory, self.by_key, self.dead = other.by_memory, other.by_key, other.dead
        self.lexical = other.lexical

    def check_dims(self, vector: Vector) -> None:
        if self.dims is not None and vector.shape[0] != self.dims:
            raise InputError(
                f"embedding has {vector.shape[0]} dimensions; this scope's memories have "
                f"{self.dims}",
                field="embedding",
            )

    def upsert(self, row: Row, vector: Vector) -> None:
        """Make ``row`` the memory's current version unless a newer one is known."""
        at = self.by_memory.get(row.memory_id)
        if at is not None:
            old = self.rows[at]
            if old is not None and old.version > row.version:
                return
            self._drop(at)
        if self.dims is None:
            self.dims = int(vector.shape[0])
        if self.matrix.shape[1] != self.dims:  # still empty: size the matrix
            self.matrix = np.zeros((0, self.dims), dtype=np.float32)
        self.check_dims(vector)
        n = len(self.rows)
        if n >= self.matrix.shape[0]:
            grown = np.zeros((max(64, n * 2), self.dims), dtype=np.float32)
            grown[:n] = self.matrix[:n]
            self.matrix = grown
            alive = np.zeros(grown.shape[0], dtype=bool)
            alive[:n] = self.alive[:n]
            self.alive = alive
        norm = float(np.linalg.norm(vector))
        self.matrix[n] = vector / norm if norm else vector
        self.alive[n] = True
        self.rows.append(row)
        self.lexical.add(n, row.text)
        self.by_memory[row.memory_id] = n
        self.by_key[normalize_key(row.key)] = n

    def remove(self, version_id: str, memory_id: str) -> None:
        at = self.by_memory.get(memory_id)
        row = self.rows[at] if at is not None else None
        if at is not None and row is not None and row.version_id == version_id:
            self._drop(at)

    def _drop(self, at: int) -> None:
        row = self.rows[at]
        if row is None:
            return
        self.rows[at] = None
        self.matrix[at] = 0.0
        self.alive[at] = False
        self.lexical.remove(at)
        del self.by_memory[row.memory_id]
        if self.by_key.get(normalize_key(row.key)) == at:
            del self.by_key[normalize_key(row.key)]
        self.dead += 1
        if self.dead > 1024 and self.dead * 2 > len(self.rows):
            self._compact()

    def _compact(self) -> None:
        self.generation += 1
        live = [(i, r) for i, r in enumerate(self.rows) if r is not None]
        self.matrix = self.matrix[[i for i, _ in live]].copy()
        self.alive = np.ones(len(live), dtype=bool)
        self.rows = [r for _, r in live]
        self.by_memory = {r.memory_id: i for i, r in enumerate(self.rows) if r is not None}
        self.by_key = {normalize_key(r.key): i for i, r in enumerate(self.rows) if r is not None}
        self.lexical.rebuild((i, r.text) for i, r in enumerate(self.rows) if r is not None)
        self.dead = 0

    def keyed(self, key: str) -> Row | None:
        at = self.by_key.get(normalize_key(key))
        return None if at is None else self.rows[at]

    def similarity(self, row: Row, vector: Vector) -> float:
        q = _unit(vector)
        return float(self.matrix[self.by_memory[row.memory_id]] @ q)

    def similarities(self, vectors: Vector) -> tuple[int, Vector]:
        """Cosines of each of ``vectors`` with every row (vectors × rows), in one product.

        Hand a row of the result to :meth:`top` as ``known`` while
        :attr:`generation` is unchanged; rows added since are scored then.
        """
        n = len(self.rows)
        if n == 0:
            return self.generation, np.zeros((len(vectors), 0), dtype=np.float32)
        q = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return self.generation, q.astype(np.float32) @ self.matrix[:n].T

    def top(
        self,
        vector: Vector,
        limit: int,
        key_prefix: str | None = None,
        known: tuple[int, Vector] | None = None,
        floor: float | None = None,
    ) -> list[tuple[Row, float]]:
        """The ``limit`` most similar current memories, best first (exact).

        ``floor`` leaves out rows less similar than it (fewer results, less work).
        """
        n = len(self.rows)
        if n == 0 or limit <= 0:
            return []
        self.check_dims(vector)
        q = _unit(vector)
        if known is not None and known[0] == self.generation and len(known[1]) <= n:
            m = len(known[1])
            sims = np.empty(n, dtype=np.float32)
            sims[:m] = known[1]
            sims[m:] = self.matrix[m:n] @ q
        else:
            sims = self.matrix[:n] @ q
        if key_prefix is not None:
            prefix = normalize_key(key_prefix)
            keep = np.fromiter(
                (r is not None and normalize_key(r.key).startswith(prefix) for r in self.rows),
                dtype=bool,
                count=n,
            )
        else:
            keep = self.alive[:n]
        if floor is not None:
            keep = keep & (sims >= np.float32(floor))
        pool = np.flatnonzero(keep)
        if len(pool) == 0:
            return []
        scores = sims[pool]
        k = min(limit, len(pool))
        if k < len(pool):
            part = np.argpartition(-scores, k - 1)[:k]
            pool, scores = pool[part], scores[part]
        order = np.argsort(-scores, kind="stable")
        out = []
        for i, score in zip(pool[order], scores[order], strict=True):
            row = self.rows[int(i)]
            if row is not None:
                out.append((row, float(score)))
        return out

    def note_head(self, memory_id: str, head: int) -> None:
        """The memory now has a version numbered ``head`` (history, written after its
        current version): its row remembers it, so its next version is numbered past it."""
        at = self.by_memory.get(memory_id)
        row = self.rows[at] if at is not None else None
        if at is not None and row is not None and (row.head or 0) < head:
            self.rows[at] = replace(row, head=head)

    def note_rank(self, memory_id: str, rank: str) -> None:
        """The memory's current version was reinforced by evidence of ``rank``."""
        at = self.by_memory.get(memory_id)
        row = self.rows[at] if at is not None else None
        if at is not None and row is not None and row.rank < rank:
            self.rows[at] = replace(row, rank=rank)

    def _keep(self, key_prefix: str | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
        n = len(self.rows)
        if key_prefix is None:
            return self.alive[:n]
        prefix = normalize_key(key_prefix)
        return np.fromiter(
            (r is not None and normalize_key(r.key).startswith(prefix) for r in self.rows),
            dtype=bool,
            count=n,
        )

    def hybrid(
        self,
        vector: Vector,
        query: str,
        limit: int,
        key_prefix: str | None = None,
        *,
        pool: int = 50,
        lexical: bool = True,
    ) -> list[tuple[Row, float, Ranked[int]]]:
        """The ``limit`` best current memories by :func:`~mongomem.ranking.fuse` of the
        ``pool`` best by BM25 and the ``pool`` best by cosine; each with its cosine.

        ``lexical=False`` ranks by cosine alone (still explained as a :class:`Ranked`).
        """
        n = len(self.rows)
        if n == 0 or limit <= 0:
            return []
        self.check_dims(vector)
        sims = self.matrix[:n] @ _unit(vector)
        keep = self._keep(key_prefix)
        dense = _best(np.where(keep, sims, np.float32(-2.0)), keep, max(pool, limit))
        lex = self.lexical.top(query, n, max(pool, limit), keep) if lexical else []
        out = []
        for ranked in fuse(lex, dense, limit):
            row = self.rows[ranked.key]
            if row is not None:
                out.append((row, float(sims[ranked.key]), ranked))
        return out

    def apply_documents(self, docs: Iterable[Doc]) -> None:
        """Bring the rows of the memories of ``docs`` (any of their versions) up to date.

        A memory with a ``DELETE`` or ``EXPIRE`` version among ``docs`` is closed: no
        version below it is kept as current, even one still marked so while the
        deletion is being completed (an UPDATE planned on it would continue a
        deleted history). The highest number otherwise seen becomes the row's head.
        """
        docs = list(docs)
        highest: dict[str, int] = {}
        closed: dict[str, int] = {}
        for doc in docs:
            mid, number = doc["memory_id"], int(doc["version"])
            highest[mid] = max(highest.get(mid, 0), number)
            if doc.get("status") in CLOSED_STATUSES:
                closed[mid] = max(closed.get(mid, 0), number)
        for doc in docs:
            row = Row.of(doc)
            if highest[row.memory_id] > max(row.version, row.head or 0):
                row = replace(row, head=highest[row.memory_id])
            if doc.get("status") == "current" and row.version > closed.get(row.memory_id, 0):
                self.upsert(row, decode_embedding(doc["embedding"]))
            else:
                self.remove(row.version_id, row.memory_id)
                self.note_head(row.memory_id, row.version)  # a history version past it


def _best(scores: Vector, keep: Any, limit: int) -> list[tuple[int, float]]:
    pool = np.flatnonzero(keep)
    if len(pool) == 0:
        return []
    values = scores[pool]
    if limit < len(pool):
        part = np.argpartition(-values, limit - 1)[:limit]
        pool, values = pool[part], values[part]
    order = np.lexsort((pool, -values))
    return [(int(pool[i]), float(values[i])) for i in order]


def _unit(vector: Vector) -> Vector:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class IndexCache:
    """Per-(scope, type) :class:`ScopeIndex` objects, refreshed from the scope log.

    At most ``max_rows`` rows are cached across scopes; the least recently used
    scopes are dropped first (and reloaded when next asked for).
    """

    def __init__(
        self,
        memories: AsyncCollection[Doc],
        log: AsyncCollection[Doc],
        *,
        max_rows: int = 1_000_000,
    ) -> None:
        self._memories = memories
        self._log = log
        self._indexes: OrderedDict[str, ScopeIndex] = OrderedDict()
        self.max_rows = max_rows

    def peek(self, scope: MemoryScope, memory_type: str) -> ScopeIndex:
        key = scope_log_id(scope, memory_type)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = ScopeIndex()
            self._evict(keep=key)
        self._indexes.move_to_end(key)
        return index

    def _evict(self, keep: str) -> None:
        total = sum(len(ix.rows) for ix in self._indexes.values())
        for key in list(self._indexes):
            if total <= self.max_rows:
                return
            index = self._indexes[key]
            if key == keep or index.lock.locked():
                continue
            total -= len(index.rows)
            del self._indexes[key]

    async def fresh(self, scope: MemoryScope, memory_type: str) -> ScopeIndex:
        """The scope's index, brought up to date with what is committed now."""
        index = self.peek(scope, memory_type)
        since = _FRESH_SINCE.get()
        async with index.lock:
            if since is not None and index.rev >= 0 and index.read_at >= since:
                return index  # read within this operation (fresh_since)
            sent = time.monotonic()
            entry = await self._log.find_one({"_id": scope_log_id(scope, memory_type)})
            rev = int(entry["rev"]) if entry else 0
            index.deletes = int(entry.get("deletes", 0)) if entry else 0
            if rev == index.rev or (entry is None and index.rev < 0):
                # Same revision; or a scope never written (every write bumps its log
                # entry): nothing to load, and no scan of the collection for it.
                index.rev, index.read_at = rev, sent
                return index
            logged: list[Doc] = list(entry.get("log", [])) if entry else []
            gap = rev - index.rev
            if index.rev >= 0 and 0 < gap <= len(logged):
                ids = {i for e in logged[-gap:] for i in e.get("ids", [])}
                cursor = self._memories.find({"_id": {"$in": sorted(ids)}}, PROJECTION)
                index.apply_documents(await cursor.to_list())
            else:
                # Build aside and swap, so searches never see a half-loaded index.
                loaded = ScopeIndex(dims=index.dims)
                query = {
                    **scope_filter(scope.project_id, scope.user_id),
                    "memory_type": memory_type,
                    "status": "current",
                }
                async for doc in self._memories.find(query, PROJECTION, batch_size=5000):
                    loaded.apply_documents((doc,))
                index.replace_with(loaded)
            index.rev = rev
            index.read_at = sent
            return index

    def note_write(
        self, scope: MemoryScope, memory_type: str, rev: int, docs: Iterable[Doc]
    ) -> None:
        """Apply this process's own write when it is the next revision; else wait for refresh."""
        index = self.peek(scope, memory_type)
        if index.rev >= 0 and rev == index.rev + 1:
            index.apply_documents(docs)
            index.rev = rev
