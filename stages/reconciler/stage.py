"""The reconciler stage's core: candidate records in, versioned memories in MongoDB out.

**Delivery** is the runtime's (:mod:`mongomem.stages.runtime`): a partition's
offset is committed only after every record up to it was applied or
dead-lettered, and :meth:`~mongomem.ltm.MemoryStore.reconcile` turns a replay
into no-ops (ledger, deterministic ids, roll-forward of interrupted writes).

**Batches.** :meth:`Reconciler.handle` applies one partition's records with
:meth:`~mongomem.ltm.MemoryStore.reconcile_many` (few round trips per batch,
same guarantee). When a batch fails for a reason other than an outage the
runtime hands its records over one at a time, so only the bad one is
dead-lettered (everything applied before is recognised, not applied twice).

**Order.** Candidates are keyed by :meth:`MemoryScope.kafka_key`, so all
candidates of one scope are in one partition, which is handled strictly in
order. Kafka gives each partition to one member of the group, so two
reconcilers never write one scope at once (direct SDK saves may; the store's
conditional writes make that safe).

**Failures** follow the runtime's one retry policy: MongoDB away is retried
for as long as it takes; a write conflict that persists is retried a few
times, then dead-lettered; a record that does not decode, that the store
rejects (unknown type, wrong embedding size) or that MongoDB refuses for good
(a document too large, a write error with a permanent code:
:func:`~mongomem.errors.pymongo_error_is_transient`) is dead-lettered at once
with its original bytes, and the partition goes on.

**Progress.** With a ``progress`` recorder, applied candidates (and
dead-lettered ones, with the error) are recorded in ``processing_status``
before the commit (:mod:`mongomem.operations.progress`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mongomem.codec import decode
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import MessageDecodeError
from mongomem.ltm import MemoryStore, Outcome
from mongomem.metrics import MESSAGES, RECONCILE_ACTIONS
from mongomem.models import MemoryCandidate
from mongomem.operations.progress import Progress, until_stored
from mongomem.stages.runtime import Record

__all__ = ["STAGE", "Reconciler"]

STAGE = "reconciler"
log = logging.getLogger(__name__)


class Reconciler:
    """A :class:`~mongomem.stages.runtime.ports.ConsumerStage`: applies candidates through
    a :class:`MemoryStore`."""

    stage = STAGE

    def __init__(
        self,
        store: MemoryStore,
        *,
        progress: Progress | None = None,
        erasures: ErasureRegister | None = None,
    ) -> None:
        self.progress = progress
        self.store = store
        self.applied = 0
        self.erased = 0  # candidates skipped: their user or session was erased
        self.erasures = erasures or ErasureRegister(store.db)

    async def handle(self, partition: int, batch: Sequence[Record]) -> None:
        """Apply one partition's records in order (raises if any cannot be applied)."""
        candidates = [decode(record.value, MemoryCandidate) for record in batch]
        candidates = await self._not_erased(candidates)
        if not candidates:
            return
        outcomes = await self.store.reconcile_many(candidates)
        for candidate, outcome in zip(candidates, outcomes, strict=True):
            self._count(candidate, outcome)
        await self._note(candidates)

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        """Record the failure on the candidate's snapshot in ``processing_status``."""
        progress = self.progress
        if progress is None:
            return
        try:
            candidate = decode(record.value, MemoryCandidate)
        except MessageDecodeError:
            return  # not a candidate: no snapshot to mark
        failure = f"{type(error).__name__}: {error}"
        await until_stored(
            lambda: progress.reconcile_failed(candidate, failure), what="a dead-lettered candidate"
        )

    async def _not_erased(self, candidates: list[MemoryCandidate]) -> list[MemoryCandidate]:
        """Leave out the candidates of erased users and sessions (SPEC J3: never written)."""
        keep = []
        for candidate in candidates:
            user = candidate.scope.user_id or candidate.evidence.user_id
            session = candidate.evidence.session_id if user is not None else None
            if await self.erasures.is_erased(candidate.scope.project_id, user, session):
                self.erased += 1
                continue
            keep.append(candidate)
        return keep

    async def _note(self, candidates: Sequence[MemoryCandidate]) -> None:
        """Record applied candidates in ``processing_status`` (retried until stored)."""
        progress = self.progress
        if progress is not None and candidates:
            await until_stored(
                lambda: progress.reconciled(candidates), what="reconciled candidates"
            )

    def _count(self, candidate: MemoryCandidate, outcome: Outcome) -> None:
        action = "NOOP" if outcome.replayed else outcome.action.value
        RECONCILE_ACTIONS.labels(candidate.memory_type, action).inc()
        MESSAGES.labels(STAGE, "duplicate" if outcome.replayed else "ok").inc()
        self.applied += 1
