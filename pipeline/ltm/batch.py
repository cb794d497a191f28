"""Reconciling many candidates with few round trips (the stage's fast path).

:func:`reconcile_batch` gives the same guarantee as
:meth:`MemoryStore.reconcile <pipeline.ltm.store.MemoryStore.reconcile>`
(idempotent, conflict-safe, no transactions) and the same per-scope order,
but pays round trips per *batch* instead of per candidate:

1. one ledger lookup for the whole batch (already applied → replayed), and one
   lookup of ``candidate_ids`` (interrupted earlier → completed one by one);
2. per (scope, type), in order: plan each candidate against the scope's index,
   applying each decision to the in-memory index at once, so a later candidate
   sees an earlier one's effect (two ADDs of one key become ADD + REINFORCE);
3. write a *group*: the new versions in one ordered ``insert_many``, then the
   conditional updates (supersede, reinforce) concurrently — a group is closed
   early whenever a decision would touch a version already touched in it, so
   no two conditional updates of one group race;
4. bump the scope log once, then the decision log and the ledger in bulk.

**When a concurrent writer interferes** (a duplicate key on an insert — the
same version id written by someone else), the group's remaining work goes
through the one-at-a-time path in order: candidates whose versions were
inserted are completed (roll forward), the others are planned again against
fresh state. A REINFORCE whose target was superseded meanwhile is planned
again on its own. Under such a conflict a candidate may be recorded as an
UPDATE where a one-at-a-time apply would have said REINFORCE (an extra
version, never a duplicate memory or two current versions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from pymongo import ReplaceOne
from pymongo.errors import BulkWriteError, PyMongoError

from pipeline.errors import StorageError
from pipeline.ltm.documents import to_document
from pipeline.ltm.index import Row, ScopeIndex, bump_scope
from pipeline.ltm.plan import Decision, build_version
from pipeline.ltm.search import ExactCosineSearch, neighbours_in
from pipeline.models import Action, MemoryCandidate, MemoryScope, MemoryType

if TYPE_CHECKING:
    from pipeline.ltm.store import MemoryStore, Outcome

__all__ = ["reconcile_batch"]

Doc = dict[str, Any]


@dataclass
class _Group:
    """Planned, not yet written decisions of one (scope, type)."""

    items: list[tuple[int, MemoryCandidate, Decision]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)

    def clashes(self, decision: Decision) -> bool:
        target = decision.base_version_id
        return target is not None and target in self.touched


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB operation failed: {exc}") from exc


async def reconcile_batch(
    store: MemoryStore, candidates: Sequence[MemoryCandidate]
) -> list[Outcome]:
    """Reconcile ``candidates`` in order; outcomes in the same order."""
    from pipeline.ltm.store import Outcome

    if not isinstance(store.search_backend, ExactCosineSearch):
        return [await store.reconcile(c) for c in candidates]
    outcomes: dict[int, Outcome] = {}
    ids = list(dict.fromkeys(c.candidate_id for c in candidates))
    done = {d["_id"]: d for d in await _run(store.ledger.find({"_id": {"$in": ids}}).to_list())}
    started = {
        cid
        for d in await _run(
            store.memories.find({"candidate_ids": {"$in": ids}}, {"candidate_ids": 1}).to_list()
        )
        for cid in d.get("candidate_ids", [])
    }
    first: dict[str, int] = {}
    groups: dict[tuple[MemoryScope, str], list[tuple[int, MemoryCandidate]]] = {}
    for i, c in enumerate(candidates):
        cid = c.candidate_id
        if cid in done:
            outcomes[i] = Outcome.model_validate({**done[cid]["outcome"], "replayed": True})
        elif cid in first:
            continue  # a repeat within the batch: answered from the first below
        elif cid in started:
            first[cid] = i
            outcomes[i] = await store.reconcile(c)
        else:
            first[cid] = i
            groups.setdefault((c.scope, c.memory_type), []).append((i, c))
    for (scope, memory_type), items in groups.items():
        await _reconcile_scope(store, scope, memory_type, items, outcomes)
    for i, c in enumerate(candidates):
        if i not in outcomes:
            outcomes[i] = outcomes[first[c.candidate_id]].model_copy(update={"replayed": True})
    return [outcomes[i] for i in range(len(candidates))]


async def _reconcile_scope(
    store: MemoryStore,
    scope: MemoryScope,
    memory_type: str,
    items: list[tuple[int, MemoryCandidate]],
    outcomes: dict[int, Outcome],
) -> None:
    index = await store.cache.fresh(scope, memory_type)
    group = _Group()
    for i, candidate in items:
        neighbours = neighbours_in(index, candidate, store.thresholds.neighbours)
        decision = await store.decide(candidate, neighbours)
        if group.clashes(decision):
            await _write_group(store, scope, memory_type, index, group, outcomes)
            index = await store.cache.fresh(scope, memory_type)
            group = _Group()
            neighbours = neighbours_in(index, candidate, store.thresholds.neighbours)
            decision = await store.decide(candidate, neighbours)
        group.items.append((i, candidate, decision))
        if decision.base_version_id is not None:
            group.touched.add(decision.base_version_id)
        if decision.action is not Action.REINFORCE:
            row = Row(decision.version_id, decision.memory_id, decision.version, candidate.key,
                      candidate.text)  # fmt: skip
            index.upsert(row, np.asarray(candidate.embedding, dtype=np.float32))
    if group.items:
        await _write_group(store, scope, memory_type, index, group, outcomes)


async def _write_group(
    store: MemoryStore,
    scope: MemoryScope,
    memory_type: str,
    index: ScopeIndex,
    group: _Group,
    outcomes: dict[int, Outcome],
) -> None:
    from pipeline.ltm.store import Outcome

    now = store.clock()
    inserts = [
        (i, to_document(build_version(c, d, now), c.candidate_id, bson_vector=store.bson_vectors))
        for i, c, d in group.items
        if d.action is not Action.REINFORCE
    ]
    inserted = len(inserts)
    if inserts:
        try:
            await store.memories.insert_many([doc for _, doc in inserts], ordered=True)
        except BulkWriteError as exc:
            # Ordered: everything before the first failed index went in. (Not
            # ``nInserted``: mongo-java-server reports the attempted count there.)
            errors = exc.details.get("writeErrors", [])
            inserted = min((int(e["index"]) for e in errors), default=0)
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
    if inserted < len(inserts):
        # Someone else wrote one of these versions: finish this group one by one.
        index.rev = -1
        for i, c, _ in group.items:
            outcomes[i] = await store.reconcile(c)
        return
    redo: set[int] = set()
    results = await asyncio.gather(*(_conditional(store, c, d, now) for _, c, d in group.items))
    for (i, _, _), ok in zip(group.items, results, strict=True):
        if not ok:
            redo.add(i)
    changed = [doc["_id"] for _, doc in inserts] + [
        d.base_version_id
        for _, _, d in group.items
        if d.action is Action.UPDATE and d.base_version_id is not None
    ]
    if changed:
        rev = await _run(bump_scope(store.scope_log, scope, memory_type, changed))
        if rev == index.rev + 1:
            index.rev = rev
    applied = [(i, c, d) for i, c, d in group.items if i not in redo]
    finished = []
    for i, c, d in applied:
        outcomes[i] = Outcome(
            candidate_id=c.candidate_id, action=d.action, memory_id=d.memory_id,
            version=d.version, version_id=d.version_id, reason=d.reason,
        )  # fmt: skip
        finished.append((c, d, outcomes[i]))
    await _record_many(store, finished, now)
    for i, c, _ in group.items:
        if i in redo:
            outcomes[i] = await store.reconcile(c)


async def _conditional(
    store: MemoryStore, candidate: MemoryCandidate, decision: Decision, now: datetime
) -> bool:
    """The supersede or reinforce of one decision; False when its target moved on."""
    cid = candidate.candidate_id
    if decision.action is Action.ADD:
        return True
    if decision.action is Action.UPDATE:
        await _run(store.memories.find_one_and_update(
            {"_id": decision.base_version_id, "status": "current"},
            {"$set": {"status": "superseded", "superseded_at": now,
                      "superseded_by": decision.version_id, "updated_at": now}},
            projection={"_id": 1},
        ))  # fmt: skip
        return True
    update: Doc = {
        "$inc": {"reinforcement_count": 1},
        "$push": {"evidence": candidate.evidence.model_dump(mode="python"), "candidate_ids": cid},
        "$set": {"updated_at": now},
    }
    definition = candidate.fields.get("definition")
    if candidate.memory_type == MemoryType.TAXONOMIC and isinstance(definition, str):
        update["$addToSet"] = {"variants": definition}
    found = await _run(store.memories.find_one_and_update(
        {"_id": decision.version_id, "status": "current", "candidate_ids": {"$ne": cid}},
        update, projection={"_id": 1},
    ))  # fmt: skip
    return found is not None


async def _record_many(
    store: MemoryStore, finished: list[tuple[MemoryCandidate, Decision, Outcome]], now: datetime
) -> None:
    from pipeline.ltm.store import decision_entry, ledger_entry

    if not finished:
        return
    await _run(store.decisions.bulk_write(
        [ReplaceOne({"_id": c.candidate_id}, decision_entry(c, d, o, now), upsert=True)
         for c, d, o in finished],
        ordered=False,
    ))  # fmt: skip
    try:
        await store.ledger.insert_many([ledger_entry(o, now) for _, _, o in finished],
                                       ordered=False)  # fmt: skip
    except BulkWriteError as exc:
        if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
            raise StorageError(f"writing the ledger failed: {exc}") from exc
    except PyMongoError as exc:
        raise StorageError(f"writing the ledger failed: {exc}") from exc
