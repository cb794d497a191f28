"""Every query the pipeline's surfaces send at scale is served by an index the code creates.

mongo-java-server answers most of these shapes by a scan whatever the indexes, so
nothing else in the suite notices a change that defeats an index; on a MongoDB
replica set it would turn an index scan into a collection scan (see
``docs/operations/scaling.md``, "What a replica set changes"). This test runs the
real operations — turn search, memory search and the current-version lookup,
save, import (its existing-key check), export, the snapshot-lineage lookup,
processing status, the erasure sweep — records every command they send
(pymongo command monitoring), learns the indexes from the ``createIndexes``
commands the code itself sent, and checks each query's filter and sort against
them with MongoDB's rule: an index serves a query when its leading keys are
matched by equality (or ``$in``) predicates of the filter, optionally followed by
one range predicate or the sort keys; a top-level ``$or`` is served when every
branch is, or when the predicates beside it are.

No query is written down here: a shape that loses its index fails whatever
code path sent it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from pymongo import monitoring

from mongomem.adapters.mongo import SNAPSHOTS
from mongomem.models import SessionKey
from mongomem.operations.progress import Progress
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.stm.lineage import ensure_lineage_index, snapshot_holding

pytestmark = pytest.mark.integration

#: Commands whose filter (and sort) a server plans: name → (filter field, sort field).
PLANNED = {
    "find": ("filter", "sort"),
    "count": ("query", None),
    "distinct": ("query", None),
    "findAndModify": ("query", "sort"),
}
#: Collections that grow with the store (what issue 28 is about). The rest are keyed by
#: ``_id`` by design (scope logs, ledgers, registers, checkpoints) or are config.
GROWING = {
    "turns",
    "turn_vectors",
    "memories",
    "decision_log",
    SNAPSHOTS,
    "processing_status",
    "extraction_results",
}
RANGE = {"$gt", "$gte", "$lt", "$lte"}
#: First stages of an aggregate that the query planner does not plan from an index: a
#: change stream, and Atlas Search's own (served by search indexes where they exist).
NOT_PLANNED = {"$changeStream", "$vectorSearch", "$search", "$listSearchIndexes", "$rankFusion"}
EQUALITY = {"$eq", "$in"}


# ------------------------------------------------------------------ recording


@dataclass
class Recorder(monitoring.CommandListener):
    """Every command sent to ``database``, as (name, collection, document)."""

    database: str
    commands: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name != self.database:
            return
        name = event.command_name
        document = dict(event.command)
        collection = document.get(name)
        if isinstance(collection, str):
            self.commands.append((name, collection, document))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def indexes(self) -> dict[str, list[list[str]]]:
        """Collection → the key fields of each index the code created (and ``_id``)."""
        out: dict[str, list[list[str]]] = {}
        for name, collection, document in self.commands:
            if name == "createIndexes":
                for index in document.get("indexes", []):
                    out.setdefault(collection, []).append(list(index["key"]))
        return out


# ------------------------------------------------------------------ shapes


@dataclass(frozen=True)
class Shape:
    """The predicates of a filter an index can use: equality fields, range fields, the
    ``$or`` branches (each a shape), and whether anything is left for a FETCH filter."""

    equal: frozenset[str]
    ranged: frozenset[str]
    branches: tuple[tuple[Shape, ...], ...] = ()

    def describe(self) -> str:
        parts = sorted(self.equal) + [f"{f} (range)" for f in sorted(self.ranged)]
        parts += ["$or[" + " | ".join(b.describe() for b in bs) + "]" for bs in self.branches]
        return "{" + ", ".join(parts) + "}"


def shape(query: Mapping[str, Any]) -> Shape:
    equal: set[str] = set()
    ranged: set[str] = set()
    branches: list[tuple[Shape, ...]] = []
    for key, value in query.items():
        if key == "$and":
            for part in value:
                inner = shape(part)
                equal |= inner.equal
                ranged |= inner.ranged
                branches.extend(inner.branches)
        elif key == "$or":
            branches.append(tuple(shape(branch) for branch in value))
        elif key.startswith("$"):
            continue  # $expr, $text …: not an index bound
        elif isinstance(value, Mapping) and value and all(k.startswith("$") for k in value):
            ops = set(value)
            if ops & EQUALITY and ops <= EQUALITY:
                equal.add(key)
            elif ops & RANGE:
                ranged.add(key)
            # $exists, $ne, $nin, $elemMatch …: a FETCH filter, no bound
        else:
            equal.add(key)  # a plain value (a document value is equality on it too)
    return Shape(frozenset(equal), frozenset(ranged), tuple(branches))


def served_by(s: Shape, keys: Sequence[str], sort: Sequence[str]) -> bool:
    """Whether the index of ``keys`` bounds a scan for ``s`` (MongoDB's prefix rule)."""
    matched = 0
    for key in keys:
        if key in s.equal:
            matched += 1
        else:
            break
    rest = keys[matched:]
    if matched:
        return True
    if rest and rest[0] in s.ranged:
        return True
    return bool(sort) and list(sort) == list(keys[: len(sort)]) and not s.equal


def index_for(s: Shape, indexes: Sequence[Sequence[str]], sort: Sequence[str]) -> str | None:
    """The first index that serves ``s`` (``_id`` included), or ``None``."""
    for keys in [["_id"], *indexes]:
        if served_by(s, keys, sort):
            return ",".join(keys)
    if s.branches and all(
        all(index_for(branch, indexes, ()) is not None for branch in branches)
        for branches in s.branches
    ):
        return "$or: one index per branch"
    return None


def planned(
    commands: Sequence[tuple[str, str, dict[str, Any]]],
) -> Iterator[tuple[str, str, Shape, list[str]]]:
    """(command, collection, shape, sort) of every planned query in ``commands``."""
    for name, collection, document in commands:
        if name in PLANNED:
            query_field, sort_field = PLANNED[name]
            query = document.get(query_field) or {}
            sort = list(document.get(sort_field) or {}) if sort_field else []
            yield name, collection, shape(query), sort
        elif name == "aggregate":
            stages = document.get("pipeline") or []
            first = stages[0] if stages else {}
            if set(first) & NOT_PLANNED:
                continue
            match = first.get("$match", {})
            sort = list(stages[1].get("$sort", {})) if len(stages) > 1 else []
            yield name, collection, shape(match), sort
            for stage in stages:  # a $lookup's own pipeline is planned on its collection
                lookup = stage.get("$lookup")
                if isinstance(lookup, Mapping) and lookup.get("pipeline"):
                    inner = lookup["pipeline"][0].get("$match", {})
                    yield "$lookup", lookup["from"], shape(inner), []
        elif name in ("delete", "update"):
            for statement in document.get("deletes" if name == "delete" else "updates", []):
                yield name, collection, shape(statement.get("q", {})), []


# ------------------------------------------------------------------ the operations


async def _exercise(settings: Settings) -> None:
    """Each operation the issue names, as a user or a stage runs it."""
    memory = AsyncMemory(project_id="p", settings=settings)
    try:
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id="s"))
        for i in range(3):
            await chat.record_turn("user", f"I moved to Lisbon in spring, note {i}.")
        await chat.end_session()
        await chat.save_semantic("home city", "The user lives in Lisbon.")
        await chat.get_semantic("home city")  # the current-version lookup
        await chat.search_semantic("where does the user live")
        await chat.search_turns("Lisbon")
        await chat.processing_status()
        await chat.browse_memories(limit=10)
        lines = [line async for line in memory.export_lines("u")]
        await memory.import_user(lines, user_id="v")  # its existing-key check
        await memory.import_user(lines, user_id="v")  # again: everything already there
        other = memory.bind(MemoryRequestContext(user_id="v", session_id="s"))
        await other.record_turn("user", "Still in Lisbon.")
        await memory.erase_user("u", confirm=True)
    finally:
        await memory.close()


