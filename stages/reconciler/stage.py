"""The reconciler stage: candidates from Kafka → versioned memories in MongoDB.

**Delivery.** At-least-once in, idempotent out. Records are consumed with
auto-commit off; a partition's offsets are committed only after every record
up to them has been applied (or dead-lettered). A crash replays from the last
commit and :meth:`~mongomem.ltm.MemoryStore.reconcile` turns the replay into
no-ops (ledger, deterministic ids, roll-forward of interrupted writes).

**Batches.** The records of one partition in one poll are applied with
:meth:`~mongomem.ltm.MemoryStore.reconcile_many` (few round trips per batch,
same guarantee); if the batch fails for a reason other than MongoDB being
away, its records are applied one by one so only the bad one is
dead-lettered.

**Order.** Candidates are keyed by :meth:`MemoryScope.kafka_key`, so all
candidates of one scope are in one partition; a partition is processed
strictly in order, partitions concurrently. Kafka gives each partition to one
member of the group, so two reconcilers never write one scope at once
(direct SDK saves may; the store's conditional writes make that safe).

**Bad input is data.** A record that does not decode, or that the store
rejects as invalid (unknown type, wrong embedding size) goes to
``dlq.reconciler`` with its original bytes and the stream goes on. A
write conflict that persists is retried a few times, then dead-lettered.
MongoDB being unreachable is retried with back-off for as long as it takes.

**Progress.** With a ``progress`` recorder, applied candidates (and dead-lettered
ones, with the error) are recorded in ``processing_status`` before the commit
(:mod:`mongomem.progress`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from mongomem.codec import decode
from mongomem.erasure_register import ErasureRegister
from mongomem.errors import (
    BrokerError,
    MessageDecodeError,
    MongomemError,
    StorageError,
    WriteConflict,
)
from mongomem.kafka import CANDIDATES, DeadLetter, send_dead_letter
from mongomem.ltm import MemoryStore, Outcome
from mongomem.metrics import DEAD_LETTERS, MESSAGES, RECONCILE_ACTIONS, STAGE_BATCH_SECONDS
from mongomem.models import MemoryCandidate
from mongomem.progress import Progress, until_stored
from mongomem.settings import KafkaSettings

__all__ = ["STAGE", "Reconciler"]

STAGE = "reconciler"
log = logging.getLogger(__name__)


class Record(Protocol):
    """The fields of an aiokafka ``ConsumerRecord`` the stage reads."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class Reconciler:
    """Consumes candidates and applies them through a :class:`MemoryStore`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        store: MemoryStore,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        *,
        conflict_attempts: int = 3,
        backoff_s: float = 0.2,
        backoff_max_s: float = 10.0,
        progress: Progress | None = None,
    ) -> None:
        self.kafka = kafka
        self.progress = progress
        self.store = store
        self.consumer = consumer
        self.producer = producer
        self.conflict_attempts = conflict_attempts
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.applied = 0
        self.erased = 0  # candidates skipped: their user or session was erased
        self.erasures = ErasureRegister(store.db)

    async def run(self, stop: asyncio.Event, *, max_records: int = 500) -> None:
        """Process batches until ``stop`` is set (or the task is cancelled)."""
        while not stop.is_set():
            try:
                batch = await self.consumer.getmany(timeout_ms=500, max_records=max_records)
            except KafkaError as exc:
                raise BrokerError(f"reading {CANDIDATES} failed: {exc}") from exc
            if batch:
                await self.process(batch)

    async def process(self, batch: dict[TopicPartition, list[Record]]) -> None:
        """Apply one batch (partitions concurrently, each in order), then commit it."""
        started = time.perf_counter()
        await asyncio.gather(*(self._partition(records) for records in batch.values()))
        offsets = {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            raise BrokerError(f"committing offsets failed: {exc}") from exc
        STAGE_BATCH_SECONDS.labels(STAGE).observe(time.perf_counter() - started)

    async def _not_erased(
        self, good: list[tuple[Record, MemoryCandidate]]
    ) -> list[tuple[Record, MemoryCandidate]]:
        """Leave out the candidates of erased users and sessions (SPEC J3: never written)."""
        if not good:
            return good
        keep = []
        for record, candidate in good:
            user = candidate.scope.user_id or candidate.evidence.user_id
            session = candidate.evidence.session_id if user is not None else None
            if await self.erasures.is_erased(candidate.scope.project_id, user, session):
                self.erased += 1
                continue
            keep.append((record, candidate))
        return keep

    async def _partition(self, records: Sequence[Record]) -> None:
        """Apply one partition's records in order: batched, or one by one after a failure."""
        good: list[tuple[Record, MemoryCandidate]] = []
        for record in records:
            try:
                good.append((record, decode(record.value, MemoryCandidate)))
            except MessageDecodeError as exc:
                await self._dead_letter(record, exc, 1)
        good = await self._not_erased(good)
        if not good:
            return
        delay = self.backoff_s
        while True:
            try:
                outcomes = await self.store.reconcile_many([c for _, c in good])
            except StorageError as exc:
                log.warning("MongoDB unavailable (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)
                continue
            except Exception:
                # One bad candidate fails the batch; the one-by-one path isolates it
                # (everything already applied is recognised and not applied again).
                log.info("batch failed; applying %d candidates one by one", len(good))
                for record, _ in good:
                    await self.handle(record)
                return
            for (_, candidate), outcome in zip(good, outcomes, strict=True):
                self._count(candidate, outcome)
            await self._note([c for _, c in good])
            return

    async def _note(self, candidates: Sequence[MemoryCandidate]) -> None:
        """Record applied candidates in ``processing_status`` (retried until stored)."""
        progress = self.progress
        if progress is not None and candidates:
            await until_stored(
                lambda: progress.reconciled(candidates), what="reconciled candidates",
                backoff_s=self.backoff_s, backoff_max_s=self.backoff_max_s,
            )  # fmt: skip

    def _count(self, candidate: MemoryCandidate, outcome: Outcome) -> None:
        action = "NOOP" if outcome.replayed else outcome.action.value
        RECONCILE_ACTIONS.labels(candidate.memory_type, action).inc()
        MESSAGES.labels(STAGE, "duplicate" if outcome.replayed else "ok").inc()
        self.applied += 1

    async def handle(self, record: Record) -> Outcome | None:
        """Apply one record; dead-letter it when it cannot be applied."""
        attempts = 0
        delay = self.backoff_s
        while True:
            attempts += 1
            try:
                candidate = decode(record.value, MemoryCandidate)
                outcome = await self.store.reconcile(candidate)
            except StorageError as exc:
                log.warning("MongoDB unavailable (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)
                continue
            except WriteConflict as exc:
                if attempts < self.conflict_attempts:
                    await asyncio.sleep(delay)
                    continue
                await self._dead_letter(record, exc, attempts)
                return None
            except MongomemError as exc:
                await self._dead_letter(record, exc, attempts)
                return None
            except Exception as exc:  # a record we cannot process must not stop the stream
                log.exception("unexpected error on %s@%s", record.topic, record.offset)
                await self._dead_letter(record, exc, attempts)
                return None
            self._count(candidate, outcome)
            await self._note([candidate])
            return outcome

    async def _dead_letter(self, record: Record, error: BaseException, attempts: int) -> None:
        letter = DeadLetter.of(
            stage=STAGE, topic=record.topic, partition=record.partition, offset=record.offset,
            key=record.key, value=record.value, error=error, attempts=attempts,
        )  # fmt: skip
        log.warning(
            "dead-lettering %s[%s]@%s: %s: %s",
            record.topic, record.partition, record.offset, type(error).__name__, error,
        )  # fmt: skip
        await send_dead_letter(self.producer, self.kafka, letter, record.key)
        DEAD_LETTERS.labels(STAGE).inc()
        MESSAGES.labels(STAGE, "dead_letter").inc()
        progress = self.progress
        if progress is None:
            return
        try:
            candidate = decode(record.value, MemoryCandidate)
        except MessageDecodeError:
            return  # not a candidate: no snapshot to mark
        failure = f"{type(error).__name__}: {error}"
        await until_stored(
            lambda: progress.reconcile_failed(candidate, failure), what="a dead-lettered candidate",
            backoff_s=self.backoff_s, backoff_max_s=self.backoff_max_s,
        )  # fmt: skip


def consumer_options(kafka: KafkaSettings, group_suffix: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": kafka.bootstrap,
        "group_id": f"{kafka.topic_prefix}.{STAGE}{group_suffix}",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": int(kafka.request_timeout_s * 1000),
        # Candidates carry embeddings (~8 KB as JSON): fetch enough for full batches.
        "max_partition_fetch_bytes": 16 * 1024 * 1024,
        "fetch_max_bytes": 64 * 1024 * 1024,
    }
