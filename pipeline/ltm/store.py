"""Applying reconciliation decisions to MongoDB, and reading memories back.

:class:`MemoryStore` is used by the reconciler stage and by the SDK's direct
saves alike: both call :meth:`MemoryStore.reconcile`, which plans with
:func:`~mongomem.ltm.plan.plan_reconcile` and applies the decision.

**Guarantee.** ``reconcile(candidate)`` is idempotent and safe against
concurrent writers of the same scope, without multi-document transactions:

* *Ledger.* ``reconcile_ledger`` holds one entry per candidate: ``pending``
  is written before the first memory write, ``done`` after the last one and
  after the decision-log entry (which keeps the outcome). A ``done`` candidate
  is not applied again — the logged outcome is returned; a ``pending`` one is
  completed (see below).
* *Deterministic ids.* A new version's ``_id`` is
  ``MemoryVersion.make_version_id(memory_id, n)`` and a new memory's id is
  derived from (scope, type, key). Two writers that ADD the same key, or
  UPDATE the same version, race for one ``_id``: the loser's insert fails
  with a duplicate key — a :class:`~mongomem.errors.WriteConflict` — and it
  re-reads the memory and plans again (bounded attempts).
* *Idempotent single-document updates* (:mod:`mongomem.ltm.writes`): a
  REINFORCE adds the candidate to the version's ``candidate_ids`` (and its
  evidence) with ``$addToSet``, so it never counts twice; only the writer of
  version *n + 1* supersedes version *n*.
* *Roll forward after a crash.* Every document a candidate wrote carries its
  id, so a ``pending`` candidate is completed from what it already wrote, and
  planned afresh only if it wrote nothing. Until then readers may see two
  ``current`` versions of one memory for a moment and take the higher one.
* *Idempotency keys.* A direct save with a key has a candidate id derived
  from that key (:mod:`mongomem.sdk.idempotency`), so a retried save is the
  same candidate and answered from the ledger as above. Its entry also keeps
  the request's ``fingerprint``: the same key with a different request is
  refused, and a repeat that overlaps a first attempt still in flight
  (``pending`` for less than ``in_flight_s``) waits for that attempt's outcome.
* *Ledger expiry.* A ``done`` entry expires ``ledger_ttl_s`` after it settled
  (``None``: never): ``setup`` creates a TTL index on its ``expires_at``, and
  since MongoDB deletes only about once a minute (and mongo-java-server may
  not at all) an entry past its expiry counts as absent. Until then a repeat
  is replayed as above; after it, the same candidate or idempotency key is a
  new candidate, planned afresh (a fingerprint no longer binds the key). An
  expired entry still present is replaced by a compare-and-swap on its
  ``expires_at``, so of concurrent repeats one plans and the others find it
  ``pending``. The decision log is kept for good: the expired application's
  entry is archived when the new one takes the candidate id. A ``pending``
  entry has no expiry: it is the only mark that a candidate may have written
  half of a decision, which its next delivery completes; expiring it would let
  a late repeat plan over a half-applied UPDATE. Such entries are rare (left by
  a crash, and settled — so given an expiry — by the next delivery), so they do
  not make the ledger grow.

Where :func:`mongomem.adapters.mongo.capabilities` reports transactions, the memory
writes of one decision run inside a transaction as well. A REINFORCE that
races an UPDATE of the same memory is counted on the version it confirmed
(history keeps it). Every applied decision is logged in ``decision_log`` with
its scores and reason.

:meth:`MemoryStore.delete` deletes a memory (:mod:`mongomem.ltm.deletes`); an
ADD after a deletion of its key takes a new memory id (:meth:`MemoryStore.decide`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from types import EllipsisType
from typing import Any

from pydantic import ValidationError
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, Capabilities, capabilities
from mongomem.deadlines import check_deadline
from mongomem.errors import (
    DeadlineExceeded,
    StateConflict,
    StorageError,
    WriteConflict,
)
from mongomem.ltm.batch import reconcile_batch
from mongomem.ltm.browse import BROWSE_INDEX
from mongomem.ltm.deletes import Deleted, delete_memory
from mongomem.ltm.documents import to_document
from mongomem.ltm.export import ensure_export_indexes
from mongomem.ltm.index import SCOPE_LOG, IndexCache, bump_scope, fresh_since
from mongomem.ltm.judge import Judge, StatedTimes, decide
from mongomem.ltm.plan import (
    MAX_INCARNATIONS,
    Decision,
    Neighbour,
    Outcome,
    Thresholds,
    build_version,
    evidence_rank,
    memory_id_for,
)
from mongomem.ltm.reads import MemoryReads
from mongomem.ltm.search import (
    AtlasVectorSearch,
    ExactCosineSearch,
    VectorSearch,
    probe_text_search,
    probe_vector_search,
)
from mongomem.ltm.split import spanning, split_version
from mongomem.ltm.values import equivalent
from mongomem.ltm.writes import (
    DONE,
    EXPIRES,
    PENDING,
    SUPERSEDES,
    archived_decision_id,
    decision_entry,
    done_update,
    head_update,
    ledger_expired,
    outlived,
    pending_entry,
    reinforce_update,
    supersede_update,
)
from mongomem.models import (
    CLOSED_STATUSES,
    Action,
    EventTime,
    MemoryCandidate,
    MemoryScope,
    MemoryVersion,
    utcnow,
)

__all__ = ["MemoryStore", "Outcome"]

log = logging.getLogger(__name__)

Doc = dict[str, Any]


#: The longest a conflicting save steps aside between two attempts, in seconds.
STEP_ASIDE_MAX_S = 0.25


def _step_aside_s(attempt: int) -> float:
    """The upper bound of the random pause after the ``attempt``-th conflict: it doubles
    from 4 ms (attempt 3) up to :data:`STEP_ASIDE_MAX_S`, so a competitor's multi-step
    write (a deletion: its DELETE version, then the old version superseded) can finish
    within the attempts (about 2 s of pauses at most over 16) instead of outlasting them."""
    return min(STEP_ASIDE_MAX_S, 0.001 * 2.0 ** (attempt - 1))


class MemoryStore(MemoryReads):
    """Versioned long-term memory in MongoDB (see the module docstring's guarantee)."""

    def __init__(
        self,
        db: AsyncDatabase[Doc],
        *,
        thresholds: Thresholds | None = None,
        judge: Judge | None = None,
        search: VectorSearch | None = None,
        max_attempts: int = 16,
        clock: Callable[[], datetime] = utcnow,
        in_flight_s: float = 10.0,
        ledger_ttl_s: float | None = 30 * 24 * 3600.0,
    ) -> None:
        self.db = db
        self.memories = db[MEMORIES]
        self.ledger = db[LEDGER]
        self.decisions = db[DECISIONS]
        self.scope_log = db[SCOPE_LOG]
        self.thresholds = thresholds or Thresholds()
        self.judge = judge
        self.cache = IndexCache(self.memories, self.scope_log)
        self.search_backend: VectorSearch = search or ExactCosineSearch(self.cache)
        self.max_attempts = max_attempts
        self.clock = clock
        self.in_flight_s = in_flight_s
        self.ledger_ttl_s = ledger_ttl_s
        self.capabilities = Capabilities(transactions=False, server="?")

    # -- setup -------------------------------------------------------------------------

    async def setup(self, *, probe: bool = True) -> None:
        """Create indexes; probe transactions and ``$vectorSearch`` when ``probe``."""
        try:
            await self.memories.create_index(
                [
                    ("scope.project_id", ASCENDING),
                    ("scope.user_id", ASCENDING),
                    ("memory_type", ASCENDING),
                    ("status", ASCENDING),
                    ("key_norm", ASCENDING),
                ],
                name="scope_type_status_key",
            )
            await self.memories.create_index("memory_id", name="memory_id")
            await self.memories.create_index(
                [
                    ("scope.project_id", ASCENDING),
                    ("scope.user_id", ASCENDING),
                    ("status", ASCENDING),
                    ("created_at", DESCENDING),
                ],
                name=BROWSE_INDEX,
            )
            await self.memories.create_index("candidate_ids", name="candidate_ids")
            await self.decisions.create_index("memory_id", name="memory_id")
            await ensure_export_indexes(self.db)
            if self.ledger_ttl_s is not None:  # settled entries go at their own expires_at
                await self.ledger.create_index(EXPIRES, name=EXPIRES, expireAfterSeconds=0)
        except PyMongoError as exc:
            raise StorageError(f"could not create the memory indexes: {exc}") from exc
        if not probe:
            return
        try:
            self.capabilities = await capabilities(self.db.client)
        except StorageError:
            # mongo-java-server has no ``hello``; it has no transactions either.
            self.capabilities = Capabilities(transactions=False, server="unknown")
        if isinstance(self.search_backend, ExactCosineSearch) and await probe_vector_search(
            self.memories
        ):
            text = await probe_text_search(self.memories)
            self.search_backend = AtlasVectorSearch(self.memories, text_search=text)

    @property
    def bson_vectors(self) -> bool:
        return isinstance(self.search_backend, AtlasVectorSearch)

    # -- reconcile ---------------------------------------------------------------------

    async def prepare(self, scope: MemoryScope, memory_type: str) -> None:
        """Bring what planning in ``scope`` reads into this process now (the scope's cached
        index, for exact search; nothing for server-side search), so a
        :meth:`reconcile` with ``read_since`` before this call plans without reading it
        again. A save calls it beside its embedding call."""
        if isinstance(self.search_backend, ExactCosineSearch):
            try:
                await self.cache.fresh(scope, memory_type)
            except PyMongoError as exc:
                raise StorageError(f"MongoDB operation failed: {exc}") from exc

    async def reconcile(
        self,
        candidate: MemoryCandidate,
        *,
        fingerprint: str | None = None,
        ledger: bool = True,
        read_since: float | None = None,
    ) -> Outcome:
        """Plan and apply one candidate, exactly once in effect (see the guarantee).

        ``ledger=False`` is for a caller that minted ``candidate_id`` for this one
        call (a random id no retry can repeat, as an unkeyed direct save does):
        there is nothing to be idempotent against, so no ledger entry is claimed
        or settled (two round trips less; a ``fingerprint`` keeps it); the decision
        log is written as always.
        ``read_since`` (monotonic): the first plan takes what :meth:`prepare` read
        at or after it as fresh (:func:`~mongomem.ltm.index.fresh_since`); a
        retry after a conflict reads again.

        ``fingerprint`` is given by a direct save with an idempotency key (whose
        candidate id is derived from that key): it is kept in the ledger entry,
        a repeat with another fingerprint is refused (:class:`InputError` naming
        ``idempotency_key``; nothing is written), and a repeat that arrives while
        the first is still in flight waits for its outcome (:meth:`_keyed_entry`).

        A request's deadline (:mod:`mongomem.deadlines`) is checked before the
        claim and before each apply: once it has ended no memory is written
        (:class:`~mongomem.errors.DeadlineExceeded`). A claim that ends so
        before its first apply wrote nothing, so its ``pending`` entry is
        removed again (:meth:`_release`): a repeat then plans at once instead
        of waiting for an attempt that is gone. After a conflicting apply the
        entry stays ``pending``, as after an interruption, for a repeat to
        complete.
        """
        check_deadline()
        ledger = ledger or fingerprint is not None
        claim: Outcome | datetime | None = None
        if ledger:
            claim = await self._claim(candidate, fingerprint)
        if isinstance(claim, Outcome):
            return claim
        return await self.reconcile_claimed(candidate, claim, ledger=ledger, read_since=read_since)

    async def reconcile_claimed(
        self,
        candidate: MemoryCandidate,
        claim: datetime | None,
        *,
        ledger: bool = True,
        read_since: float | None = None,
    ) -> Outcome:
        """Plan and apply a candidate whose ledger entry this caller holds ``pending`` (it
        claimed it at ``claim``): :meth:`reconcile` after the claim. The batch path hands
        over the candidates it sets aside this way (:mod:`mongomem.ltm.batch`).
        ``ledger=False``: nothing was claimed, and nothing is settled (see
        :meth:`reconcile`)."""
        for attempt in range(1, self.max_attempts + 1):
            if attempt == 1 and read_since is not None:
                with fresh_since(read_since):
                    decision = await self.plan(candidate)
            else:
                decision = await self.plan(candidate)
            try:
                decision = await self._split_first(candidate, decision)
            except WriteConflict:
                if attempt == self.max_attempts:
                    raise
                continue
            try:
                check_deadline()  # planning may have asked the judge: a slow LLM
            except DeadlineExceeded:
                if attempt == 1:  # nothing applied yet: give the claim back
                    await self._release(candidate.candidate_id, claim)
                raise
            try:
                return await self._apply(candidate, decision, attempt, ledger=ledger)
            except WriteConflict:
                if attempt == self.max_attempts:
                    raise
                await self._catch_up(candidate, decision)
                if attempt > 2:  # a busy competitor: step aside for a random, growing moment
                    await asyncio.sleep(random.uniform(0, _step_aside_s(attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _claim(
        self, candidate: MemoryCandidate, fingerprint: str | None
    ) -> Outcome | datetime | None:
        """Mark ``candidate`` pending, or answer it from the ledger.

        An outcome: it had settled (replayed), or an interrupted apply has just
        been completed. Anything else: the candidate is this caller's to plan
        (new, its entry had expired, or it was interrupted before writing), and
        the value is the ``at`` of the ``pending`` entry it now holds (what
        :meth:`_release` matches).
        """
        cid = candidate.candidate_id
        for _ in range(self.max_attempts):
            now = self.clock()
            try:  # the usual case, a new candidate: one round trip to mark it pending
                await self.ledger.insert_one(pending_entry(cid, now, fingerprint))
                return now
            except DuplicateKeyError:
                pass
            except PyMongoError as exc:
                raise StorageError(f"MongoDB write failed: {exc}") from exc
            entry = await self._read(self.ledger.find_one({"_id": cid}))
            if entry is not None and ledger_expired(entry, now):
                if await self._renew(entry, now, fingerprint):
                    return now
                continue  # a concurrent repeat renewed it first: look again
            if entry is not None and fingerprint is not None:
                entry = await self._keyed_entry(cid, entry, fingerprint)
            if entry is None:
                continue  # expired and deleted since the insert: claim it again
            if entry.get("state") == DONE:
                logged = await self._read(self.decisions.find_one({"_id": cid}, {"outcome": 1}))
                return Outcome.model_validate({**logged["outcome"], "replayed": True})
            resumed = await self._resume(candidate)  # pending: interrupted, or in flight
            if resumed is not None:
                return resumed
            started = entry.get("at")
            return started if isinstance(started, datetime) else None
        raise WriteConflict(f"the ledger entry of {cid} kept changing")

    async def _release(self, cid: str, claimed_at: datetime | None) -> None:
        """Remove the ``pending`` entry this caller claimed at ``claimed_at`` and has not
        applied (a compare-and-delete: an entry settled or claimed anew since is kept)."""
        if claimed_at is None:
            return
        await self._read(self.ledger.delete_one({"_id": cid, "state": PENDING, "at": claimed_at}))

    async def _renew(self, entry: Doc, now: datetime, fingerprint: str | None) -> bool:
        """Replace the expired ledger ``entry`` by a new ``pending`` one, as if it were absent.

        Only if it is still the expired entry (a single-document compare-and-swap
        on its ``expires_at``): of concurrent repeats exactly one wins and plans
        the candidate; ``False`` for the others, which then find it ``pending``.
        """
        renewed = pending_entry(entry["_id"], now, fingerprint)
        result = await self._read(
            self.ledger.replace_one({"_id": entry["_id"], EXPIRES: entry[EXPIRES]}, renewed)
        )
        return bool(result.matched_count)

    async def _keyed_entry(self, cid: str, entry: Doc | None, fingerprint: str) -> Doc | None:
        """The ledger entry of a keyed request's repeat, once the first attempt settled.

        A different request under the same key is refused. While the first
        attempt is ``pending`` and younger than ``in_flight_s`` it is presumed
        alive and awaited, so both answer the same outcome; an older one was
        interrupted and is completed by the caller as usual.
        """
        deadline: float | None = None
        while entry is not None:
            stored = entry.get("fingerprint")
            if stored is not None and stored != fingerprint:
                raise StateConflict(
                    "this idempotency_key was already used for a different request "
                    "(other memory type or fields); use a new key for a new save",
                    field="idempotency_key",
                )
            if entry.get("state") == DONE:
                return entry
            if deadline is None:
                started = entry.get("at")
                age = 0.0
                if isinstance(started, datetime):
                    aware = started if started.tzinfo else started.replace(tzinfo=UTC)
                    age = max(0.0, (self.clock() - aware).total_seconds())
                deadline = time.monotonic() + max(0.0, self.in_flight_s - age)
            if time.monotonic() >= deadline:
                return entry
            await asyncio.sleep(0.02)
            entry = await self._read(self.ledger.find_one({"_id": cid}))
        return entry

    async def plan(self, candidate: MemoryCandidate) -> Decision:
        """The decision for ``candidate`` against the scope as it is now (judge included)."""
        t = self.thresholds
        neighbours = await self.search_backend.neighbours(candidate, t.neighbours, t.floor)
        return await self.decide(candidate, neighbours)

    async def decide(
        self,
        candidate: MemoryCandidate,
        neighbours: list[Neighbour],
        *,
        judge: Judge | EllipsisType | None = ...,
    ) -> Decision:
        """Plan against ``neighbours``, asking the judge (the store's, unless ``judge`` is
        given) when the plan says so (:func:`mongomem.ltm.judge.decide`).

        An ADD whose memory id is that of a deleted memory takes the key's next
        incarnation instead (:func:`~mongomem.ltm.plan.memory_id_for`), so a
        deleted memory never comes back. This costs a read only in scopes where
        a memory was ever deleted (the scope log counts them).
        """
        asked = self.judge if isinstance(judge, EllipsisType) else judge
        decision = await decide(candidate, neighbours, self.thresholds, asked, self.existing_times)
        current = next((n for n in neighbours if n.memory_id == decision.memory_id), None)
        older = current is not None and evidence_rank(candidate.evidence) < current.rank
        if current is not None and (
            decision.historical or (older and decision.action is Action.REINFORCE)
        ):
            decision = await self._at_its_place(candidate, decision, current)
        if decision.action is Action.ADD and (
            not isinstance(self.search_backend, ExactCosineSearch)
            or self.cache.peek(candidate.scope, candidate.memory_type).deletes
        ):
            decision = await self._unused_id(candidate, decision)
        return decision

    async def _at_its_place(
        self, candidate: MemoryCandidate, decision: Decision, current: Neighbour
    ) -> Decision:
        """Where an older statement goes (SPEC L2): beside the versions around its place in
        evidence order. If the version just before or just after it states the same
        (:func:`~mongomem.ltm.values.equivalent`), it REINFORCEs that one — so a replayed
        or repeated old statement adds evidence, never a second version — else it enters
        history as a new version (written superseded by the current one)."""
        docs = await self._read(
            self.memories.find({"memory_id": decision.memory_id}, {"embedding": 0}).to_list()
        )
        if any(d.get("status") in CLOSED_STATUSES for d in docs):
            # Deleted (or expired) since the neighbour was read: its deletion is being
            # completed. No version may follow the one that closed it, so the statement
            # is a fresh ADD under the key's next incarnation, as any candidate after
            # a deletion is.
            return await self._unused_id(
                candidate,
                decision.model_copy(
                    update={
                        "action": Action.ADD,
                        "version": 1,
                        "base_version": None,
                        "historical": False,
                        "raises_rank": False,
                        "reason": "the memory it would have entered was deleted meanwhile: "
                        "a new memory",
                    }
                ),
            )
        rank = evidence_rank(candidate.evidence)
        stated = sorted(
            (d for d in docs if d.get("status") not in CLOSED_STATUSES),
            key=lambda d: (str(d.get("observed_rank") or ""), int(d["version"])),
        )
        inside = spanning(stated, rank, candidate.text)
        if inside is not None:  # said between the evidence of one version: split it first
            return decision.model_copy(update={"split": str(inside["_id"])})
        before = [d for d in stated if str(d.get("observed_rank") or "") <= rank]
        after = [d for d in stated if str(d.get("observed_rank") or "") > rank]
        for place in before[-1:] + after[:1]:
            if equivalent(place["text"], candidate.text):
                number = int(place["version"])
                return decision.model_copy(
                    update={
                        "action": Action.REINFORCE,
                        "version": number,
                        "base_version": number,
                        "historical": False,
                        "raises_rank": str(place.get("observed_rank") or "") < rank,
                        "reason": "older evidence than the current version: reinforces the "
                        f"version at its place in history (v{number})",
                    }
                )
        number = max([current.next_version, *(int(d["version"]) + 1 for d in docs)])
        return decision.model_copy(
            update={
                "action": Action.UPDATE,
                "version": number,
                "base_version": current.version,
                "historical": True,
                "raises_rank": False,
                "reason": decision.reason
                if decision.historical
                else "older evidence than the current version, between other statements: "
                "enters history at its place",
            }
        )

    async def existing_times(self, neighbour: Neighbour) -> StatedTimes:
        """When the evidence of ``neighbour``'s version was said, and when its fact holds
        or its event happened (SPEC L1), for the judge. An event that no longer reads as
        one (a hand-edited document) is left out rather than shown wrong."""
        doc = await self._read(
            self.memories.find_one({"_id": neighbour.version_id}, {"evidence.at": 1, "event": 1})
        )
        dates = []
        for item in (doc or {}).get("evidence", []):
            at = item.get("at") if isinstance(item, dict) else None
            if isinstance(at, datetime):
                dates.append(at if at.tzinfo else at.replace(tzinfo=UTC))
        event = None
        raw = (doc or {}).get("event")
        if isinstance(raw, dict):
            try:
                event = EventTime.model_validate(raw)
            except ValidationError:
                log.warning("memory version %s: unreadable event time", neighbour.version_id)
        return StatedTimes(evidence_at=tuple(dates), event=event)

    async def _unused_id(self, candidate: MemoryCandidate, decision: Decision) -> Decision:
        """``decision`` with the first incarnation of its key not taken by a deleted (or
        expired) memory."""
        for incarnation in range(MAX_INCARNATIONS):
            memory_id = memory_id_for(
                candidate.scope, candidate.memory_type, candidate.key, incarnation
            )
            # Closed by any of its versions, not only the highest: a history version
            # written by a store older than this check may sit past the DELETE.
            closing = await self._read(
                self.memories.find_one(
                    {"memory_id": memory_id, "status": {"$in": sorted(CLOSED_STATUSES)}},
                    {"_id": 1},
                )
            )
            if closing is None:
                if memory_id == decision.memory_id:
                    return decision
                return decision.model_copy(update={"memory_id": memory_id})
        raise WriteConflict(f"key {candidate.key!r} was deleted too many times")

    async def delete(
        self,
        memory_id: str,
        scopes: Sequence[MemoryScope],
        *,
        actor: str,
        reason: str | None = None,
    ) -> Deleted | None:
        """Delete one memory of ``scopes`` (``None`` if it is not there); see
        :mod:`mongomem.ltm.deletes` for what is guaranteed."""
        return await delete_memory(
            self, memory_id, scopes, actor=actor, reason=reason, now=self.clock()
        )

    async def _split_first(self, candidate: MemoryCandidate, decision: Decision) -> Decision:
        """Split the version ``decision`` says the candidate falls inside, and plan again
        (:mod:`mongomem.ltm.split`); a decision that splits nothing is returned as it is."""
        for _ in range(self.max_attempts):
            if decision.split is None:
                return decision
            rank = evidence_rank(candidate.evidence)
            await split_version(self, decision.split, rank, self.clock())
            docs = await self._read(self.memories.find({"memory_id": decision.memory_id}).to_list())
            self.cache.peek(candidate.scope, candidate.memory_type).apply_documents(docs)
            decision = await self.plan(candidate)
        raise WriteConflict(f"{decision.split} could not be split")

    async def _catch_up(self, candidate: MemoryCandidate, decision: Decision) -> None:
        """After a conflict, read the contested memory straight into the cache."""
        docs = await self._read(self.memories.find({"memory_id": decision.memory_id}).to_list())
        self.cache.peek(candidate.scope, candidate.memory_type).apply_documents(docs)

    async def _apply(
        self, candidate: MemoryCandidate, decision: Decision, attempt: int, *, ledger: bool = True
    ) -> Outcome:
        now = self.clock()
        outcome = Outcome(
            candidate_id=candidate.candidate_id,
            action=decision.action,
            memory_id=decision.memory_id,
            version=decision.version,
            version_id=decision.version_id,
            reason=decision.reason,
            attempts=attempt,
        )
        entry = decision_entry(candidate, decision, outcome, now)
        if self.capabilities.transactions:
            async with self.db.client.start_session() as session:

                async def body(s: AsyncClientSession) -> tuple[int | None, list[Doc]]:
                    return await self._write(candidate, decision, now, s)

                rev, docs = await session.with_transaction(body)
            await self.record_decision(entry)
        else:
            # The decision-log entry is written beside the scope-log bump, once the
            # version itself is written (one round trip less).
            rev, docs = await self._write(
                candidate, decision, now, None, self.record_decision(entry)
            )
        if rev is not None:
            self.cache.note_write(candidate.scope, candidate.memory_type, rev, docs)
        if ledger:  # settled only once the decision is logged (a replay reads it)
            await self._settle(candidate.candidate_id, now)
        return outcome

    async def _write(
        self,
        candidate: MemoryCandidate,
        decision: Decision,
        now: datetime,
        session: AsyncClientSession | None,
        beside: Coroutine[Any, Any, None] | None = None,
    ) -> tuple[int | None, list[Doc]]:
        """Write the decision's versions, then bump the scope log; ``beside`` runs once
        the versions are written, at the same time as that bump (it is closed unrun
        when the write fails before)."""
        try:
            return await self._write_versions(candidate, decision, now, session, beside)
        finally:
            if beside is not None and inspect.getcoroutinestate(beside) == "CORO_CREATED":
                beside.close()  # the write failed before its versions were written

    async def _write_versions(
        self,
        candidate: MemoryCandidate,
        decision: Decision,
        now: datetime,
        session: AsyncClientSession | None,
        beside: Coroutine[Any, Any, None] | None,
    ) -> tuple[int | None, list[Doc]]:
        cid = candidate.candidate_id
        if decision.action is Action.REINFORCE:
            result = await self._read(
                self.memories.update_one(
                    {"_id": decision.version_id}, reinforce_update(candidate, now), session=session
                )
            )
            if result.matched_count == 0:
                raise WriteConflict(f"{decision.version_id} does not exist")
            if decision.raises_rank:  # its evidence time moved: readers must see it (L2)
                await _beside(
                    self._read(
                        bump_scope(
                            self.scope_log,
                            candidate.scope,
                            candidate.memory_type,
                            [decision.version_id],
                            session=session,
                        )
                    ),
                    beside,
                )
            elif beside is not None:
                await beside
            return None, []
        version = build_version(candidate, decision, now)
        doc = to_document(version, cid, bson_vector=self.bson_vectors)
        doc[SUPERSEDES] = decision.base_version_id
        try:
            await self.memories.insert_one(doc, session=session)
        except DuplicateKeyError as exc:
            found = await self._read(
                self.memories.find_one(
                    {"_id": decision.version_id}, {"candidate_id": 1}, session=session
                )
            )
            if found is None or found.get("candidate_id") != cid:
                raise WriteConflict(f"{decision.version_id} was written by another writer") from exc
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
        changed, docs = [decision.version_id], [doc]
        if decision.historical and decision.base_version_id is not None:
            # An older statement entered history: the current version stays current and
            # learns the memory's new highest number (SPEC L2). The cache catches up from
            # the scope log (both ids are logged), so no rev is handed back.
            await self._read(
                self.memories.update_one(
                    {"_id": decision.base_version_id},
                    head_update(decision.version),
                    session=session,
                )
            )
            changed.append(decision.base_version_id)
            await _beside(
                self._read(
                    bump_scope(
                        self.scope_log,
                        candidate.scope,
                        candidate.memory_type,
                        changed,
                        session=session,
                    )
                ),
                beside,
            )
            return None, []
        if decision.base_version_id is not None:
            await self._supersede(decision.base_version_id, decision.version_id, now, session)
            changed.append(decision.base_version_id)
            docs.append(
                {
                    "_id": decision.base_version_id,
                    "memory_id": decision.memory_id,
                    "version": decision.base_version,
                    "key": "",
                    "text": "",
                    "status": "superseded",
                }
            )
        rev = await _beside(
            self._read(
                bump_scope(
                    self.scope_log, candidate.scope, candidate.memory_type, changed, session=session
                )
            ),
            beside,
        )
        return int(rev), docs

    async def _supersede(
        self, base_id: str, by: str, now: datetime, session: AsyncClientSession | None
    ) -> None:
        await self._read(
            self.memories.update_one({"_id": base_id}, supersede_update(by, now), session=session)
        )

    async def _record(
        self,
        candidate: MemoryCandidate,
        decision: Decision,
        outcome: Outcome,
        now: datetime,
        *,
        ledger: bool = True,
    ) -> None:
        await self.record_decision(decision_entry(candidate, decision, outcome, now))
        if ledger:
            await self._settle(candidate.candidate_id, now)

    async def _settle(self, cid: str, now: datetime) -> None:
        """Mark the candidate's ledger entry done (after its decision is logged)."""
        await self._read(
            self.ledger.update_one({"_id": cid}, done_update(now, self.ledger_ttl_s), upsert=True)
        )

    async def record_decision(self, entry: Doc) -> None:
        """Write a decision-log ``entry``, replacing the candidate's earlier one if any.

        The one it replaces is kept under
        :func:`~mongomem.ltm.writes.archived_decision_id` when it belongs to an
        application whose ledger entry has expired since (the audit keeps every
        application); else it is this application's own, written before an
        interruption, or a concurrent one's.
        """
        try:  # the usual case, a new candidate: one round trip
            await self.decisions.insert_one(entry)
            return
        except DuplicateKeyError:
            pass
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
        earlier = await self._read(self.decisions.find_one({"_id": entry["_id"]}))
        settled = None if earlier is None else earlier.get("at")
        if isinstance(settled, datetime) and outlived(settled, entry["at"], self.ledger_ttl_s):
            try:
                archived = {**earlier, "_id": archived_decision_id(entry["_id"], settled)}
                await self.decisions.insert_one(archived)
            except DuplicateKeyError:
                pass  # kept by an attempt that was interrupted before the replace
            except PyMongoError as exc:
                raise StorageError(f"MongoDB write failed: {exc}") from exc
        await self._read(self.decisions.replace_one({"_id": entry["_id"]}, entry, upsert=True))

    async def _resume(self, candidate: MemoryCandidate) -> Outcome | None:
        """Finish a ``pending`` candidate from what it wrote; ``None`` if it wrote nothing."""
        cid = candidate.candidate_id
        doc = await self._read(
            self.memories.find_one(
                {"candidate_ids": cid},
                {
                    "memory_id": 1,
                    "version": 1,
                    "candidate_id": 1,
                    "action": 1,
                    "status": 1,
                    "superseded_by": 1,
                    SUPERSEDES: 1,
                },
            )
        )
        if doc is None:
            return None
        now = self.clock()
        created = doc.get("candidate_id") == cid
        action = Action(doc["action"]) if created else Action.REINFORCE
        version = int(doc["version"])
        # The version it superseded: recorded since history versions exist (SPEC L2);
        # before that always the one below it.
        base_id = doc.get(SUPERSEDES, "legacy")
        if base_id == "legacy":
            base_id = MemoryVersion.make_version_id(doc["memory_id"], version - 1)
        base_id = base_id if version > 1 else None
        historical = base_id is not None and doc.get("superseded_by") == base_id
        if created and base_id is not None:
            if historical:  # it entered history: the current version learns its number
                await self._read(self.memories.update_one({"_id": base_id}, head_update(version)))
            else:
                await self._supersede(base_id, doc["_id"], now, None)
        if created:
            changed = [doc["_id"]] + ([base_id] if base_id is not None else [])
            await self._read(
                bump_scope(self.scope_log, candidate.scope, candidate.memory_type, changed)
            )
        base_version = version
        if created and base_id is not None:
            base = await self._read(self.memories.find_one({"_id": base_id}, {"version": 1}))
            base_version = int(base["version"]) if base else version - 1
        decision = Decision(
            candidate_id=cid,
            action=action,
            memory_id=doc["memory_id"],
            version=version,
            base_version=base_version,
            historical=created and historical,
            key_match=True,
            similarity=None,
            reason="completed an interrupted apply",
        )
        outcome = Outcome(
            candidate_id=cid,
            action=action,
            memory_id=doc["memory_id"],
            version=version,
            version_id=doc["_id"],
            reason=decision.reason,
        )
        await self._record(candidate, decision, outcome, now)
        return outcome

    async def reconcile_many(self, candidates: Sequence[MemoryCandidate]) -> list[Outcome]:
        """Reconcile candidates in order, batching the writes (same guarantee as
        :meth:`reconcile`; see :mod:`mongomem.ltm.batch`)."""
        return await reconcile_batch(self, candidates)

    @staticmethod
    async def _read(op: Awaitable[Any]) -> Any:
        try:
            return await op
        except PyMongoError as exc:
            raise StorageError(f"MongoDB operation failed: {exc}") from exc


async def _beside(op: Awaitable[Any], beside: Awaitable[None] | None) -> Any:
    """``op``'s result, with ``beside`` run at the same time; both are awaited to the end,
    and the first failure (``op``'s first) is raised."""
    if beside is None:
        return await op
    results: tuple[Any, ...] = await asyncio.gather(op, beside, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results[0]