async def _stages_indexes(settings: Settings) -> None:
    """The indexes the stages create at start-up (the erasure sweep relies on them)."""
    from mongomem.adapters.mongo import EXTRACTIONS, connect
    from mongomem.stages.extractor.results import ExtractionResults

    client = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        await ensure_lineage_index(db)
        await Progress(db).ensure_index()
        await ExtractionResults(db[EXTRACTIONS]).ensure_index()
    finally:
        await client.close()


async def _lineage_and_status(settings: Settings) -> None:
    from mongomem.adapters.mongo import connect

    client = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        key = SessionKey(project_id="p", user_id="v", session_id="s")
        await snapshot_holding(db, key, 2)
        await Progress(db).session_status(key, ["semantic"])
    finally:
        await client.close()


async def test_every_query_at_scale_is_served_by_an_index_the_code_creates(
    settings: Settings,
) -> None:
    settings = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
    recorder = Recorder(settings.mongodb.database)
    monitoring.register(recorder)
    try:
        await _stages_indexes(settings)
        await _exercise(settings)
        await _lineage_and_status(settings)
    finally:
        # pymongo has no unregister: the listener stops recording once this test ends
        recorder.database = "\0"
    commands = list(recorder.commands)
    indexes = recorder.indexes()
    seen: dict[tuple[str, str, str], str | None] = {}
    for name, collection, s, sort in planned(commands):
        if collection not in GROWING:
            continue
        seen[(name, collection, s.describe() + (f" sort {sort}" if sort else ""))] = index_for(
            s, indexes.get(collection, []), sort
        )
    print("\n".join(f"{c:10} {n:13} {q}  →  {i}" for (n, c, q), i in sorted(seen.items())))
    # the operations ran: each collection the issue names was asked
    asked = {collection for _, collection, _ in seen}
    assert {"turns", "memories", SNAPSHOTS, "processing_status", "decision_log"} <= asked
    unserved = [f"{n} on {c}: {q}" for (n, c, q), i in seen.items() if i is None]
    assert not unserved, "queries no index the code creates serves:\n" + "\n".join(unserved)


def test_the_rule_refuses_a_shape_that_skips_the_leading_key() -> None:
    """The checker itself: a filter without an index's first field is not served."""
    indexes = [["scope.project_id", "scope.user_id", "memory_type", "status", "key_norm"]]
    assert index_for(shape({"scope.user_id": "u", "status": "current"}), indexes, []) is None
    assert index_for(shape({"scope.project_id": "p", "scope.user_id": "u"}), indexes, [])
    assert index_for(shape({"_id": {"$in": [1, 2]}}), indexes, []) == "_id"
    both = shape({"$or": [{"scope.project_id": "p"}, {"_id": 1}]})
    assert index_for(both, indexes, []) == "$or: one index per branch"
    half = shape({"$or": [{"scope.project_id": "p"}, {"evidence.user_id": "u"}]})
    assert index_for(half, indexes, []) is None
