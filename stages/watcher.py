"""The change-stream watcher: every inserted turn (and session end) goes to Kafka (SPEC I1).

``mongomem run watcher`` watches inserts into ``turns`` and publishes each
turn (:func:`mongomem.codec.encode`) to the ``turns`` topic, keyed by
(project, user, session) so a session's turns stay in one partition, in
order. The producer waits for all in-sync replicas and is idempotent.

Delivery semantics
------------------
**At-least-once into Kafka; consumers de-duplicate by ``turn_id``.**

* The checkpoint lives in MongoDB (``checkpoints``): the change stream's
  resume token, written only after Kafka acknowledged every event up to it;
  and one high-water mark (highest acknowledged seq) per session, written
  every ``MARKS_INTERVAL_S`` and at every graceful stop and back-fill end. A
  mark may lag (that only adds duplicates to a back-fill), it is never ahead
  of Kafka. Tokens are stored in order. Marks (``$max`` upserts, so their
  order does not matter) are written beside the tokens, one write at a time,
  so a large one — thousands of sessions active within the interval — never
  holds the tokens up.
* **Runtime.** The watcher runs on the runtime's
  :func:`~mongomem.stages.runtime.consume` like every stage: its input is
  the change stream as a record source
  (:class:`~mongomem.stages.watcher_source.ChangeStreamSource`, whose commit
  stores the checkpoint), its core a pipelined stage
  (:class:`~mongomem.stages.watcher_core.WatcherCore`: up to
  ``SUBMITS_IN_FLIGHT`` batches are being acknowledged while the next is
  handled; a checkpoint covers a batch only once it and every batch before
  it are acknowledged).
* Turns go into one open batch per partition and leave in flushes
  (:class:`~mongomem.stages.watcher_logic.FlushPolicy`): when the stream is idle, or
  after ``MONGOMEM_STM_WATCHER_BATCH_MAX`` turns or ``…_FLUSH_INTERVAL_S`` —
  but those two wait while Kafka has not acknowledged the previous flush;
  the turns keep filling the open batches (a full one, ``BATCH_BYTES``, is
  sent on its own). So a backlog is checkpointed about once per Kafka round
  trip rather than every ``BATCH_MAX`` turns. A token that moved while no
  turn arrived (an idle stream on MongoDB) is stored at most every
  ``TOKEN_REFRESH_S``.
* The stream is read ahead
  (:class:`~mongomem.stages.watcher_reader.ChangeReader`, ``READ_BATCH`` changes
  per server batch, at most ``READ_AHEAD`` waiting), so the next batch is on
  its way while the current one is published; only the resume token and the
  turn are read (:data:`~mongomem.stages.watcher_logic.READ_PIPELINE`). The token
  stored is that of the last change *published*, never one merely read.
* On restart the stream resumes after the stored token. A crash republishes
  the events after the last stored checkpoint — the unacknowledged flush,
  the open and full batches (at most ``BATCH_BYTES`` each, one open and two
  handed over per partition), the batches acknowledged but not yet committed
  (the runtime commits after every poll) and the commits still being stored
  (at most ``COMMITS_IN_FLIGHT``) — never fewer.
* If the stored token cannot be resumed (the server reports the history as
  lost or rejects the token), or there is no token at all, the watcher logs
  it loudly and **back-fills**: it opens a new stream first, then scans
  ``turns`` in (session, seq) order and publishes every turn above its
  session's high-water mark, then streams. Turns inserted during the scan
  are in both; the overlap is skipped by seq. Seqs are gap-free and inserted
  in order per session (see :mod:`mongomem.stm.turns`), so every turn not yet
  published is above its session's mark — no clock is involved.
* **Watermarks** (:class:`~mongomem.models.Watermark`): every
  ``MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S`` (backing off to
  ``…_IDLE_INTERVAL_S`` while no turn is read) the watcher puts one record
  into every partition, after the turns it has handed to the batches: "every
  turn created before ``at`` is ahead of this". ``at`` is the start of the
  latest empty read of the stream (caught up) or the latest ``created_at``
  read from it (behind), less ``…_WATERMARK_LATENESS_S``
  (:class:`~mongomem.stages.watcher_logic.WatermarkClock`); a back-fill
  publishes none (its scan is not in insert order), and watermarks never go
  back. They travel in the batches, so they are acknowledged and
  checkpointed with the turns, and a crash republishes them as duplicates
  (harmless: an older watermark closes nothing new). Windowing closes idle
  windows on these alone, so an outage or lag of the watcher only delays
  idle closes.
* **Shares** (``MONGOMEM_WATCHER_SHARDS`` = N, ``MONGOMEM_WATCHER_SHARD`` = k):
  watcher k of N reads only the documents whose ``bucket``
  (:func:`~mongomem.buckets.session_bucket`, stored by :mod:`mongomem.stm.turns`) is k
  modulo N — a ``$mod`` in the change stream's ``$match`` and in the back-fill's
  filter, evaluated by the server; share 0 also reads documents without a
  bucket (written before buckets existed). N = 1 reads everything, as before.
  Each share stores its own resume token; marks are per session (a session
  is in one share). Its watermarks say ``share=k, shares=N``, and windowing
  applies them only to that share's sessions, so a caught-up share never
  closes a lagging share's windows. Changing N: stop every watcher, start
  the new set. A share with no token of its own back-fills its share above
  the session marks the previous watchers stored (at a graceful stop every
  mark is stored, so nothing is republished; after a crash, the turns since
  the last marks are, as for any back-fill).
* A turn document that is not a valid turn goes to ``dlq.watcher`` with its
  JSON text; the stream goes on. Documents become Kafka records in
  :mod:`mongomem.stages.watcher_encode`: a checked fast path for the plain shape, full
  validation for everything else — the same bytes and the same verdicts.
* SIGTERM/SIGINT: flush, store the checkpoint, exit 0. A broken connection
  to MongoDB or Kafka restarts the loop from the stored checkpoint after a
  back-off.

The decisions (token validity, error verdicts, marks, flush timing) are in
:mod:`mongomem.stages.watcher_logic`; the record source in
:mod:`mongomem.stages.watcher_source`, the stage core in
:mod:`mongomem.stages.watcher_core`; this module assembles them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.kafka import (
    TURNS as TURNS_TOPIC,
)
from mongomem.adapters.kafka import (
    ensure_topics,
    make_producer,
    pipeline_topics,
)
from mongomem.adapters.mongo import TURNS, Document, connect, database
from mongomem.settings import KafkaSettings, Settings, StmSettings, WatcherSettings
from mongomem.stages.runtime import (
    PublishedDeadLetters,
    consume,
    run_stage,
    unless_stopped,
)
from mongomem.stages.runtime.kafka import (
    KafkaPublisher,
    PartitionBatcher,
    Producer,
    kafka_publisher,
)
from mongomem.stages.watcher_checkpoints import WatcherCheckpoints
from mongomem.stages.watcher_core import STAGE, WatcherCore
from mongomem.stages.watcher_logic import (
    FlushPolicy,
    PublishLedger,
    WatermarkClock,
    read_pipeline,
)
from mongomem.stages.watcher_reader import ChangeReader, Idle
from mongomem.stages.watcher_source import COMMITS_IN_FLIGHT, TOKEN_REFRESH_S, ChangeStreamSource

__all__ = [
    "BATCH_BYTES",
    "COMMITS_IN_FLIGHT",
    "MARKS_INTERVAL_S",
    "READ_AHEAD",
    "READ_BATCH",
    "STAGE",
    "SUBMITS_IN_FLIGHT",
    "TOKEN_REFRESH_S",
    "ChangeReader",
    "ChangeStreamWatcher",
    "Idle",
    "WatcherStage",
    "main",
    "make_watcher_producer",
    "run_watcher",
]

#: How often the per-session high-water marks are stored (read when a watcher is made).
MARKS_INTERVAL_S = 5.0
#: Batches (of at most ``MONGOMEM_STM_WATCHER_BATCH_MAX`` changes) submitted and not yet
#: acknowledged, at most: while the previous flush is being acknowledged, the turns of
#: these wait in the open batches (bounded in bytes by ``BATCH_BYTES`` per batch).
SUBMITS_IN_FLIGHT = 64
#: Bytes per partition batch (aiokafka's default is 16 KiB). aiokafka sends one
#: request at a time to a broker, with at most one batch per partition in it,
#: so small batches cap a backlog drain; this stays well under the broker's
#: default ``message.max.bytes`` (1 MiB).
BATCH_BYTES = 256 * 1024
#: Changes per change-stream batch. A backlog then arrives in pieces, and the
#: publisher starts on the first while the server still prepares the next.
READ_BATCH = 3000
#: Changes read ahead of the publisher, at most.
READ_AHEAD = 2 * READ_BATCH
#: How long one poll of the change stream waits for a change (a stop is seen between polls).
POLL_TIMEOUT_S = 0.2
log = logging.getLogger("mongomem.watcher")


class ChangeStreamWatcher:
    """Publishes inserted turns to Kafka and checkpoints the resume token.

    One attempt: :meth:`run` opens the change stream (or back-fills) and
    feeds it through :func:`~mongomem.stages.runtime.consume` to the
    :class:`~mongomem.stages.watcher_core.WatcherCore` until ``stop``.
    """

    def __init__(
        self,
        db: AsyncDatabase[Document],
        producer: Producer,
        kafka: KafkaSettings,
        stm: StmSettings | None = None,
        watcher: WatcherSettings | None = None,
    ) -> None:
        stm = stm or StmSettings()
        watcher = watcher or WatcherSettings()
        #: This watcher's share of the sessions (see "Shares" in the module docstring).
        self.share, self.shares = watcher.shard, watcher.shards
        self._kafka = kafka
        self._topic = kafka.topic(TURNS_TOPIC)
        self._producer = producer
        self._policy = FlushPolicy(stm.watcher_batch_max, stm.watcher_flush_interval_s)
        self._ledger = PublishLedger()
        self._watermarks = WatermarkClock(
            lateness=timedelta(seconds=stm.watcher_watermark_lateness_s),
            interval_s=stm.watcher_watermark_interval_s,
            idle_interval_s=stm.watcher_watermark_idle_interval_s,
        )
        self._checkpoint_store = WatcherCheckpoints(db, self._topic, self.share, self.shares)
        # Naive datetimes (UTC, as stored): cheaper to decode than tz-aware
        # ones, and read as UTC by both encoding paths.
        turns = db[TURNS].with_options(
            codec_options=db.codec_options.with_options(tz_aware=False, tzinfo=None)
        )
        self._source = ChangeStreamSource(
            turns,
            self._checkpoint_store,
            self._ledger,
            read_pipeline=read_pipeline(self.share, self.shares),
            share=self.share,
            shares=self.shares,
            read_batch=READ_BATCH,
            read_ahead=READ_AHEAD,
            poll_s=stm.watcher_poll_interval_s,
            max_await_ms=max(1, int(self._policy.interval_s * 1000)),
            marks_interval_s=MARKS_INTERVAL_S,
            backfilled=self._backfilled,
        )
        self._core: WatcherCore | None = None

    @property
    def streaming(self) -> bool:
        """True while following the change stream (after any back-fill): ready."""
        return self._source.streaming

    @property
    def published(self) -> int:
        """Turns handed to Kafka by this watcher."""
        return self._core.published if self._core is not None else 0

    @property
    def watermarks(self) -> int:
        """Watermarks put into the turns topic by this watcher."""
        return self._core.watermarks if self._core is not None else 0

    @property
    def checkpoints(self) -> int:
        """Checkpoint writes stored."""
        return self._source.checkpoints

    @property
    def backfills(self) -> int:
        """Back-fills begun."""
        return self._source.backfills

    def _backfilled(self) -> None:
        if self._core is not None:
            self._core.log_backfill()

    async def run(self, stop: asyncio.Event) -> None:
        """Stream until ``stop`` is set; then flush and checkpoint."""
        publisher = KafkaPublisher(self._producer)
        partitions = await publisher.partitions(self._topic)
        core = self._core = WatcherCore(
            PartitionBatcher(self._producer, self._topic, partitions),
            PublishedDeadLetters(publisher, self._kafka),
            self._ledger,
            self._policy,
            self._watermarks,
            share=self.share,
            shares=self.shares,
        )
        source = self._source
        stopping = asyncio.create_task(stop.wait())
        stopping.add_done_callback(lambda _: source.interrupt())  # a waiting poll ends at once
        try:
            await source.open()
            await consume(
                source,
                core,
                publisher=publisher,
                kafka=self._kafka,
                stop=stop,
                max_records=self._policy.batch_max,
                poll_timeout_s=POLL_TIMEOUT_S,
                in_flight=SUBMITS_IN_FLIGHT,
            )
            await source.finish()
            if source.scanning:
                # Stopped mid-scan: no token of the new stream was stored, so the
                # next start scans again (above the marks just stored).
                core.log_backfill()
        finally:
            stopping.cancel()
            await core.close()
            await source.close()


# ---------------------------------------------------------------------- process


#: The watcher's producer settings: larger batches and no linger. The watcher fills its
#: batches itself and sends them when full or at a flush (:class:`PartitionBatcher`);
#: lingering would only delay a batch that is already complete.
PRODUCER_OPTIONS: dict[str, Any] = {"max_batch_size": BATCH_BYTES, "linger_ms": 0}


def make_watcher_producer(kafka: KafkaSettings) -> Producer:
    """:func:`~mongomem.adapters.kafka.make_producer` with :data:`PRODUCER_OPTIONS`, unstarted."""
    return make_producer(kafka, **PRODUCER_OPTIONS)


async def run_watcher(settings: Settings, stop: asyncio.Event) -> None:
    """Run the watcher until ``stop`` is set (one attempt: the runtime restarts it).

    A stop while Kafka or MongoDB is still being reached ends the attempt at
    once: nothing was read, so there is nothing to drain.
    """
    topics = ensure_topics(settings.kafka, pipeline_topics(settings.kafka, [STAGE]))
    if not await unless_stopped(stop, topics):
        return
    client = connect(settings.mongodb)
    try:
        async with contextlib.AsyncExitStack() as stack:
            opening = asyncio.ensure_future(
                stack.enter_async_context(kafka_publisher(settings.kafka, **PRODUCER_OPTIONS))
            )
            if not await unless_stopped(stop, opening):
                return
            watcher = ChangeStreamWatcher(
                database(client, settings.mongodb),
                opening.result().producer,
                settings.kafka,
                settings.stm,
                settings.watcher,
            )
            await watcher.run(stop)
    finally:
        await client.close()


class WatcherStage:
    """The watcher as a runtime :class:`~mongomem.stages.runtime.ports.Stage`."""

    name = STAGE

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, stop: asyncio.Event) -> None:
        await run_watcher(self.settings, stop)


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Entry of ``mongomem run watcher``: runs until SIGTERM/SIGINT (then flushes and
    checkpoints), restarting from the checkpoint after outages; exits 0."""
    await run_stage(WatcherStage(settings), settings)
