"""The watcher's stage core: change records in, turns and watermarks out to Kafka.

A :class:`~mongomem.stages.runtime.ports.PipelinedStage`, driven by the
runtime's :func:`~mongomem.stages.runtime.consume` over a
:class:`~mongomem.stages.watcher_source.ChangeStreamSource`. ``submit`` does
the in-order work of a batch — each turn checked and encoded
(:class:`~mongomem.stages.watcher_encode.TurnEncoder`) into its partition's
open batch (:class:`~mongomem.stages.runtime.ports.PartitionBatches`: on Kafka
:class:`~mongomem.stages.runtime.kafka.PartitionBatcher`), the
back-fill overlap skipped (:class:`~mongomem.stages.watcher_logic.PublishLedger`),
a due watermark put into every partition, a document that is not a turn
dead-lettered through :func:`~mongomem.stages.runtime.dead_letter` — and
returns the batch's acknowledgement without waiting for it.

Flushes follow :class:`~mongomem.stages.watcher_logic.FlushPolicy`: at an idle
read or the back-fill's end at once; otherwise after ``batch_max`` turns or
``interval_s``, but not while Kafka has not acknowledged the previous flush —
the records keep filling the open batches (a full one is sent on its own),
and are flushed when that acknowledgement arrives (if due then, else once
``interval_s`` has passed), without waiting for another ``submit``. A batch's acknowledgement
completes with the flush that sends the last of its records.

A failure to hand records to Kafka, or to keep a dead letter, fails the
acknowledgement of every batch not yet flushed (and every later one): the
runtime then ends the attempt, and the watcher restarts from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from mongomem.codec import encode
from mongomem.metrics import MESSAGES
from mongomem.models import Watermark
from mongomem.stages.runtime import DeadLetterSink, PartitionBatches, Record, dead_letter
from mongomem.stages.watcher_encode import TurnEncoder
from mongomem.stages.watcher_logic import FlushPolicy, PublishLedger, WatermarkClock
from mongomem.stages.watcher_source import (
    BackfillEnd,
    BackfillStart,
    CaughtUp,
    ChangeRecord,
    ScannedTurn,
    StreamedTurn,
)

__all__ = ["STAGE", "WatcherCore"]

STAGE = "watcher"
log = logging.getLogger("mongomem.watcher")


class WatcherCore:
    """The watcher as a runtime :class:`~mongomem.stages.runtime.ports.PipelinedStage`."""

    stage = STAGE

    def __init__(
        self,
        batcher: PartitionBatches,
        letters: DeadLetterSink,
        ledger: PublishLedger,
        policy: FlushPolicy,
        watermarks: WatermarkClock,
        *,
        share: int = 0,
        shares: int = 1,
    ) -> None:
        self._batcher = batcher
        self._letters = letters
        self._ledger = ledger
        self._policy = policy
        self._watermarks = watermarks
        self._share, self._shares = share, shares
        self._encoder = TurnEncoder()
        #: One submit or flush at a time: batches of a partition leave in fill order.
        self._lock = asyncio.Lock()
        #: Ack futures of full batches sent since the last flush.
        self._pending: list[asyncio.Future[Any]] = []
        #: Acknowledgements of submitted batches whose records wait in the open batches.
        self._waiting: list[asyncio.Future[None]] = []
        #: Batches of the latest flush that Kafka has not acknowledged yet.
        self._unacked = 0
        self._flushes = 0
        self._count = 0  # records in the open batches since the last flush
        self._oldest = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._deferred: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        #: The back-fill under way: (sessions with marks, ``published`` at its start).
        self._backfill: tuple[int, int] | None = None
        #: Turns the back-fill published, once its scan ended.
        self._backfilled: int | None = None
        self.published = 0
        self._counted = 0  # of ``published``, in mongomem_messages_total
        self._turns_out = MESSAGES.labels(STAGE, "ok")
        self.watermarks = 0

    # ------------------------------------------------------------------ submit

    async def submit(self, partition: int, batch: Sequence[Record]) -> Awaitable[None]:
        """Encode ``batch`` into the open batches and send what is due; its acknowledgement."""
        async with self._lock:
            if self._failure is not None:
                return _failed(self._failure)
            try:
                return await self._submit(batch)
            except Exception as exc:  # nothing after this may be committed
                self._fail(exc)
                return _failed(exc)

    async def _submit(self, batch: Sequence[Record]) -> Awaitable[None]:
        idle = force = streamed = False
        caught_up_at: datetime | None = None
        dead: list[tuple[ChangeRecord, ValidationError]] = []
        for record in batch:
            if type(record) is StreamedTurn:
                streamed, idle, caught_up_at = True, False, None
                if record.document is not None:
                    self._publish(record, record.document, streamed=True, dead=dead)
            elif type(record) is ScannedTurn:
                if record.document is not None:
                    self._publish(record, record.document, streamed=False, dead=dead)
            elif type(record) is CaughtUp:
                streamed, idle, caught_up_at = True, True, record.read_at
            elif type(record) is BackfillStart:
                self._ledger.seed(record.marks.items())
                self._backfill = (len(record.marks), self.published)
                self._backfilled = None
            elif type(record) is BackfillEnd:
                force = True
                self._ledger.end_backfill()
                if self._backfill is not None:
                    self._backfilled = self.published - self._backfill[1]
        if streamed:
            self._watermark(caught_up_at)
        for record, error in dead:
            await self._dead_letter(record, error)
        batcher = self._batcher
        if batcher.full:
            self._pending += await batcher.send_full()
        self._ledger.seal(batch[-1].offset + 1)
        if not self._count and not self._pending:
            return _done()
        unacked = self._unacked > 0
        if force or self._policy.due(self._count, self._age(), idle=idle, unacked=unacked):
            return await self._flush()
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiting)
        if not self._unacked:
            self._flush_later(self._policy.interval_s - self._age())
        return waiting

    async def flush(self) -> None:
        """Send what waits in the open batches now (the runtime is about to wait)."""
        async with self._lock:
            if self._failure is not None or not self._count:
                return
            try:
                await self._flush()
            except Exception as exc:
                self._fail(exc)

    def _publish(
        self,
        record: ChangeRecord,
        document: Mapping[str, Any],
        *,
        streamed: bool,
        dead: list[tuple[ChangeRecord, ValidationError]],
    ) -> None:
        """Encode one turn into its partition's open batch (no I/O).

        ``streamed``: read from the change stream (in insert order), so its
        time moves the watermark; a back-fill's scan does not.
        """
        try:
            turn = self._encoder.record(document)
        except ValidationError as exc:
            dead.append((record, exc))
            return
        if streamed:
            self._watermarks.read(turn.created_at)
        if not self._ledger.admit(turn.slot, turn.seq):
            return
        self._batcher.add(turn.key, turn.value)
        if not self._count:
            self._oldest = time.monotonic()
        self._count += 1
        self.published += 1

    def _watermark(self, caught_up_at: datetime | None) -> None:
        """Put the watermark that is due (if any) into every partition, after the turns."""
        due = self._watermarks.due(time.monotonic(), caught_up_at)
        if due is None:
            return
        at, caught_up = due
        batcher = self._batcher
        batcher.add_everywhere(
            encode(Watermark(at=at, caught_up=caught_up, share=self._share, shares=self._shares))
        )
        if not self._count:
            self._oldest = time.monotonic()
        self._count += len(batcher.partitions)
        self.watermarks += 1

    async def _dead_letter(self, record: ChangeRecord, error: ValidationError) -> None:
        """A document that is not a turn: to ``dlq.watcher`` with its JSON text (counted)."""
        document = record.document or {}
        log.error(
            "watcher: document %r is not a turn; sent to the dead-letter topic", document.get("_id")
        )
        await dead_letter(self._letters, STAGE, record, error, 1)

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        """Nothing to record: the letter is all there is."""

    def _age(self) -> float:
        return time.monotonic() - self._oldest if self._count else 0.0

    # ------------------------------------------------------------------ flush

    async def _flush(self) -> Awaitable[None]:
        """Send everything held; the acknowledgement of all of it (and of the batches
        that waited for it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        if self.published != self._counted:  # counted in bulk: the hot path stays free of it
            self._turns_out.inc(self.published - self._counted)
            self._counted = self.published
        if self._count:
            pending += await self._batcher.send_all()
            self._count = 0
            self._watch_acks(pending)
        ack: asyncio.Future[Any] = asyncio.gather(*pending) if pending else _done()
        waiting, self._waiting = self._waiting, []
        for future in waiting:
            _chain(ack, future)
        return ack

    def _watch_acks(self, futures: list[asyncio.Future[Any]]) -> None:
        """Count the latest flush's batches until Kafka acknowledged them; then send
        what waited in the open batches meanwhile."""
        self._flushes += 1
        self._unacked = len(futures)
        flush = self._flushes

        def acked(_: asyncio.Future[Any]) -> None:
            if flush == self._flushes:
                self._unacked -= 1
                if not self._unacked and self._count:  # as the policy says, or at once
                    due = self._policy.due(self._count, self._age(), idle=False, unacked=False)
                    self._flush_later(0.0 if due else self._policy.interval_s - self._age())

        for future in futures:
            future.add_done_callback(acked)

    def _flush_later(self, delay_s: float) -> None:
        """Flush the held records after ``delay_s`` (or at once), unless a submit does."""
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, delay_s), self._start_deferred)

    def _start_deferred(self) -> None:
        self._timer = None
        if self._deferred is None or self._deferred.done():
            self._deferred = asyncio.create_task(self._deferred_flush())

    async def _deferred_flush(self) -> None:
        await self.flush()

    def _fail(self, error: BaseException) -> None:
        """Fail every acknowledgement still owed; every later submit fails too."""
        self._failure = error
        waiting, self._waiting = self._waiting, []
        for future in waiting:
            if not future.done():
                future.set_exception(error)

    # ------------------------------------------------------------------ close

    def log_backfill(self) -> None:
        """Log how the back-fill went (called once its end is stored, or at a stop
        midway); no-op outside one."""
        if self._backfill is None:
            return
        marks, before = self._backfill
        complete = self._backfilled is not None
        log.warning(
            "watcher: back-fill %s: published %d turns (%d sessions had marks)",
            "done" if complete else "stopped midway",
            self._backfilled if self._backfilled is not None else self.published - before,
            marks,
        )
        self._backfill = self._backfilled = None

    async def close(self) -> None:
        """Stop the deferred flush (the attempt is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._deferred is not None:
            self._deferred.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._deferred
        waiting, self._waiting = self._waiting, []
        for future in waiting:
            future.cancel()


def _done() -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _failed(error: BaseException) -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


def _chain(source: asyncio.Future[Any], target: asyncio.Future[None]) -> None:
    """Complete ``target`` as ``source`` completes."""

    def copy(done: asyncio.Future[Any]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif (error := done.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(None)

    source.add_done_callback(copy)
