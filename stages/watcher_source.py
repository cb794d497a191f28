"""The change stream as a runtime :class:`~mongomem.stages.runtime.ports.RecordSource`.

The watcher (:mod:`mongomem.stages.watcher`) is driven by the runtime's
:func:`~mongomem.stages.runtime.consume` like every stage; this is its input.
One ordered partition, ``0``; offsets are a running count of the records
handed out by this source (they restart at 0 with every attempt: the
position that survives is the checkpoint, not the offset). Records, in order:

* :class:`StreamedTurn` — one insert read from the change stream (read ahead
  by :class:`~mongomem.stages.watcher_reader.ChangeReader`), with its resume
  token;
* :class:`CaughtUp` — an empty read: the stream's token at that point and
  when the read began (what the caught-up watermark needs);
* a back-fill (no usable token, or the history was lost): :class:`BackfillStart`
  (the stored session marks), one :class:`ScannedTurn` per document of the
  scan of ``turns`` in (session, seq) order, then :class:`BackfillEnd` —
  all before the first record of the stream opened before the scan.

:meth:`ChangeStreamSource.commit` ``({0: n})`` (every record below ``n``
handled and acknowledged) stores the checkpoint through
:class:`~mongomem.stages.watcher_checkpoints.WatcherCheckpoints`: the token of
the last record below ``n`` that has one (a back-fill's records have none, so
no token of the new stream is stored before the scan is complete) and the
session marks that the :class:`~mongomem.stages.watcher_logic.PublishLedger`
sealed below ``n``. Stores run in the background, each after the one before
it (at most :data:`COMMITS_IN_FLIGHT` at once; a failed one is raised by a
later ``commit``); marks are written every ``marks_interval_s`` beside the
tokens, one write at a time, and all of them at the back-fill's end and at
:meth:`~ChangeStreamSource.finish` (a graceful stop).

A record's :attr:`~ChangeRecord.value` (the document as JSON text) is made
only when asked for: by a dead letter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import json_util
from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.adapters.mongo import TURNS, Document
from mongomem.buckets import share_filter
from mongomem.errors import ChangeFeedError, MongomemError, ResumeTokenLost, StorageError
from mongomem.logs import dependency_ok
from mongomem.stages.runtime.ports import Headers, Record
from mongomem.stages.watcher_checkpoints import WatcherCheckpoint, WatcherCheckpoints
from mongomem.stages.watcher_logic import (
    WATCH_PIPELINE,
    PublishLedger,
    Slot,
    open_failure_verdict,
)
from mongomem.stages.watcher_reader import ChangeReader, Idle, Stream

__all__ = [
    "COMMITS_IN_FLIGHT",
    "TOKEN_REFRESH_S",
    "BackfillEnd",
    "BackfillStart",
    "CaughtUp",
    "ChangeRecord",
    "ChangeStreamSource",
    "ScannedTurn",
    "StreamedTurn",
]

log = logging.getLogger("mongomem.watcher")

#: Checkpoint stores running at once (each waits for the one before it).
COMMITS_IN_FLIGHT = 4
#: How often a token that moved without any turn (an idle stream) is stored.
TOKEN_REFRESH_S = 5.0
#: The server's oplog (in database ``local``): its size is the idle reader's probe.
OPLOG = "oplog.rs"


class ChangeRecord:
    """A record of the change-stream source (partition 0, no key, no headers)."""

    __slots__ = ("document", "offset", "token", "topic")
    partition: int = 0
    key: bytes | None = None
    headers: Headers = ()

    def __init__(
        self,
        topic: str,
        offset: int,
        document: Mapping[str, Any] | None = None,
        token: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.offset = offset
        #: The turn document (``None``: the change carried none, or a marker record).
        self.document = document
        #: The resume token after this record (``None``: a back-fill's record).
        self.token = token

    @property
    def value(self) -> bytes | None:
        """The document as MongoDB extended JSON (made on demand: for a dead letter)."""
        if self.document is None:
            return None
        return json_util.dumps(self.document).encode()


class StreamedTurn(ChangeRecord):
    """An insert read from the change stream (in insert order: it moves the watermark)."""

    __slots__ = ()


class ScannedTurn(ChangeRecord):
    """A document of the back-fill's scan (not in insert order: no watermark)."""

    __slots__ = ()


