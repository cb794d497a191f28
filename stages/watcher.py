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
  handed over per partition) and the commits still being stored (at most
  ``COMMITS_IN_FLIGHT``) — never fewer.
* If the stored token cannot be resumed (the server reports the history as
  lost or rejects the token), or there is no token at all, the watcher logs
  it loudly and **back-fills**: it opens a new stream first, then scans
  ``turns`` in (session, seq) order and publishes every turn above its
  session's high-water mark, then streams. Turns inserted during the scan
  are in both; the overlap is skipped by seq. Seqs are gap-free and inserted
  in order per session (see :mod:`mongomem.stm`), so every turn not yet
  published is above its session's mark — no clock is involved.
* **Watermarks** (:class:`~mongomem.models.Watermark`): every
  ``MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S`` the watcher puts one record
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
  (:func:`~mongomem.buckets.session_bucket`, stored by :mod:`mongomem.stm`) is k
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
:mod:`mongomem.stages.watcher_logic`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bson import json_util
from pydantic import ValidationError
from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.buckets import share_filter
from mongomem.codec import encode
from mongomem.errors import (
    ChangeFeedError,
    MongomemError,
    ResumeTokenLost,
    StorageError,
)
from mongomem.kafka import (
    TURNS as TURNS_TOPIC,
)
from mongomem.kafka import (
    ensure_topics,
    make_producer,
    pipeline_topics,
)
from mongomem.metrics import MESSAGES, STAGE_BATCH_SECONDS
from mongomem.models import Watermark
from mongomem.mongo import TURNS, Document, connect, database
from mongomem.settings import KafkaSettings, Settings, StmSettings, WatcherSettings
from mongomem.stages.runtime import (
    Message,
    PublishedDeadLetters,
    dead_letter,
    run_stage,
    unless_stopped,
)
from mongomem.stages.runtime.kafka import (
    KafkaPublisher,
    PartitionBatcher,
    Producer,
    kafka_publisher,
)
from mongomem.stages.watcher_checkpoints import WatcherCheckpoint, WatcherCheckpoints
from mongomem.stages.watcher_encode import TurnEncoder
from mongomem.stages.watcher_logic import (
    WATCH_PIPELINE,
    FlushPolicy,
    PublishLedger,
    Slot,
    WatermarkClock,
    open_failure_verdict,
    read_pipeline,
)
from mongomem.stages.watcher_reader import ChangeReader, Idle, Stream

__all__ = [
    "BATCH_BYTES",
    "COMMITS_IN_FLIGHT",
    "MARKS_INTERVAL_S",
    "READ_AHEAD",
    "READ_BATCH",
    "STAGE",
    "TOKEN_REFRESH_S",
    "ChangeReader",
    "ChangeStreamWatcher",
    "Idle",
    "WatcherStage",
    "main",
    "make_watcher_producer",
    "run_watcher",
]

STAGE = "watcher"
#: How often the per-session high-water marks are stored (see ``_commit``).
MARKS_INTERVAL_S = 5.0
#: Batches being acknowledged while the next one is read.
COMMITS_IN_FLIGHT = 4
#: How often a token that moved without any turn (an idle stream) is stored.
TOKEN_REFRESH_S = 5.0
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
log = logging.getLogger("mongomem.watcher")


