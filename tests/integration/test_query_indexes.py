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

    def indexes(self) -> dict[str, dict[str, list[str]]]:
        """Collection → name → key fields of each index the code created."""
        out: dict[str, dict[str, list[str]]] = {}
        for name, collection, document in self.commands:
            if name == "createIndexes":
                for index in document.get("indexes", []):
                    out.setdefault(collection, {})[index["name"]] = list(index["key"])
        return out


# ------------------------------------------------------------------ shapes


@dataclass(frozen=True)
class Shape:
    """The predicates of a filter an index can use: equality fields, range fields, the
    ``$or`` branches (each a shape), and whether anything is left for a FETCH filter."""

    equal: frozenset[str]
    ranged: frozenset[str]
    branches: tuple[tuple[Shape, ...], ...] = ()
    #: Predicates no index bounds ($exists, $ne …): always a FETCH filter.
    residual: frozenset[str] = frozenset()

    def describe(self) -> str:
        parts = sorted(self.equal) + [f"{f} (range)" for f in sorted(self.ranged)]
        parts += [f"{f} (filter)" for f in sorted(self.residual)]
        parts += ["$or[" + " | ".join(b.describe() for b in bs) + "]" for bs in self.branches]
        return "{" + ", ".join(parts) + "}"


def shape(query: Mapping[str, Any]) -> Shape:
    equal: set[str] = set()
    ranged: set[str] = set()
    residual: set[str] = set()
    branches: list[tuple[Shape, ...]] = []
    for key, value in query.items():
        if key == "$and":
            for part in value:
                inner = shape(part)
                equal |= inner.equal
                ranged |= inner.ranged
                residual |= inner.residual
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
            else:  # $exists, $ne, $nin, $elemMatch …: a FETCH filter, no bound
                residual.add(key)
        else:
            equal.add(key)  # a plain value (a document value is equality on it too)
    return Shape(frozenset(equal), frozenset(ranged), tuple(branches), frozenset(residual))


@dataclass(frozen=True)
class Plan:
    """The index scan MongoDB can make for a shape: the index, how many of its leading
    keys the filter bounds, whether it also gives the sort, and whether every predicate
    is a bound (keys examined ≈ documents returned) or some are left to a FETCH filter."""

    index: str
    bounded: int
    of: int
    sorted: bool
    tight: bool
    sort_asked: bool = False

    def describe(self) -> str:
        if self.index == "$or":
            return "OR of an IXSCAN per branch"
        how = "keys examined ≈ returned" if self.tight else "FETCH filter after the bounds"
        sort = "; gives the sort" if self.sorted else "; SORT in memory" if self.sort_asked else ""
        return f"IXSCAN {self.index} ({self.bounded} of {self.of} keys; {how}{sort})"


def plan_on(s: Shape, name: str, keys: Sequence[str], sort: Sequence[str]) -> Plan | None:
    """The scan the index ``keys`` bounds for ``s`` (MongoDB's prefix rule), or ``None``."""
    matched = 0
    for key in keys:
        if key not in s.equal:
            break
        matched += 1
    ranged = matched < len(keys) and keys[matched] in s.ranged
    if not matched and not ranged:
        return None
    bounded = matched + int(ranged)
    rest = [key for key in sort if key not in s.equal]
    gives_sort = bool(rest) and list(keys[matched : matched + len(rest)]) == rest
    used = set(keys[:bounded])
    tight = not s.branches and not s.residual and (s.equal | s.ranged) <= used
    return Plan(name, bounded, len(keys), gives_sort, tight, sort_asked=bool(rest))


def index_for(s: Shape, indexes: Mapping[str, Sequence[str]], sort: Sequence[str]) -> Plan | None:
    """The best scan an index the code created (or ``_id``) gives ``s``, or ``None``.

    A top-level ``$or`` whose every branch has an index of its own is an OR plan; one
    that has not is bounded only by the predicates beside it (they must have one)."""
    plans = [
        plan
        for name, keys in {"_id_": ["_id"], **indexes}.items()
        if (plan := plan_on(s, name, keys, sort)) is not None
    ]
    if plans:
        return max(plans, key=lambda p: (p.tight, p.bounded, p.sorted, -p.of))
    if s.branches and all(
        all(index_for(branch, indexes, ()) is not None for branch in branches)
        for branches in s.branches
    ):
        return Plan("$or", 0, 0, sorted=False, tight=True)
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
        cold = AsyncMemory(project_id="p", settings=settings)  # a process with no cache
        try:
            await cold.bind(MemoryRequestContext(user_id="u")).search_semantic("Lisbon")
        finally:
            await cold.close()
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
    seen: dict[tuple[str, str, str], Plan | None] = {}
    for name, collection, s, sort in planned(commands):
        if collection not in GROWING:
            continue
        query = s.describe() + (f" sort {sort}" if sort else "")
        seen[(collection, name, query)] = index_for(s, indexes.get(collection, {}), sort)
    for (collection, name, query), plan in sorted(seen.items()):  # shown with -s
        print(f"{collection} {name} {query} → {plan.describe() if plan else 'COLLSCAN'}")
    # the operations ran: each collection the issue names was asked
    asked = {collection for collection, _, _ in seen}
    assert {"turns", "memories", SNAPSHOTS, "processing_status", "decision_log"} <= asked
    unserved = [f"{n} on {c}: {q}" for (c, n, q), plan in seen.items() if plan is None]
    assert not unserved, "queries no index the code creates serves:\n" + "\n".join(unserved)


def test_the_rule_refuses_a_shape_that_skips_the_leading_key() -> None:
    """The checker itself: a filter without an index's first field is not served, and
    the best index is the one that bounds the most (and gives the sort)."""
    indexes = {
        "scope_type_status_key": ["scope.project_id", "scope.user_id", "memory_type", "status"],
        "export": ["scope.project_id", "scope.user_id", "memory_id", "version"],
    }
    assert index_for(shape({"scope.user_id": "u", "status": "current"}), indexes, []) is None
    scope = index_for(shape({"scope.project_id": "p", "scope.user_id": "u"}), indexes, [])
    assert scope is not None
    assert scope.tight
    assert scope.bounded == 2
    export = index_for(
        shape({"scope.project_id": "p", "scope.user_id": "u"}), indexes, ["memory_id", "version"]
    )
    assert export is not None
    assert export.index == "export"
    assert export.sorted
    by_id = index_for(shape({"_id": {"$in": [1, 2]}}), indexes, [])
    assert by_id is not None
    assert by_id.index == "_id_"
    ranged = index_for(shape({"_id": {"$gt": 1}}), indexes, [])
    assert ranged is not None
    assert ranged.index == "_id_"
    both = shape({"$or": [{"scope.project_id": "p"}, {"_id": 1}]})
    plan = index_for(both, indexes, [])
    assert plan is not None
    assert plan.index == "$or"
    half = shape({"$or": [{"scope.project_id": "p"}, {"evidence.user_id": "u"}]})
    assert index_for(half, indexes, []) is None
    beside = shape({"scope.project_id": "p", "$or": [{"scope.user_id": "u"}, {"e.u": "u"}]})
    loose = index_for(beside, indexes, [])
    assert loose is not None
    assert loose.bounded == 1
    assert not loose.tight
