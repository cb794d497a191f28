"""Turn search (SPEC M2): a user's whole conversation history, hybrid-ranked.

``search_turns(query, limit, sessions=, speaker=, since=, until=)`` ranks every
turn of one user (all sessions) with the ranker memories use
(:func:`~mongomem.ranking.fuse` of BM25 and cosine), after narrowing the
candidates by session, speaker and time range (``created_at``: when the turn
was said).

Time-aware (SPEC M1): ``as_of`` is the moment the question is asked (default
now). Turns said after it are not candidates, and a time expression in the
query ("yesterday", "two weeks ago", "last May", :mod:`mongomem.time_expressions`)
is resolved against it: the expression's words are left out of what BM25 and
the embedding read, and the candidates said inside its window form a third
list (ordered by cosine) fused with weight :data:`TIME_WEIGHT` — a boost, not
a filter, since people misremember when they said something. ``time_aware=False``
ranks the whole query as words, with no boost.

Speakers' names are a field (SPEC M1): a name of one of the user's speakers in
the query ("What is Maya's job?") is left out of what the query embedding reads,
and the candidates that speaker said form a fourth list (ordered by cosine)
fused with weight :data:`SPEAKER_WEIGHT` — again a boost, not a filter
(:func:`named_speakers`; ``speaker_aware=False`` turns it off, ``speaker=`` is
the filter). Each hit's ``ranks.speaker_rank`` is its place in that list.

Where the embeddings come from. ``record_turn`` stays one insert: a turn's
embedding is computed **lazily, once**, by the first turn search of its user
that sees the turn, and stored in :data:`~mongomem.adapters.mongo.TURN_VECTORS`
(``_id`` = the turn id, with the turn's project, user and session), so later
searches — in any process — read it instead of embedding again. Those
documents are derived data: erasing a user or a session deletes them with the
turns (:mod:`mongomem.erasure.erase`), and a vector whose turn is gone is
never returned (every hit is read back from ``turns``).

In process, each user has a :class:`TurnIndex` (a float32 matrix plus BM25
postings). It catches up before a search when it is older than
``refresh_s`` or was marked stale by this process (``note_turn``): it lists
the user's turn ids, loads the new ones (their stored vectors, or embeds the
missing ones) and drops the gone ones. A turn recorded in another process is
therefore searchable within ``refresh_s``; a deleted one is never returned.
Building a user's index from scratch (or catching up more than
:data:`LOAD_CHUNK` new turns) reads the user's stored vectors, then the user's
turns, in one pass each, by owner (no embedding when they are all stored); a
smaller catch-up reads its new turns by id.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import AwareDatetime, Field, ValidationError, model_validator
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, PyMongoError

from mongomem.adapters.embeddings import Embedder, embed_queries
from mongomem.adapters.lexical import LexicalIndex
from mongomem.adapters.mongo import TURN_VECTORS, TURNS, Document
from mongomem.adapters.rerank import Reranker, rerank
from mongomem.errors import InputError, StorageError
from mongomem.lazy import lazy_module
from mongomem.models import Frozen, Identifier, Turn
from mongomem.ranking import MAX_QUERY_CHARS, HitRanks, fuse, hit_ranks
from mongomem.stm.turns import NOT_AN_EVENT, turn_from_document
from mongomem.time_expressions import TimeWindow, find_time_window

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = [
    "TurnHit",
    "TurnIndex",
    "TurnQuery",
    "TurnSearch",
    "named_speakers",
    "speaker_of",
    "turn_query",
    "turn_text",
    "turn_words",
    "without_names",
]

#: Candidates each retriever hands to the fusion (40: chosen on the tuning part of the
#: recall set, grid 10/20/40, where 40 gave the best recall@10).
POOL = 40
#: Turn search's RRF constant and BM25 weight (dense 1.0; :func:`~mongomem.ranking.fuse`),
#: chosen on the tuning part of the recall set (grid k 2-60, weight 0.25-1.0); memory
#: search keeps :data:`~mongomem.ranking.RRF_K` and :data:`~mongomem.ranking.LEXICAL_WEIGHT`.
TURN_RRF_K = 10
TURN_LEXICAL_WEIGHT = 0.5
#: The weight of the "said inside the query's time window" list in the fusion (dense 1.0),
#: chosen on the tuning part of the recall set's time-expression questions.
TIME_WEIGHT = 1.0
#: The weight of the "said by a speaker the query names" list (dense 1.0); see
#: :func:`named_speakers`. Chosen on the tuning part of the recall set (0.5/1/2).
SPEAKER_WEIGHT = 1.0
Vector: TypeAlias = "np.ndarray[Any, np.dtype[np.float32]]"


class TurnQuery(Frozen):
    """A turn search: what to look for and where (every filter optional)."""

    query: str = Field(max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=10, ge=1, le=100)
    sessions: tuple[Identifier, ...] | None = None
    speaker: str | None = Field(default=None, min_length=1, max_length=200)
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    #: Turns of the same session before and after each hit to return with it (0–5).
    neighbours: int = Field(default=0, ge=0, le=5)
    #: When the question is asked (default now): later turns are left out, and time
    #: expressions in the query are resolved against it (see the module docstring).
    as_of: AwareDatetime | None = None
    #: Whether a time expression in the query boosts the turns said in its window.
    time_aware: bool = True
    #: Whether speakers' names in the query are a field (:func:`named_speakers`): left out
    #: of what the embedding reads, and the turns they said boosted (hybrid ranking only).
    speaker_aware: bool = True

    def window(self, now: datetime) -> TimeWindow | None:
        """The window of the query's time expression, resolved against ``as_of`` (else
        ``now``); ``None`` without one or with ``time_aware`` off."""
        if not self.time_aware:
            return None
        return find_time_window(self.query, self.as_of or now)

    def words(self, window: TimeWindow | None) -> str:
        """What the retrievers read: the query without the time expression's words."""
        return self.query if window is None else window.without(self.query)

    @model_validator(mode="after")
    def _check(self) -> TurnQuery:
        if not self.query.strip():
            raise ValueError("the search query is empty")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until")
        return self


