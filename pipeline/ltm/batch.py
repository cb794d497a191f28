"""Reconciling many candidates with few round trips (the stage's fast path).

:func:`reconcile_batch` gives the same guarantee as
:meth:`MemoryStore.reconcile <mongomem.ltm.store.MemoryStore.reconcile>`
(idempotent, conflict-safe, no transactions) and the same per-scope order,
but pays round trips per *batch* instead of per candidate:

1. one ledger lookup for the batch: ``done`` → replayed; ``pending`` (an
   earlier attempt was interrupted) or expired (its entry is renewed, see
   :meth:`~mongomem.ltm.store.MemoryStore.reconcile`) → one at a time; absent →
   marked ``pending`` in one bulk insert, then:
2. per (scope, type), in order: score all candidates against the scope's
   index in one matrix product, plan each one, and apply each decision to the
   in-memory index at once, so a later candidate sees an earlier one's effect
   (two ADDs of one key become ADD + REINFORCE);
   Before planning, the questions the judge will be asked are gathered and
   sent as one call per snapshot, all its types together
   (:func:`~mongomem.ltm.judge.prefetch`);
   each candidate's own plan then uses its verdict only if it asks the very same
   question, and asks alone otherwise, so decisions are those of a judge asked
   one question at a time.
   a candidate older than the current version of its memory (SPEC L2) is placed
   among the history versions as read from MongoDB, so it is set aside and
   reconciled one at a time once the batch's writes are made (an older
   statement never changes the current version, so the others' plans stand);
3. one ordered ``bulk_write`` per (scope, type) with every insert and
   ``_id``-only update (:mod:`mongomem.ltm.writes`) in candidate order, one
   bump of the scope log, then the decision log and the ledger in bulk.

**When a concurrent writer interferes** (a duplicate key: one of our version
ids was written by someone else first), the ordered bulk stops there; the
candidates from that point on go through the one-at-a-time path in order,
which completes what they already wrote and plans the rest against fresh
state. Under such a conflict a later candidate of the batch may be recorded as
an UPDATE where a one-at-a-time apply would have said REINFORCE (an extra
version — never a duplicate memory, never two current versions for long).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, PyMongoError

from mongomem.errors import StorageError
from mongomem.lazy import lazy_module
from mongomem.ltm.documents import to_document
from mongomem.ltm.host import BatchHost
from mongomem.ltm.index import Row, bump_scope
from mongomem.ltm.judge import Judge, JudgeQuestion, prefetch, question_for
from mongomem.ltm.plan import Decision, Outcome, build_version, evidence_rank
from mongomem.ltm.search import ExactCosineSearch, neighbours_in
from mongomem.ltm.writes import (
    DONE,
    SUPERSEDES,
    decision_entry,
    done_update,
    head_update,
    ledger_expired,
    pending_entry,
    reinforce_update,
    supersede_update,
)
from mongomem.models import Action, MemoryCandidate, MemoryScope

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = ["reconcile_batch"]

Doc = dict[str, Any]
Op = InsertOne[Doc] | UpdateOne


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB operation failed: {exc}") from exc


async def reconcile_batch(store: BatchHost, candidates: Sequence[MemoryCandidate]) -> list[Outcome]:
    """Reconcile ``candidates`` in order; outcomes in the same order."""

    if not isinstance(store.search_backend, ExactCosineSearch) or store.capabilities.transactions:
        return [await store.reconcile(c) for c in candidates]
    outcomes: dict[int, Outcome] = {}
    ids = list(dict.fromkeys(c.candidate_id for c in candidates))
    entries = {d["_id"]: d for d in await _run(store.ledger.find({"_id": {"$in": ids}}).to_list())}
    now = store.clock()
    settled = {
        cid for cid, e in entries.items() if e.get("state") == DONE and not ledger_expired(e, now)
    }
    replayed = list(settled)
    logged = {}
    if replayed:
        cursor = store.decisions.find({"_id": {"$in": replayed}}, {"outcome": 1})
        logged = {d["_id"]: d["outcome"] for d in await _run(cursor.to_list())}
    first: dict[str, int] = {}
    fresh: list[str] = []
    groups: dict[tuple[MemoryScope, str], list[tuple[int, MemoryCandidate]]] = {}
    for i, c in enumerate(candidates):
        cid = c.candidate_id
        entry = entries.get(cid)
        if cid in settled:
            outcomes[i] = Outcome.model_validate({**logged[cid], "replayed": True})
        elif cid in first:
            continue  # a repeat within the batch: answered from the first below
        elif entry is not None:  # pending (interrupted earlier) or expired
            first[cid] = i
            outcomes[i] = await store.reconcile(c)
        else:
            first[cid] = i
            fresh.append(cid)
            groups.setdefault((c.scope, c.memory_type), []).append((i, c))
    if fresh:
        now = store.clock()
        try:
            await store.ledger.insert_many(
                [pending_entry(cid, now) for cid in fresh], ordered=False
            )
        except BulkWriteError as exc:  # someone else started some of them: still safe
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise StorageError(f"writing the ledger failed: {exc}") from exc
        except PyMongoError as exc:
            raise StorageError(f"writing the ledger failed: {exc}") from exc
    # One judge call per snapshot for the questions this batch will ask (SPEC I6), its
    # types together: planned against the index as it stands; a question that an earlier
    # candidate of the batch changes is asked alone when its turn comes.
    questions: list[JudgeQuestion] = []
    for (scope, memory_type), items in groups.items():
        questions += await _questions(store, scope, memory_type, items)
    judge = await prefetch(store.judge, questions) if questions else store.judge
    for (scope, memory_type), items in groups.items():
        await _reconcile_scope(store, scope, memory_type, items, outcomes, judge)
    for i, c in enumerate(candidates):
        if i not in outcomes:
            outcomes[i] = outcomes[first[c.candidate_id]].model_copy(update={"replayed": True})
    return [outcomes[i] for i in range(len(candidates))]


async def _questions(
    store: BatchHost,
    scope: MemoryScope,
    memory_type: str,
    items: list[tuple[int, MemoryCandidate]],
) -> list[JudgeQuestion]:
    """The judge questions the candidates of one (scope, type) would ask now."""
    index = await store.cache.fresh(scope, memory_type)
    vectors = np.asarray([c.embedding for _, c in items], dtype=np.float32)
    if vectors.ndim != 2:
        return []  # ragged: reconciled one at a time, asking alone
    index.check_dims(vectors[0])
    generation, sims = index.similarities(vectors)
    t = store.thresholds
    out = []
    for j, (_, c) in enumerate(items):
        near = neighbours_in(index, c, t.neighbours, (generation, sims[j]), t.floor)
        question = await question_for(c, near, t, store.existing_times)
        if question is not None:
            out.append(question)
    return out


async def _reconcile_scope(
    store: BatchHost,
    scope: MemoryScope,
    memory_type: str,
    items: list[tuple[int, MemoryCandidate]],
    outcomes: dict[int, Outcome],
    judge: Judge | None,
) -> None:

    index = await store.cache.fresh(scope, memory_type)
    vectors = np.asarray([c.embedding for _, c in items], dtype=np.float32)
    if vectors.ndim != 2:  # ragged: sizes differ; let the one-at-a-time path say which
        for i, c in items:
            outcomes[i] = await store.reconcile(c)
        return
    index.check_dims(vectors[0])
    generation, sims = index.similarities(vectors)
    t = store.thresholds
    now = store.clock()
    planned: list[tuple[int, MemoryCandidate, Decision]] = []
    inserts: list[tuple[int, Op]] = []  # (position in planned, op)
    updates: list[tuple[int, Op]] = []
    changed: list[str] = []
    deferred: list[tuple[int, MemoryCandidate]] = []
    for k, (i, c) in enumerate(items):
        j = len(planned)  # its position in planned (deferred candidates take none)
        known = (generation, sims[k])
        neighbours = neighbours_in(index, c, t.neighbours, known, t.floor)
        decision = await store.decide(c, neighbours, judge=judge)
        target = next((n for n in neighbours if n.memory_id == decision.memory_id), None)
        if decision.split is not None or (
            target is not None and evidence_rank(c.evidence) < target.rank
        ):
            # Older than the current version (SPEC L2): its place among the history
            # versions is read from MongoDB, which lacks this batch's writes until they
            # are made, so it is placed one at a time after them.
            deferred.append((i, c))
            continue
        if decision.action is Action.REINFORCE:
            updates.append((j, UpdateOne({"_id": decision.version_id}, reinforce_update(c, now))))
            if decision.raises_rank:  # its evidence time moved (SPEC L2)
                changed.append(decision.version_id)
                index.note_rank(decision.memory_id, evidence_rank(c.evidence))
        else:
            version = build_version(c, decision, now)
            doc = to_document(version, c.candidate_id, bson_vector=store.bson_vectors)
            doc[SUPERSEDES] = decision.base_version_id
            inserts.append((j, InsertOne(doc)))
            changed.append(decision.version_id)
            if decision.historical and decision.base_version_id is not None:
                # An older statement entered history; the current version stays (SPEC L2).
                head = head_update(decision.version)
                updates.append((j, UpdateOne({"_id": decision.base_version_id}, head)))
                changed.append(decision.base_version_id)
                index.note_head(decision.memory_id, decision.version)
                planned.append((i, c, decision))
                continue
            if decision.base_version_id is not None:
                supersede = supersede_update(decision.version_id, now)
                updates.append((j, UpdateOne({"_id": decision.base_version_id}, supersede)))
                changed.append(decision.base_version_id)
            row = Row(
                decision.version_id,
                decision.memory_id,
                decision.version,
                c.key,
                c.text,
                evidence_rank(c.evidence),
            )
            index.upsert(row, vectors[k])
        planned.append((i, c, decision))
    # All inserts, then all updates: two commands, and every update comes after the
    # insert of the version it touches (updates of one document commute here).
    ops = [op for _, op in inserts] + [op for _, op in updates]
    ends = [-1] * len(planned)  # index of each candidate's last op
    for at, (j, _) in enumerate([*inserts, *updates]):
        ends[j] = at
    completed = len(ops)
    try:
        if ops:  # none when every candidate was set aside
            result = await store.memories.bulk_write(ops, ordered=True)
            if result.matched_count != sum(isinstance(op, UpdateOne) for op in ops):
                completed = -1  # an update found no document: trust nothing, redo all
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        completed = min((int(e["index"]) for e in errors), default=-1)
    except PyMongoError as exc:
        index.rev = -1
        raise StorageError(f"MongoDB write failed: {exc}") from exc
    done = [(i, c, d) for (i, c, d), end in zip(planned, ends, strict=True) if end < completed]
    redo = [(i, c) for (i, c, _), end in zip(planned, ends, strict=True) if end >= completed]
    if changed:
        rev = await _run(bump_scope(store.scope_log, scope, memory_type, changed))
        if redo:
            index.rev = -1  # the in-memory plan went further than the writes: reload
        elif rev == index.rev + 1:
            index.rev = rev
    finished = []
    for i, c, d in done:
        outcomes[i] = Outcome(
            candidate_id=c.candidate_id,
            action=d.action,
            memory_id=d.memory_id,
            version=d.version,
            version_id=d.version_id,
            reason=d.reason,
        )
        finished.append((c, d, outcomes[i]))
    if finished:
        logged = [decision_entry(c, d, o, now) for c, d, o in finished]
        try:  # fresh candidates have none yet, unless applied before their ledger expired
            await store.decisions.insert_many(logged, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(e.get("code") != 11000 for e in errors):
                raise StorageError(f"writing the decision log failed: {exc}") from exc
            for e in errors:  # applied before, and its ledger entry expired since
                await store.record_decision(logged[int(e["index"])])
        except PyMongoError as exc:
            raise StorageError(f"writing the decision log failed: {exc}") from exc
        # One _id-only update per entry: mongo-java-server scans for anything else.
        await _run(
            store.ledger.bulk_write(
                [
                    UpdateOne({"_id": o.candidate_id}, done_update(now, store.ledger_ttl_s))
                    for _, _, o in finished
                ],
                ordered=False,
            )
        )
    for i, c in redo:
        outcomes[i] = await store.reconcile(c)
    for i, c in deferred:  # claimed pending above: planned and applied from here
        outcomes[i] = await store.reconcile_claimed(c, None)