class CaughtUp(ChangeRecord):
    """An empty read of the stream: everything inserted before ``read_at`` was read."""

    __slots__ = ("read_at",)

    def __init__(
        self, topic: str, offset: int, token: Mapping[str, Any] | None, read_at: datetime
    ) -> None:
        super().__init__(topic, offset, None, token)
        self.read_at = read_at


class BackfillStart(ChangeRecord):
    """A back-fill begins: the session marks stored so far (what is already published)."""

    __slots__ = ("marks",)

    def __init__(self, topic: str, offset: int, marks: Mapping[Slot, int]) -> None:
        super().__init__(topic, offset)
        self.marks = marks


class BackfillEnd(ChangeRecord):
    """The back-fill's scan is complete; the stream's records follow."""

    __slots__ = ()


class ChangeStreamSource:
    """The watcher's :class:`~mongomem.stages.runtime.ports.RecordSource` (see the module doc).

    :meth:`open` first (resume after the stored token, or prepare a
    back-fill), then :meth:`poll` / :meth:`commit` (through
    :func:`~mongomem.stages.runtime.consume`), :meth:`finish` after a
    graceful stop, and :meth:`close` always.
    """

    def __init__(
        self,
        turns: AsyncCollection[Document],
        checkpoints: WatcherCheckpoints,
        ledger: PublishLedger,
        *,
        read_pipeline: list[dict[str, Any]],
        share: int = 0,
        shares: int = 1,
        read_batch: int,
        read_ahead: int,
        poll_s: float,
        max_await_ms: int,
        marks_interval_s: float,
        backfilled: Callable[[], None] | None = None,
        idle_probe: bool = True,
    ) -> None:
        self._turns = turns
        self._checkpoints = checkpoints
        self._ledger = ledger
        self._read_pipeline = read_pipeline
        self._share, self._shares = share, shares
        self._read_batch = read_batch
        self._read_ahead = read_ahead
        self._poll_s = poll_s
        self._max_await_ms = max_await_ms
        self._marks_interval_s = marks_interval_s
        #: Called once a back-fill's end is stored (everything it published checkpointed).
        self._backfilled = backfilled
        #: What dead letters name as their source: the collection, not a topic.
        self.topic = f"mongodb:{turns.database.name}.{TURNS}"
        self._stream: Stream | None = None
        self._reader: ChangeReader | None = None
        self._wake = asyncio.Event()
        #: The back-fill's cursor while scanning (``None``: not back-filling).
        self._scan: AsyncCursor[Document] | None = None
        self._scan_started = False
        #: Offset of the back-fill's :class:`BackfillEnd` until a commit covers it.
        self._backfill_end: int | None = None
        self._next = 0
        self._committed = 0
        #: (end offset, token) per poll, oldest first, until committed.
        self._tokens: deque[tuple[int, Mapping[str, Any]]] = deque()
        #: The latest token committed (stored, or skipped by the refresh interval).
        self._latest_token: Mapping[str, Any] | None = None
        self._scheduled_token: dict[str, Any] | None = None
        self._token_only_at = 0.0
        self._commits: deque[asyncio.Task[None]] = deque()
        self._acked_marks: dict[Slot, int] = {}
        self._marks_written_at = time.monotonic()
        #: The marks write in flight, beside the token commits (at most one).
        self._marks_write: asyncio.Task[None] | None = None
        #: True while following the change stream (after any back-fill): ready.
        self.streaming = False
        self._streaming = asyncio.Event()
        self.backfills = 0
        self.checkpoints = 0
        #: Whether to look for an oplog that only grows (see :meth:`_oplog_only_grows`).
        self._idle_probe = idle_probe
        #: It only grows: the reader probes its size while idle.
        self._growing_oplog = False
        self._oplog_collection: AsyncCollection[Document] | None = None

    # ------------------------------------------------------------------ open

    async def open(self) -> None:
        """Resume after the stored token, or (none usable) open a stream and back-fill."""
        self._growing_oplog = self._idle_probe and await self._oplog_only_grows()
        token = await self._checkpoints.load_token()
        self._scheduled_token = token
        if token is not None:
            try:
                self._stream = await self._open(token)
            except ResumeTokenLost as exc:
                log.error(
                    "watcher: the stored resume token cannot be resumed from (%s); "
                    "back-filling from %r so that no turn is lost",
                    exc,
                    TURNS,
                )
            else:
                log.info("watcher: resuming after the stored token → %s", self.topic)
                self._streamed()
                return
        else:
            log.warning("watcher: no usable resume token stored; back-filling from %r", TURNS)
        await self._start_backfill()

    async def _start_backfill(self) -> None:
        """Open a new stream first (it is read after the scan), then start the scan."""
        self.streaming = False
        self._streaming.clear()
        self._stream = await self._open(None)
        self.backfills += 1
        self._scan = self._turns.find(share_filter(self._share, self._shares)).sort(
            [
                ("project_id", ASCENDING),
                ("user_id", ASCENDING),
                ("session_id", ASCENDING),
                ("seq", ASCENDING),
            ]
        )
        self._scan_started = False

    def _follow(self) -> ChangeReader:
        if self._stream is None:
            raise RuntimeError("the change stream is not open")
        self._reader = ChangeReader(
            self._stream,
            self._wake,
            limit=self._read_ahead,
            poll_s=self._poll_s,
            probe=self._oplog_entries if self._growing_oplog else None,
            log_size=self._oplog_size if self._growing_oplog else None,
        )
        return self._reader

    def _oplog(self) -> AsyncCollection[Document]:
        if self._oplog_collection is None:  # made once: the idle probe asks it 4 times a second
            self._oplog_collection = self._turns.database.client.get_database("local")[OPLOG]
        return self._oplog_collection

    async def _oplog_only_grows(self) -> bool:
        """Whether the server's oplog is readable and not capped (only ever appended to).

        mongo-java-server's is; a replica set's is capped (it also holds an empty
        getMore until a change comes, so it needs no probe), and ``local`` is out
        of reach through mongos or without the privilege: no probe then.
        """
        try:
            infos = await (
                await self._turns.database.client.get_database("local").list_collections(
                    filter={"name": OPLOG}
                )
            ).to_list()
        except PyMongoError:
            return False
        return len(infos) == 1 and not infos[0].get("options", {}).get("capped", False)

    async def _oplog_entries(self) -> tuple[int, int] | None:
        """How many entries the (growing) oplog has, and how many documents ``turns``:
        the reader's idle probe, two counts the server answers from each collection's
        size, without a scan."""
        log, turns = await asyncio.gather(
            self._oplog().estimated_document_count(), self._turns.estimated_document_count()
        )
        return int(log), int(turns)

    async def _oplog_size(self) -> int:
        """How many entries the (growing) oplog has: the first part of
        :meth:`_oplog_entries` alone, what an idle reader asks first."""
        return int(await self._oplog().estimated_document_count())

    def _streamed(self) -> None:
        """From now on the stream is read (resumed, or the back-fill is stored)."""
        self.streaming = True
        self._streaming.set()

    async def _open(self, token: dict[str, Any] | None) -> Stream:
        try:
            return await self._turns.watch(
                self._read_pipeline,
                resume_after=token,
                max_await_time_ms=self._max_await_ms,
                batch_size=self._read_batch,
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

    # ------------------------------------------------------------------ poll

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        """The next records (at most ``max_records`` changes or scanned documents, plus
        markers); empty when nothing came within ``timeout_s``."""
        if self._scan is not None:
            return {0: await self._scan_batch(max_records)}
        reader = self._reader
        if reader is None:
            # The back-fill's end is a barrier: the stream is read once everything
            # the back-fill published is acknowledged and its marks are stored.
            if not self._streaming.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._streaming.wait(), timeout_s)
                if not self._streaming.is_set():
                    return {}
            reader = self._follow()
        try:
            changes = reader.take(max_records)
            if changes:
                await asyncio.sleep(0)  # let the reader and the acknowledgements in
            else:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout_s)
                changes = reader.take(max_records)
        except ResumeTokenLost as exc:
            log.error("watcher: change stream history lost while reading (%s)", exc)
            await self._close_stream()
            log.warning("watcher: no usable resume token stored; back-filling from %r", TURNS)
            await self._start_backfill()
            return {0: await self._scan_batch(max_records)}
        if not changes:
            return {}
        topic, offset = self.topic, self._next
        records: list[Record] = []
        token: Mapping[str, Any] | None = None
        for change in changes:
            if isinstance(change, Idle):
                token = change.token
                records.append(CaughtUp(topic, offset, token, change.read_at))
            else:
                token = change["_id"]
                document = change.get("fullDocument")
                if not (type(document) is dict or isinstance(document, Mapping)):
                    document = None
                records.append(StreamedTurn(topic, offset, document, token))
            offset += 1
        self._next = offset
        if token is not None:
            self._tokens.append((offset, token))
        return {0: records}

    async def _scan_batch(self, max_records: int) -> list[Record]:
        cursor = self._scan
        if cursor is None:
            raise RuntimeError("no back-fill in progress")
        topic, offset = self.topic, self._next
        records: list[Record] = []
        if not self._scan_started:
            self._scan_started = True
            records.append(BackfillStart(topic, offset, await self._checkpoints.load_marks()))
            offset += 1
        try:
            documents = await cursor.to_list(max_records)
        except PyMongoError as exc:
            raise StorageError(f"back-fill could not read {TURNS!r}: {exc}") from exc
        for document in documents:
            records.append(ScannedTurn(topic, offset, document))
            offset += 1
        if len(documents) < max_records:  # the scan is complete
            records.append(BackfillEnd(topic, offset))
            self._backfill_end = offset
            offset += 1
            self._scan = None
            await _close_cursor(cursor)
        self._next = offset
        return records

    def interrupt(self) -> None:
        """End a poll that is waiting for the stream now (it returns what it has: nothing).
        For a stop: the runtime sees it without waiting out the poll's timeout."""
        self._wake.set()

    @property
    def scanning(self) -> bool:
        """True while a back-fill's scan is not complete."""
        return self._scan is not None

    def lag(self) -> Mapping[int, int]:
        """Changes read ahead and not handed out yet (the stream's own lag is unknown)."""
        reader = self._reader
        return {0: reader.waiting if reader is not None else 0}

    # ------------------------------------------------------------------ commit

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        """Store the checkpoint of every record below ``offsets[0]`` (all acknowledged):
        scheduled behind the stores before it; raises a store that failed meanwhile."""
        end = offsets.get(0)
        if end is None or end <= self._committed:
            return True
        self._committed = end
        tokens = self._tokens
        while tokens and tokens[0][0] <= end:
            self._latest_token = tokens.popleft()[1]
        backfill_done = self._backfill_end is not None and self._backfill_end < end
        if backfill_done:
            self._backfill_end = None
        self._schedule(
            self._ledger.take_marks(end),
            self._latest_token,
            all_marks=backfill_done,
            then_streaming=backfill_done,
        )
        await self._reap(keep=COMMITS_IN_FLIGHT - 1)
        return True

    async def finish(self) -> None:
        """After a graceful stop (everything committed): store every mark and the latest
        token, and wait until they are stored."""
        self._schedule(self._ledger.take_marks(self._committed), self._latest_token, all_marks=True)
        await self._reap(keep=0)

    def _schedule(
        self,
        marks: dict[Slot, int],
        token: Mapping[str, Any] | None,
        *,
        all_marks: bool,
        then_streaming: bool = False,
    ) -> None:
        new_token = dict(token) if token is not None else None
        if new_token == self._scheduled_token:
            new_token = None
        elif new_token is not None and not (marks or all_marks):
            # Only the token moved (MongoDB's post-batch token advances with
            # every write anywhere in the cluster): store it now and then.
            if time.monotonic() - self._token_only_at < TOKEN_REFRESH_S:
                new_token = None
            else:
                self._token_only_at = time.monotonic()
        work = bool(marks or new_token is not None)
        # A store with every mark is scheduled even when nothing new came: the marks
        # acknowledged so far are only collected by the stores before it.
        if work or all_marks:
            if new_token is not None:
                self._scheduled_token = new_token
            previous = self._commits[-1] if self._commits else None
            self._commits.append(
                asyncio.create_task(
                    self._store_checkpoint(
                        previous,
                        marks,
                        new_token,
                        all_marks=all_marks,
                        then_streaming=then_streaming,
                    )
                )
            )

    async def _reap(self, keep: int) -> None:
        """Await the oldest stores until at most ``keep`` are unfinished (raises failures).

        The marks write is awaited too once it is done, or when ``keep`` is 0;
        a failed one is raised here.
        """
        while self._commits and (len(self._commits) > keep or self._commits[0].done()):
            await self._commits.popleft()
        marks_write = self._marks_write
        if marks_write is not None and (keep == 0 or marks_write.done()):
            self._marks_write = None
            await marks_write

    async def _store_checkpoint(
        self,
        previous: asyncio.Task[None] | None,
        marks: dict[Slot, int],
        token: dict[str, Any] | None,
        *,
        all_marks: bool,
        then_streaming: bool,
    ) -> None:
        if previous is not None:
            await previous  # checkpoints in order; a failure before this one fails it too
        # Acknowledged: these marks may be stored. They are written every
        # marks interval (and at the back-fill's end and a graceful stop), not
        # with every token: a mark only bounds the re-publishing of a
        # back-fill, so one that lags costs duplicates, never a lost turn.
        for slot, seq in marks.items():
            if seq > self._acked_marks.get(slot, 0):
                self._acked_marks[slot] = seq
        now_s = time.monotonic()
        if all_marks:  # the back-fill's end or a graceful stop: every mark, with the token
            if self._marks_write is not None:
                marks_write, self._marks_write = self._marks_write, None
                await marks_write
            marks, self._acked_marks = self._acked_marks, {}
            self._marks_written_at = now_s
        else:
            marks = {}
            due = now_s - self._marks_written_at >= self._marks_interval_s
            if due and self._acked_marks and self._marks_write is None:
                batch, self._acked_marks = self._acked_marks, {}
                self._marks_written_at = now_s
                self._marks_write = asyncio.create_task(self._store(batch, None))
        await self._store(marks, token)
        if then_streaming:
            self._streamed()
            if self._backfilled is not None:
                self._backfilled()

    async def _store(self, marks: dict[Slot, int], token: dict[str, Any] | None) -> None:
        """Save ``marks`` and then ``token`` (either may be empty): :class:`WatcherCheckpoints`."""
        if await self._checkpoints.save(WatcherCheckpoint(marks, token)):
            self.checkpoints += 1
            dependency_ok("Kafka", "MongoDB")  # what it marks was published and is saved

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """Stop reading; cancel the stores still running (an attempt that failed or
        stopped: what they would have stored is read again next time)."""
        self.streaming = False
        self._streaming.clear()
        if self._scan is not None:
            cursor, self._scan = self._scan, None
            await _close_cursor(cursor)
        await self._close_stream()
        commits, self._commits = self._commits, deque()
        if self._marks_write is not None:
            commits.append(self._marks_write)
            self._marks_write = None
        for commit in commits:
            commit.cancel()  # no-op when it has finished
        for commit in commits:
            with contextlib.suppress(asyncio.CancelledError, MongomemError):
                await commit  # also retrieves a failure nobody awaited

    async def _close_stream(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
        stream, self._stream = self._stream, None
        if stream is not None:
            await _close(stream)


async def _close(stream: Stream) -> None:
    with contextlib.suppress(PyMongoError):
        await stream.close()


async def _close_cursor(cursor: AsyncCursor[Document]) -> None:
    with contextlib.suppress(PyMongoError):
        await cursor.close()