class ChangeStreamWatcher:
    """Publishes inserted turns to Kafka and checkpoints the resume token."""

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
        self._read_pipeline = read_pipeline(self.share, self.shares)
        self._db = db
        # Naive datetimes (UTC, as stored): cheaper to decode than tz-aware
        # ones, and read as UTC by both encoding paths.
        self._turns = db[TURNS].with_options(
            codec_options=db.codec_options.with_options(tz_aware=False, tzinfo=None)
        )
        self._checkpoint_store = WatcherCheckpoints(
            db, kafka.topic(TURNS_TOPIC), self.share, self.shares
        )
        self._producer = producer
        self._letters = PublishedDeadLetters(KafkaPublisher(producer), kafka)
        self._kafka = kafka
        self._topic = kafka.topic(TURNS_TOPIC)
        self._policy = FlushPolicy(stm.watcher_batch_max, stm.watcher_flush_interval_s)
        self._poll_s = stm.watcher_poll_interval_s
        self._ledger = PublishLedger()
        self._watermarks = WatermarkClock(
            lateness=timedelta(seconds=stm.watcher_watermark_lateness_s),
            interval_s=stm.watcher_watermark_interval_s,
        )
        self._encoder = TurnEncoder()
        self._pending: list[asyncio.Future[Any]] = []
        self._dead: list[tuple[Mapping[str, Any], ValidationError]] = []
        #: Batches of the latest flush that Kafka has not acknowledged yet.
        self._unacked = 0
        self._flushes = 0
        #: Set when the reader has changes or Kafka acknowledged everything sent.
        self._wake = asyncio.Event()
        #: The resume token of the last change handled (``None``: none yet).
        self._token: Mapping[str, Any] | None = None
        self._count = 0
        self._batcher: PartitionBatcher | None = None
        self._oldest = 0.0
        self._scheduled_token: dict[str, Any] | None = None
        self._commits: deque[asyncio.Task[None]] = deque()
        self._token_only_at = 0.0
        self._acked_marks: dict[Slot, int] = {}
        self._marks_written_at = time.monotonic()
        #: The marks write in flight, beside the token commits (at most one).
        self._marks_write: asyncio.Task[None] | None = None
        #: True while following the change stream (after any back-fill): ready.
        self.streaming = False
        self.published = 0
        self._counted = 0  # of ``published``, in mongomem_messages_total
        self._turns_out = MESSAGES.labels(STAGE, "ok")
        self.watermarks = 0
        self.checkpoints = 0
        self.backfills = 0

    # ------------------------------------------------------------------ run

    async def run(self, stop: asyncio.Event) -> None:
        """Stream until ``stop`` is set; then flush and checkpoint."""
        partitions = await KafkaPublisher(self._producer).partitions(self._topic)
        self._batcher = PartitionBatcher(self._producer, self._topic, partitions)
        token = await self._load_token()
        try:
            while not stop.is_set():
                stream = await self._open_or_backfill(token, stop)
                if stream is None:
                    return
                try:
                    await self._stream(stream, stop)
                    return
                except ResumeTokenLost as exc:
                    log.error("watcher: change stream history lost while reading (%s)", exc)
                    token = None
                finally:
                    await _close(stream)
        finally:
            await self._abandon_commits()

    async def _open_or_backfill(
        self, token: dict[str, Any] | None, stop: asyncio.Event
    ) -> Stream | None:
        if token is not None:
            try:
                stream = await self._open(token)
            except ResumeTokenLost as exc:
                log.error(
                    "watcher: the stored resume token cannot be resumed from (%s); "
                    "back-filling from %r so that no turn is lost",
                    exc,
                    TURNS,
                )
            else:
                log.info("watcher: resuming after the stored token → %s", self._topic)
                return stream
        else:
            log.warning("watcher: no usable resume token stored; back-filling from %r", TURNS)
        stream = await self._open(None)
        try:
            complete = await self._backfill(stop)
        except BaseException:
            await _close(stream)
            raise
        if not complete:
            # Stopped mid-scan: storing this stream's token would skip the rest
            # of the scan on the next start. Keep the old checkpoint instead.
            await _close(stream)
            return None
        return stream

    async def _open(self, token: dict[str, Any] | None) -> Stream:
        max_await = max(1, int(self._policy.interval_s * 1000))
        try:
            return await self._turns.watch(
                self._read_pipeline,
                resume_after=token,
                max_await_time_ms=max_await,
                batch_size=READ_BATCH,
            )
        except OperationFailure as exc:
            verdict = open_failure_verdict(exc.code, with_token=token is not None)
            if verdict == "lost":
                raise ResumeTokenLost(f"server code {exc.code}: {exc}") from exc
            if verdict == "probe":
                try:
                    await _close(await self._turns.watch(WATCH_PIPELINE))
                except PyMongoError as probe_exc:
                    raise ChangeFeedError(f"cannot open the change stream: {exc}") from probe_exc
                raise ResumeTokenLost(f"the server rejects the stored token: {exc}") from exc
            raise ChangeFeedError(f"cannot open the change stream: {exc}") from exc
        except PyMongoError as exc:
            raise ChangeFeedError(f"cannot open the change stream: {exc}") from exc

    async def _stream(self, stream: Stream, stop: asyncio.Event) -> None:
        self.streaming = True
        try:
            await self._follow(stream, stop)
        finally:
            self.streaming = False

    async def _follow(self, stream: Stream, stop: asyncio.Event) -> None:
        self._token = None
        reader = ChangeReader(stream, self._wake, limit=READ_AHEAD, poll_s=self._poll_s)
        try:
            while not stop.is_set():
                changes = reader.take(self._policy.batch_max)
                if not changes:
                    if self._due(idle=False):  # Kafka acknowledged while records waited
                        await self._flush(self._token)
                        continue
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                idle = False
                caught_up_at: datetime | None = None
                for change in changes:
                    if isinstance(change, Idle):
                        self._token, idle, caught_up_at = change.token, True, change.read_at
                        continue
                    idle, caught_up_at = False, None
                    document = change.get("fullDocument")
                    if type(document) is dict or isinstance(document, Mapping):
                        self._publish(document, streamed=True)
                    self._token = change["_id"]
                self._watermark(caught_up_at)
                await self._hand_over()
                if idle or self._due(idle=False):
                    await self._flush(self._token)
                await asyncio.sleep(0)  # let acknowledgements and the reader in
        finally:
            await reader.close()
        await self._flush(self._token, wait=True)

    async def _backfill(self, stop: asyncio.Event) -> bool:
        """Publish every turn above its session's mark; False when stopped midway."""
        self.backfills += 1
        complete = True
        marks = await self._checkpoint_store.load_marks()
        self._ledger.seed(marks.items())
        before = self.published
        try:
            cursor = self._turns.find(share_filter(self.share, self.shares)).sort(
                [
                    ("project_id", ASCENDING),
                    ("user_id", ASCENDING),
                    ("session_id", ASCENDING),
                    ("seq", ASCENDING),
                ]
            )
            handled = 0
            async for document in cursor:
                self._publish(document, streamed=False)
                handled += 1
                if handled % self._policy.batch_max:
                    continue
                await self._hand_over()
                if self._due(idle=False):
                    await self._flush(None)
                if stop.is_set():
                    complete = False
                    break
                await asyncio.sleep(0)  # let acknowledgements in
            await self._hand_over()
        except PyMongoError as exc:
            raise StorageError(f"back-fill could not read {TURNS!r}: {exc}") from exc
        await self._flush(None, wait=True)
        self._ledger.end_backfill()
        log.warning(
            "watcher: back-fill %s: published %d turns (%d sessions had marks)",
            "done" if complete else "stopped midway",
            self.published - before,
            len(marks),
        )
        return complete

    # ------------------------------------------------------------------ publish

    def _publish(self, document: Mapping[str, Any], *, streamed: bool) -> None:
        """Encode one turn into its partition's open batch (no I/O; see ``_hand_over``).

        ``streamed``: read from the change stream (in insert order), so its
        time moves the watermark; a back-fill's scan does not.
        """
        try:
            record = self._encoder.record(document)
        except ValidationError as exc:
            self._dead.append((document, exc))
            return
        if streamed:
            self._watermarks.read(record.created_at)
        if not self._ledger.admit(record.slot, record.seq):
            return
        self._batches().add(record.key, record.value)
        self._note()
        self.published += 1

    def _watermark(self, caught_up_at: datetime | None) -> None:
        """Put the watermark that is due (if any) into every partition, after the turns."""
        due = self._watermarks.due(time.monotonic(), caught_up_at)
        if due is None:
            return
        at, caught_up = due
        batcher = self._batches()
        batcher.add_everywhere(
            encode(Watermark(at=at, caught_up=caught_up, share=self.share, shares=self.shares))
        )
        for _ in batcher.partitions:
            self._note()
        self.watermarks += 1

    async def _hand_over(self) -> None:
        """Send what cannot wait for the next flush: full batches, dead letters."""
        dead, self._dead = self._dead, []
        for document, error in dead:
            await self._dead_letter(document, error)
        batcher = self._batches()
        if batcher.full:
            self._pending += await batcher.send_full()

    def _watch_acks(self, futures: list[asyncio.Future[Any]]) -> None:
        """Count the latest flush's batches until Kafka acknowledged them; then wake up."""
        self._flushes += 1
        self._unacked = len(futures)
        flush = self._flushes

        def acked(_: asyncio.Future[Any]) -> None:
            if flush == self._flushes:
                self._unacked -= 1
                if not self._unacked:
                    self._wake.set()

        for future in futures:
            future.add_done_callback(acked)

    def _due(self, *, idle: bool) -> bool:
        return self._policy.due(self._count, self._age(), idle=idle, unacked=self._unacked > 0)

    async def _dead_letter(self, document: Mapping[str, Any], error: Exception) -> None:
        """A document that is not a turn: to ``dlq.watcher`` with its JSON text (counted)."""
        log.error(
            "watcher: document %r is not a turn; sent to the dead-letter topic", document.get("_id")
        )
        source = f"mongodb:{self._db.name}.{TURNS}"  # the collection, not a topic
        record = Message(source, 0, 0, None, json_util.dumps(document).encode())
        await dead_letter(self._letters, STAGE, record, error, 1)

    def _note(self) -> None:
        """Count one record handed to Kafka since the last flush."""
        if not self._count:
            self._oldest = time.monotonic()
        self._count += 1

    def _batches(self) -> PartitionBatcher:
        if self._batcher is None:
            raise RuntimeError("the watcher is not running")
        return self._batcher

    def _age(self) -> float:
        return time.monotonic() - self._oldest if self._count else 0.0

    # ------------------------------------------------------------------ checkpoint

    async def _flush(self, token: Mapping[str, Any] | None, *, wait: bool = False) -> None:
        """Hand the batch sent so far to a commit: acks first, then marks and token.

        Commits run in the background, so the next batches are read and sent
        while earlier ones are being acknowledged; up to
        ``COMMITS_IN_FLIGHT`` at once, each storing its checkpoint only after
        the one before it did. A failed commit surfaces here, at a later
        flush. ``wait`` returns once everything sent so far is checkpointed.
        """
        pending, self._pending = self._pending, []
        if self.published != self._counted:  # counted in bulk: the hot path stays free of it
            self._turns_out.inc(self.published - self._counted)
            self._counted = self.published
        if self._count:
            pending += await self._batches().send_all()
            self._watch_acks(pending)
            self._count = 0
        marks = self._ledger.take_marks()
        new_token = dict(token) if token is not None else None
        if new_token == self._scheduled_token:
            new_token = None
        elif new_token is not None and not (pending or marks or wait):
            # Only the token moved (MongoDB's post-batch token advances with
            # every write anywhere in the cluster): store it now and then.
            if time.monotonic() - self._token_only_at < TOKEN_REFRESH_S:
                new_token = None
            else:
                self._token_only_at = time.monotonic()
        work = bool(pending or marks or new_token is not None)
        await self._reap(keep=0 if wait else COMMITS_IN_FLIGHT - 1)
        if work or (wait and self._acked_marks):
            if new_token is not None:
                self._scheduled_token = new_token
            previous = self._commits[-1] if self._commits else None
            self._commits.append(
                asyncio.create_task(
                    self._commit(previous, pending, marks, new_token, all_marks=wait)
                )
            )
        if wait:
            await self._reap(keep=0)

    async def _reap(self, keep: int) -> None:
        """Await the oldest commits until at most ``keep`` are unfinished (raises failures).

        The marks write is awaited too once it is done, or when ``keep`` is 0;
        a failed one is raised here.
        """
        while self._commits and (len(self._commits) > keep or self._commits[0].done()):
            await self._commits.popleft()
        marks_write = self._marks_write
        if marks_write is not None and (keep == 0 or marks_write.done()):
            self._marks_write = None
            await marks_write

    async def _abandon_commits(self) -> None:
        """Cancel the commits and the marks write still running (the stream failed or stopped)."""
        commits, self._commits = self._commits, deque()
        if self._marks_write is not None:
            commits.append(self._marks_write)
            self._marks_write = None
        for commit in commits:
            commit.cancel()  # no-op when it has finished
        for commit in commits:
            with contextlib.suppress(asyncio.CancelledError, MongomemError):
                await commit  # also retrieves a failure nobody awaited

    async def _commit(
        self,
        previous: asyncio.Task[None] | None,
        pending: list[asyncio.Future[Any]],
        marks: dict[Slot, int],
        token: dict[str, Any] | None,
        *,
        all_marks: bool,
    ) -> None:
        started = time.perf_counter()
        if pending:
            await asyncio.gather(*pending)  # a failed acknowledgement is a BrokerError
        if previous is not None:
            await previous  # checkpoints in order; a failure before this one fails it too
        # Acknowledged: these marks may be stored. They are written every
        # MARKS_INTERVAL_S (and at every final or back-fill flush), not with
        # every token: a mark only bounds the re-publishing of a back-fill, so
        # one that lags costs duplicates, never a lost turn.
        for slot, seq in marks.items():
            if seq > self._acked_marks.get(slot, 0):
                self._acked_marks[slot] = seq
        now_s = time.monotonic()
        if all_marks:  # a final or back-fill flush: every mark, with the token
            if self._marks_write is not None:
                marks_write, self._marks_write = self._marks_write, None
                await marks_write
            marks, self._acked_marks = self._acked_marks, {}
            self._marks_written_at = now_s
        else:
            marks = {}
            due = now_s - self._marks_written_at >= MARKS_INTERVAL_S
            if due and self._acked_marks and self._marks_write is None:
                batch, self._acked_marks = self._acked_marks, {}
                self._marks_written_at = now_s
                self._marks_write = asyncio.create_task(self._store(batch, None))
        await self._store(marks, token)
        STAGE_BATCH_SECONDS.labels(STAGE).observe(time.perf_counter() - started)

    async def _store(self, marks: dict[Slot, int], token: dict[str, Any] | None) -> None:
        """Save ``marks`` and then ``token`` (either may be empty): :class:`WatcherCheckpoints`."""
        if await self._checkpoint_store.save(WatcherCheckpoint(marks, token)):
            self.checkpoints += 1

    async def _load_token(self) -> dict[str, Any] | None:
        token = await self._checkpoint_store.load_token()
        self._scheduled_token = token
        return token


async def _close(stream: Stream) -> None:
    with contextlib.suppress(PyMongoError):
        await stream.close()


# ---------------------------------------------------------------------- process


#: The watcher's producer settings: larger batches and no linger. The watcher fills its
#: batches itself and sends them when full or at a flush (:class:`PartitionBatcher`);
#: lingering would only delay a batch that is already complete.
PRODUCER_OPTIONS: dict[str, Any] = {"max_batch_size": BATCH_BYTES, "linger_ms": 0}


def make_watcher_producer(kafka: KafkaSettings) -> Producer:
    """:func:`~mongomem.kafka.make_producer` with :data:`PRODUCER_OPTIONS` (not started)."""
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