def turn_query(**fields: Any) -> TurnQuery:
    """A :class:`TurnQuery`, or an :class:`~mongomem.errors.InputError` naming the bad field."""
    try:
        return TurnQuery(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"]:
            where = str(first["loc"][0])
        else:  # the model's own checks: an empty query, or since after until
            where = "since" if "since" in str(first["msg"]) else "query"
        raise InputError(f"{where}: {first['msg']}", field=where) from None


class TurnHit(Frozen):
    """One turn found: the turn (its session and date), its cosine, its ranks and,
    when asked for, its neighbours in the session (oldest first)."""

    turn: Turn
    session_id: str
    created_at: AwareDatetime
    score: float
    ranks: HitRanks
    neighbours: tuple[Turn, ...] = ()


def speaker_of(doc: Document) -> str | None:
    """Who said a turn: the document's ``speaker``, else its metadata's, else ``None``."""
    found = doc.get("speaker")
    if found is None:
        meta = doc.get("metadata") or {}
        found = meta.get("speaker") if isinstance(meta, dict) else None
    return str(found) if found is not None else None


def turn_text(doc: Document) -> str:
    """What a turn's embedding is made of: its content, after its speaker's name if known."""
    speaker = speaker_of(doc)
    content = str(doc.get("content", ""))
    return f"{speaker}: {content}" if speaker else content


def named_speakers(query: str, speakers: Iterable[str]) -> frozenset[str]:
    """The speakers (of one user's turns) that ``query`` names, as whole words, case
    ignored ("What is Maya's job?" names ``Maya``).

    Turn search treats such a name as a field, not as words: an embedding of a
    question that names a person is pulled towards every turn that person said
    (the embedded turn text starts with its speaker's name, :func:`turn_text`),
    so the name crowds out what is asked. The name is therefore left out of what
    the query embedding reads (:func:`without_names`), and the turns said by a
    named speaker form a list of their own (ordered by cosine) fused with weight
    :data:`SPEAKER_WEIGHT` — a boost, not a filter: the answer may have been said
    by the other person. ``speaker=`` is the filter. On the tuning part of the
    recall set this lifted hybrid recall@10 by about 6 points (``bench.recall``).
    """
    return frozenset(
        name
        for name in speakers
        if name.strip() and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", query, re.IGNORECASE)
    )


def without_names(text: str, names: Iterable[str]) -> str:
    """``text`` without the ``names`` (and their possessive "'s"), or ``text`` itself when
    nothing else would be left."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True) if n)
    if not alternatives:
        return text
    out = re.sub(rf"(?<!\w)(?:{alternatives})(?:['’]s)?(?!\w)", " ", text, flags=re.IGNORECASE)
    out = re.sub(r"\s+", " ", out).strip()
    return out if re.search(r"\w", out) else text


def turn_words(doc: Document) -> str:
    """What BM25 reads of a turn: its content only.

    Not the speaker's name: a name in the query would then match every turn of
    that speaker and crowd the fused list (on the tuning part of the recall set,
    hybrid recall@10 fell 21 points below dense-only with names in the text).
    ``speaker=`` is the filter for who said it.
    """
    return str(doc.get("content", ""))


@dataclass
class TurnIndex:
    """One user's turns: a unit-vector matrix, BM25 postings and the filter columns."""

    ids: list[str | None] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    matrix: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    alive: np.ndarray[Any, np.dtype[np.bool_]] = field(
        default_factory=lambda: np.zeros(0, dtype=bool)
    )
    times: np.ndarray[Any, np.dtype[np.float64]] = field(
        default_factory=lambda: np.zeros(0, dtype=np.float64)
    )
    sessions: list[str] = field(default_factory=list)
    speakers: list[str | None] = field(default_factory=list)
    #: How many live turns each speaker said (the names :func:`named_speakers` looks for).
    names: Counter[str] = field(default_factory=Counter)
    lexical: LexicalIndex = field(default_factory=LexicalIndex)
    loaded_at: float = -1.0
    stale: bool = True
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __len__(self) -> int:
        return len(self.at)

    def add(self, doc: Document, vector: Vector) -> None:
        turn_id = str(doc["_id"])
        if turn_id in self.at:
            return
        n = len(self.ids)
        if self.matrix.shape[1] != vector.shape[0]:
            if len(self.at):
                raise StorageError("turn embeddings of one user have different sizes")
            self.matrix = np.zeros((0, vector.shape[0]), dtype=np.float32)
        if n >= self.matrix.shape[0]:
            size = max(256, n * 2)
            grown = np.zeros((size, self.matrix.shape[1]), dtype=np.float32)
            grown[:n] = self.matrix[:n]
            self.matrix = grown
            for name in ("alive", "times"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        norm = float(np.linalg.norm(vector))
        self.matrix[n] = vector / norm if norm else vector
        self.alive[n] = True
        self.times[n] = doc["created_at"].timestamp()
        self.ids.append(turn_id)
        self.sessions.append(str(doc["session_id"]))
        speaker = speaker_of(doc)
        self.speakers.append(speaker)
        if speaker is not None:
            self.names[speaker] += 1
        self.lexical.add(n, turn_words(doc))
        self.at[turn_id] = n

    def remove(self, turn_id: str) -> None:
        n = self.at.pop(turn_id, None)
        if n is None:
            return
        self.ids[n] = None
        speaker = self.speakers[n]
        if speaker is not None:
            self.names[speaker] -= 1
            if self.names[speaker] <= 0:
                del self.names[speaker]
        self.alive[n] = False
        self.matrix[n] = 0.0
        self.lexical.remove(n)

    def candidates(self, q: TurnQuery) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which positions pass the query's filters."""
        n = len(self.ids)
        keep = self.alive[:n].copy()
        if q.sessions is not None:
            wanted = set(q.sessions)
            keep &= np.fromiter((s in wanted for s in self.sessions), dtype=bool, count=n)
        if q.speaker is not None:
            who = q.speaker.casefold()
            keep &= np.fromiter(
                (s is not None and s.casefold() == who for s in self.speakers),
                dtype=bool,
                count=n,
            )
        if q.since is not None:
            keep &= self.times[:n] >= q.since.timestamp()
        if q.until is not None:
            keep &= self.times[:n] <= q.until.timestamp()
        if q.as_of is not None:
            keep &= self.times[:n] <= q.as_of.timestamp()
        return keep

    def rank(
        self,
        q: TurnQuery,
        vector: Vector,
        *,
        lexical: bool = True,
        dense: bool = True,
        window: TimeWindow | None = None,
        named: frozenset[str] = frozenset(),
    ) -> list[tuple[str, float, Any]]:
        """``(turn_id, cosine, Ranked)`` of the best candidates, fused (or one retriever);
        ``vector`` embeds :meth:`TurnQuery.words` (without the ``named`` speakers, see
        :func:`named_speakers`), ``window`` is :meth:`TurnQuery.window`."""
        n = len(self.ids)
        if n == 0:
            return []
        keep = self.candidates(q)
        pool = max(POOL, q.limit)
        sims = self.matrix[:n] @ _unit(vector)
        by_cosine: list[tuple[int, float]] = []
        if dense:
            by_cosine = _best(sims, keep, pool)
        by_words = self.lexical.top(q.words(window), n, pool, keep) if lexical else []
        by_time: list[tuple[int, float]] = []
        if window is not None:
            times = self.times[:n]
            inside = keep & (times >= window.start.timestamp()) & (times < window.end.timestamp())
            by_time = _best(sims, inside, pool)
        by_speaker: list[tuple[int, float]] = []
        if named and q.speaker is None:
            said = np.fromiter((s in named for s in self.speakers), dtype=bool, count=n)
            by_speaker = _best(sims, keep & said, pool)
        fused = fuse(
            by_words,
            by_cosine,
            q.limit,
            k=TURN_RRF_K,
            lexical_weight=TURN_LEXICAL_WEIGHT,
            boost=by_time,
            boost_weight=TIME_WEIGHT,
            speaker=by_speaker,
            speaker_weight=SPEAKER_WEIGHT,
        )
        out = []
        for ranked in fused:
            turn_id = self.ids[ranked.key]
            if turn_id is not None:
                out.append((turn_id, float(sims[ranked.key]), ranked))
        return out


def _hit_text(hit: TurnHit) -> str:
    """What the reranker reads of a turn: what its embedding reads (:func:`turn_text`)."""
    doc: Document = {"content": hit.turn.content, "metadata": hit.turn.metadata}
    if hit.turn.speaker is not None:
        doc["speaker"] = hit.turn.speaker
    return turn_text(doc)


def _unit(vector: Vector) -> Vector:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


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


def _owned(doc: Document, whose: Document) -> bool:
    return all(doc.get(k) == v for k, v in whose.items())


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB failed during turn search: {exc}") from exc


#: Turns a catch-up reads by id in one query, and adds to an index at a time.
LOAD_CHUNK = 2000
#: Documents per batch of a read by owner: a user's vectors in one reply were 164 MB at
#: 100,000 turns, past the server's message size (mongo-java-server sends what it is
#: not told to split).
READ_BATCH = 1000


class TurnSearch:
    """Turn search over ``db`` (see the module docstring); one per process.

    ``max_users`` user indexes are kept (least recently searched dropped first).
    ``batch`` turns are embedded at a time when vectors are missing. With a
    ``reranker``, the ``rerank_depth`` best fused turns are reordered by it
    (:mod:`mongomem.adapters.rerank`).
    """

    def __init__(
        self,
        db: AsyncDatabase[Document],
        embedder: Embedder,
        *,
        refresh_s: float = 1.0,
        max_users: int = 64,
        batch: int = 256,
        reranker: Reranker | None = None,
        rerank_depth: int = 20,
    ) -> None:
        self._turns = db[TURNS]
        self._vectors = db[TURN_VECTORS]
        self.embedder = embedder
        self.refresh_s = refresh_s
        self.max_users = max_users
        self.batch = batch
        #: A catch-up of more new turns than this reads the user's, not theirs by id.
        self.by_id_max = LOAD_CHUNK
        self.reranker, self.rerank_depth = reranker, rerank_depth
        self._indexes: OrderedDict[tuple[str, str], TurnIndex] = OrderedDict()

    async def ensure_indexes(self) -> None:
        try:
            await self._vectors.create_index(
                [("project_id", 1), ("user_id", 1), ("session_id", 1)], name="owner"
            )
        except PyMongoError as exc:
            raise StorageError(f"could not create the indexes of {TURN_VECTORS!r}: {exc}") from exc

    def note_turn(self, project_id: str, user_id: str | None) -> None:
        """This process recorded (or erased) turns of the user (``None``: of every user of
        the project): catch up before the next search."""
        for (project, user), index in self._indexes.items():
            if project == project_id and user_id in (None, user):
                index.stale = True

    def _index(self, project_id: str, user_id: str) -> TurnIndex:
        key = (project_id, user_id)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = TurnIndex()
            while len(self._indexes) > self.max_users:
                self._indexes.popitem(last=False)
        self._indexes.move_to_end(key)
        return index

    async def fresh(self, project_id: str, user_id: str) -> TurnIndex:
        """The user's index, caught up when it is stale or older than ``refresh_s``."""
        index = self._index(project_id, user_id)
        async with index.lock:
            if index.stale or time.monotonic() - index.loaded_at >= self.refresh_s:
                await self._catch_up(index, project_id, user_id)
        return index

    async def _catch_up(self, index: TurnIndex, project_id: str, user_id: str) -> None:
        started = time.monotonic()
        whose = {"project_id": project_id, "user_id": user_id}
        present = await _run(self._turns.distinct("_id", {**whose, **NOT_AN_EVENT}))
        known = set(present)
        for turn_id in [t for t in index.at if t not in known]:
            index.remove(turn_id)
        new = [t for t in present if t not in index.at]
        if len(new) > self.by_id_max:
            await self._load_owned(index, whose, set(new))
        else:
            for start in range(0, len(new), LOAD_CHUNK):
                await self._load(index, whose, new[start : start + LOAD_CHUNK])
        index.loaded_at, index.stale = started, False

    async def _load(self, index: TurnIndex, whose: Document, ids: list[str]) -> None:
        # by _id alone (what every server indexes), then checked to be the user's
        found = await _run(self._turns.find({"_id": {"$in": ids}}).to_list())
        docs = [d for d in found if _owned(d, whose)]
        stored = self._usable(
            await _run(
                self._vectors.find({"_id": {"$in": ids}}, {"embedding": 1, "model": 1}).to_list()
            )
        )
        await self._add(index, docs, stored)

    async def _load_owned(self, index: TurnIndex, whose: Document, ids: set[str]) -> None:
        """Load ``ids`` by reading the user's vectors, then the user's turns, in one pass
        each (the owner indexes of both collections), not by id: ``$in`` over thousands
        of ids is a scan of the collection per chunk on mongo-java-server, which made a
        first search of a user of 100,000 turns wait 92 s (issue 28)."""
        try:
            stored = self._usable(
                [
                    d
                    async for d in self._vectors.find(
                        whose, {"embedding": 1, "model": 1}, batch_size=READ_BATCH
                    )
                    if d["_id"] in ids
                ]
            )
            chunk: list[Document] = []
            async for doc in self._turns.find({**whose, **NOT_AN_EVENT}, batch_size=READ_BATCH):
                if doc["_id"] in ids:
                    chunk.append(doc)
                if len(chunk) >= LOAD_CHUNK:
                    await self._add(index, chunk, stored)
                    chunk = []
        except PyMongoError as exc:
            raise StorageError(f"MongoDB failed during turn search: {exc}") from exc
        await self._add(index, chunk, stored)

    def _usable(self, vectors: Iterable[Document]) -> dict[str, bytes]:
        """Stored vectors by turn id; another model's vector is made again."""
        return {d["_id"]: d["embedding"] for d in vectors if d.get("model") == self.embedder.name}

    async def _add(self, index: TurnIndex, docs: list[Document], stored: dict[str, bytes]) -> None:
        """Add ``docs`` to ``index``, embedding (and storing) the vectors ``stored`` lacks."""
        missing = [d for d in docs if d["_id"] not in stored]
        for start in range(0, len(missing), self.batch):
            part = missing[start : start + self.batch]
            vectors = await self.embedder.embed([turn_text(d) for d in part])
            rows = []
            for d, v in zip(part, vectors, strict=True):
                blob = np.asarray(v, dtype=np.float32).tobytes()
                stored[d["_id"]] = blob
                rows.append(
                    {
                        "_id": d["_id"],
                        "project_id": d["project_id"],
                        "user_id": d["user_id"],
                        "session_id": d["session_id"],
                        "model": self.embedder.name,
                        "embedding": blob,
                    }
                )
            await self._store_vectors(rows)
        docs.sort(key=lambda d: (d["created_at"], d["session_id"], d["seq"]))
        for d in docs:
            index.add(d, np.frombuffer(stored[d["_id"]], dtype=np.float32))

    async def _store_vectors(self, rows: list[Document]) -> None:
        if not rows:
            return
        try:
            await self._vectors.insert_many(rows, ordered=False)
        except BulkWriteError as exc:  # another process stored some first: theirs are equal
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise StorageError(f"could not store turn embeddings: {exc}") from exc
        except PyMongoError as exc:
            raise StorageError(f"could not store turn embeddings: {exc}") from exc

    async def search(
        self,
        project_id: str,
        user_id: str,
        q: TurnQuery,
        *,
        lexical: bool = True,
        dense: bool = True,
    ) -> list[TurnHit]:
        """The user's turns best for ``q``, best first (``lexical``/``dense`` off: baselines)."""
        index = await self.fresh(project_id, user_id)
        window = q.window(datetime.now(UTC))
        named = named_speakers(q.query, index.names) if q.speaker_aware and dense else frozenset()
        [vector] = await embed_queries(self.embedder, [without_names(q.words(window), named)])
        reranking = self.reranker is not None and lexical and dense
        if reranking:
            wide = q.model_copy(update={"limit": max(q.limit, self.rerank_depth)})
        ranked = index.rank(
            wide if reranking else q,
            np.asarray(vector, dtype=np.float32),
            lexical=lexical,
            dense=dense,
            window=window,
            named=named,
        )
        if not ranked:
            return []
        ids = [turn_id for turn_id, _, _ in ranked]
        whose = {"project_id": project_id, "user_id": user_id}
        docs = {
            d["_id"]: d
            for d in await _run(self._turns.find({"_id": {"$in": ids}}).to_list())
            if _owned(d, whose)  # re-checked on the document, whatever the index said
        }
        for turn_id in ids:
            if turn_id not in docs:  # erased since the index saw it
                index.remove(turn_id)
        hits = [
            TurnHit(
                turn=turn_from_document(docs[t]),
                session_id=docs[t]["session_id"],
                created_at=docs[t]["created_at"],
                score=cosine,
                ranks=hit_ranks(r),
            )
            for t, cosine, r in ranked
            if t in docs
        ]
        if reranking and self.reranker is not None and hits:
            hits = await self._reranked(q, hits)
        hits = hits[: q.limit]
        if q.neighbours and hits:
            hits = await self._with_neighbours(project_id, user_id, hits, q.neighbours)
        return hits

    async def _reranked(self, q: TurnQuery, hits: list[TurnHit]) -> list[TurnHit]:
        assert self.reranker is not None
        head, tail = hits[: self.rerank_depth], hits[self.rerank_depth :]
        order = await rerank(self.reranker, q.query, head, _hit_text)
        if order is None:
            return hits
        scored = [
            h.model_copy(update={"ranks": h.ranks.model_copy(update={"rerank_score": s})})
            for h, s in order
        ]
        return scored + tail

    async def _with_neighbours(
        self, project_id: str, user_id: str, hits: Sequence[TurnHit], n: int
    ) -> list[TurnHit]:
        # a turn's id is made of its seq, so the neighbours are read by _id alone
        near = sorted(
            {
                Turn.make_id(project_id, user_id, h.session_id, seq)
                for h in hits
                for seq in range(max(1, h.turn.seq - n), h.turn.seq + n + 1)
                if seq != h.turn.seq
            }
        )
        found = [
            turn_from_document(d)
            for d in await _run(self._turns.find({"_id": {"$in": near}}).to_list())
            if "event" not in d  # a session end is not a turn
        ]
        out = []
        for h in hits:
            around = sorted(
                (
                    t
                    for t in found
                    if t.session_id == h.session_id
                    and t.seq != h.turn.seq
                    and abs(t.seq - h.turn.seq) <= n
                ),
                key=lambda t: t.seq,
            )
            out.append(h.model_copy(update={"neighbours": tuple(around)}))
        return out
