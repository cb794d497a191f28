"""The default engine of the windowing stage: a consumer group plus a changelog-backed table.

It reads and writes Kafka through the stage runtime's adapters
(:mod:`mongomem.stages.runtime.kafka`: the group, its rebalances, the publisher,
the changelog reader); the delivery contract is the runtime's.

The same table semantics as a faust table, written out so that a record is
never acknowledged without having been applied:

* **table** ``windows``: session key → ``WindowState`` JSON, kept in memory
  per partition and written to the compacted changelog topic
  ``<group>-windows-changelog`` into the *same partition number* as the turn
  (co-partitioned). When partitions are assigned, their changelog partitions
  are read from the beginning before any turn of them is processed.
* **the loop** is the runtime's :func:`~mongomem.stages.runtime.consume` with
  :class:`WindowingCore` as its pipelined stage: a batch is planned at once
  and delivered (snapshots, then the changed states handed to the table) by
  the partition's :class:`~mongomem.stages.windowing.batches.BatchPipeline`
  when the partition's previous batch is applied, so planning the next batch
  overlaps the delivery of the last; at most two batches of a partition are
  in flight; partitions go side by side. A batch is acknowledged when it is
  applied, and only then may its offset be committed.
* **checkpoint**: :class:`ChangelogCommits` commits what the loop found
  acknowledged, after every changelog write so far has been acknowledged, so
  the table is never behind the committed offset; it may be ahead, which the
  windower's per-session position stamp makes harmless. The changelog is
  written at those commits, with each changed session's latest state only (a
  session that changed in many batches is written once). Commits happen at
  most every ``commit_interval_s``, except at once when the partitions are
  caught up (lag reads 0 between watermarks) and on a revocation or a stop;
  a commit skipped is safe under at-least-once: the records after the last
  commit are only read again after a crash, and applying them again changes
  nothing. While the partitions are behind, a commit due runs beside the loop
  (one at a time), so a backlog's changelog flush does not stop the reading.
* **rebalances**: an assignment restores the partitions' table before any of
  their records is handled; a revocation waits for the partitions' batches in
  flight (:class:`~mongomem.stages.runtime.Revocations`), commits what was
  applied, then drops their table. Batches are handed over under a lock that
  the rebalance callbacks also take, so a rebalance never interleaves with
  the planning of one, and nothing of a revoked partition is committed later.

Why not faust here: see the report of issue 4 — under a rebalance in which a
worker keeps its partitions while another joins, faust-streaming 0.15.3
acknowledged a turn without handing it to the agent (the agent's own counter
and the snapshots prove it), which violates "no turn lost".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from mongomem.adapters.kafka import ensure_topics
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime import (
    PartitionReader,
    Publisher,
    Record,
    RecordSource,
    Revocations,
    consume,
)
from mongomem.stages.runtime.kafka import kafka_source
from mongomem.stages.windowing.batches import BatchPipeline
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import STAGE, SnapshotWindower

__all__ = [
    "ChangelogCommits",
    "ChangelogTable",
    "WindowingConsumer",
    "WindowingCore",
    "ensure_changelog",
]

log = logging.getLogger("mongomem.windowing")

#: Records per fetch (all partitions): a batch's snapshots go out in one bulk delivery.
MAX_POLL_RECORDS = 2000
#: Batches of a partition in flight: one delivering, the next planned (the BatchPipeline's).
IN_FLIGHT = 2


async def ensure_changelog(settings: KafkaSettings, topic: str, partitions: int) -> None:
    """Create the compacted changelog topic if it does not exist."""
    await ensure_topics(
        settings, [topic], partitions=partitions, configs={"cleanup.policy": "compact"}
    )


class ChangelogTable:
    """A :class:`~mongomem.stages.windowing.windower.WindowStore` in memory and in a changelog."""

    def __init__(self, publisher: Publisher, topic: str, reader: PartitionReader) -> None:
        self._publisher = publisher
        self._topic = topic
        self._reader = reader
        self._data: dict[bytes, WindowState] = {}
        self._keys: dict[int, set[bytes]] = {}
        #: Written since the last send, latest only: (partition, state or None for a delete).
        self._dirty: dict[bytes, tuple[int, WindowState | None]] = {}
        self._in_flight: list[Awaitable[Any]] = []

    # -- WindowStore ------------------------------------------------------------------------
    def get(self, key: bytes) -> WindowState | None:
        return self._data.get(key)

    def put(self, key: bytes, state: WindowState) -> None:
        assert state.partition is not None
        self._data[key] = state
        self._keys.setdefault(state.partition, set()).add(key)
        self._dirty[key] = (state.partition, state)

    def delete(self, key: bytes) -> None:
        state = self._data.pop(key, None)
        if state is None or state.partition is None:
            return
        self._keys.get(state.partition, set()).discard(key)
        self._dirty[key] = (state.partition, None)  # a tombstone: compaction drops the key

    def items(self) -> Iterable[tuple[bytes, WindowState]]:
        return list(self._data.items())

    # -- changelog --------------------------------------------------------------------------
    async def send_pending(self) -> None:
        """Hand the writes so far to the producer, without waiting for acks.

        Only each key's latest state is sent: an older one would be compacted
        away anyway, and nobody reads the changelog between two sends
        (:meth:`restore` runs on assignment, after a revocation flushed it).
        """
        dirty, self._dirty = self._dirty, {}
        for key, (partition, state) in dirty.items():
            value = None if state is None else state.model_dump_json().encode()
            self._in_flight.append(
                await self._publisher.send(self._topic, value, key=key, partition=partition)
            )

    async def flush(self) -> None:
        """Wait until every changelog write so far is acknowledged."""
        await self.send_pending()
        in_flight, self._in_flight = self._in_flight, []
        await asyncio.gather(*in_flight)

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            for key in self._keys.pop(partition, set()):
                self._data.pop(key, None)
                self._dirty.pop(key, None)

    async def restore(self, partitions: Iterable[int]) -> int:
        """Load the given changelog partitions from the beginning; returns records read."""
        count = 0
        async for record in self._reader.read(self._topic, partitions):
            if record.key is not None and record.value is not None:
                self._data[record.key] = WindowState.model_validate_json(record.value)
                self._keys.setdefault(record.partition, set()).add(record.key)
                count += 1
            elif record.key is not None:  # a tombstone: the session was retired
                self._data.pop(record.key, None)
                self._keys.get(record.partition, set()).discard(record.key)
        return count


class WindowingCore:
    """The windowing stage as a runtime :class:`~mongomem.stages.runtime.PipelinedStage`.

    ``submit`` plans the batch now on the partition's
    :class:`~mongomem.stages.windowing.batches.BatchPipeline` and returns what
    completes once the batch is applied: its snapshots stored and published,
    its dead letters acknowledged, its states handed to the table. It raises
    only if planning failed (nothing of the batch is then in flight), so the
    runtime may submit the batch again, or its records one by one.
    :meth:`assign` and :meth:`revoke` are the rebalance's halves; they and
    ``submit`` exclude each other. Only partitions assigned (and not revoked
    since) are handled: a batch of any other is acknowledged untouched (the
    runtime does not commit it: it was told of the revocation).
    """

    stage = STAGE

    def __init__(self, windower: SnapshotWindower, table: ChangelogTable) -> None:
        self._windower = windower
        self._table = table
        self._lock = asyncio.Lock()
        self._pipelines: dict[int, BatchPipeline] = {}
        self._owned: set[int] = set()

    async def submit(self, partition: int, batch: Sequence[Record]) -> Awaitable[Any]:
        async with self._lock:
            if partition not in self._owned:  # revoked while it waited for the lock
                untouched: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                untouched.set_result(None)
                return untouched
            pipeline = self._pipelines.get(partition)
            if pipeline is None:
                pipeline = self._pipelines[partition] = BatchPipeline(self._windower, partition)
            return await pipeline.submit([(r.offset, r.key, r.value) for r in batch])

    async def flush(self) -> None:
        """Nothing is held back: each batch is delivered as soon as the one before is applied."""

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        self._windower.stats.dead_letters += 1

    async def assign(self, partitions: list[int]) -> None:
        """Restore the partitions' table (before any of their records is handled)."""
        async with self._lock:
            started = time.monotonic()
            read = await self._table.restore(partitions)
            self._owned.update(partitions)
            self._windower.invalidate_index()
            log.info(
                "assigned partitions %s; restored %d changelog records in %.2f s",
                partitions,
                read,
                time.monotonic() - started,
            )

    async def revoke(
        self, partitions: list[int], settle: Callable[[list[int]], Awaitable[None]]
    ) -> None:
        """``settle`` the partitions (their batches awaited, what was applied committed),
        then drop their table."""
        async with self._lock:
            self._owned.difference_update(partitions)
            await settle(partitions)
            self._table.drop(partitions)
            for partition in partitions:
                self._pipelines.pop(partition, None)
            self._windower.invalidate_index()

    async def cancel(self) -> None:
        """Stop every batch in flight (not applied: read again after a restart)."""
        for pipeline in self._pipelines.values():
            await pipeline.cancel()


class ChangelogCommits:
    """A :class:`~mongomem.stages.runtime.RecordSource` whose commit flushes the table first.

    A commit is passed on only after every changelog write so far was
    acknowledged (the table is never behind a committed offset), and at most
    every ``interval_s``, unless the partitions committed reach their end as
    last fetched (``ends``): a commit held back is merged into the next one.
    Holding one back is safe under at-least-once: the offsets stay where
    they were, so only a crash makes the records after them read again, and
    applying them again changes nothing. :meth:`commit_pending` passes on
    what was held back at once (a revocation, a stop).

    A commit due at the interval while the partitions are behind (a backlog)
    is a *checkpoint in the background*: the changelog writes so far are sent
    and awaited, then the offsets committed, while the loop goes on with the
    next records (a flush of a backlog's states takes a while, and the loop
    would wait for it). One checkpoint at a time; the commits meanwhile are
    held back. A commit that finds the partitions caught up, and
    :meth:`commit_pending`, first wait for the checkpoint in the background,
    so the changelog's writes of one session stay in order; a checkpoint that
    failed is raised by the next commit (the loop then ends without
    committing past it, as for a failed acknowledgement).
    """

    def __init__(
        self,
        source: RecordSource,
        table: ChangelogTable,
        *,
        interval_s: float,
        ends: Callable[[int], int | None],
    ) -> None:
        self._source = source
        self._table = table
        self._interval_s = interval_s
        self._ends = ends
        self._pending: dict[int, int] = {}
        self._last = time.monotonic()
        self._checkpoint: asyncio.Task[bool] | None = None

    @property
    def topic(self) -> str:
        return self._source.topic

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        return await self._source.poll(max_records, timeout_s)

    def lag(self) -> Mapping[int, int]:
        return self._source.lag()

    def _caught_up(self) -> bool:
        for partition, offset in self._pending.items():
            end = self._ends(partition)
            if end is None or offset < end:
                return False
        return True

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        self._pending.update(offsets)
        checkpoint = self._checkpoint
        if checkpoint is not None and checkpoint.done():
            self._checkpoint = None
            checkpoint.result()  # a failed checkpoint ends the loop here
        if self._caught_up():
            return await self.commit_pending()
        if self._checkpoint is not None or time.monotonic() - self._last < self._interval_s:
            return True  # held back: merged into the next commit
        offsets, self._pending = self._pending, {}
        self._last = time.monotonic()
        self._checkpoint = asyncio.create_task(self._flushed_then_committed(offsets))
        return True

    async def _flushed_then_committed(self, offsets: dict[int, int]) -> bool:
        await self._table.flush()  # the table is never behind the committed offset
        # False: a rebalance took the partitions; their records will be read again (idempotent)
        return await self._source.commit(offsets) if offsets else True

    async def commit_pending(self, only: Iterable[int] | None = None) -> bool:
        """Flush the table, then commit what was held back (of ``only``, else all).

        A checkpoint in the background is awaited first (its failure raised)."""
        checkpoint, self._checkpoint = self._checkpoint, None
        if checkpoint is not None:
            await checkpoint
        chosen = set(self._pending) if only is None else set(only) & set(self._pending)
        offsets = {p: self._pending.pop(p) for p in chosen}
        self._last = time.monotonic()
        return await self._flushed_then_committed(offsets)

    def abandon(self) -> None:
        """Stop a checkpoint still in the background (the loop ended; nothing more is
        committed: the records after the last commit are read again)."""
        if self._checkpoint is not None:
            self._checkpoint.cancel()
            self._checkpoint = None


class WindowingConsumer:
    """Reads the turns topic in a consumer group and feeds the windower, batch by batch,
    on the runtime's :func:`~mongomem.stages.runtime.consume`."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group_suffix: str,
        topic: str,
        table: ChangelogTable,
        windower: SnapshotWindower,
        publisher: Publisher,
        commit_interval_s: float = 1.0,
        session_timeout_s: float = 10.0,
    ) -> None:
        self._kafka = settings
        self._group_suffix = group_suffix
        self._topic = topic
        self._table = table
        self._publisher = publisher
        self._core = WindowingCore(windower, table)
        self._commit_interval_s = commit_interval_s
        self._session_timeout_s = session_timeout_s
        self._revocations = Revocations()
        self._commits: ChangelogCommits | None = None
        self.ready = asyncio.Event()

    async def on_assigned(self, assigned: list[int]) -> None:
        await self._core.assign(assigned)
        self.ready.set()

    async def on_revoked(self, revoked: list[int]) -> None:
        await self._core.revoke(revoked, self._settle)

    async def _settle(self, revoked: list[int]) -> None:
        await self._revocations.revoke(revoked)  # awaited, acknowledged ones committed
        if self._commits is not None:
            await self._commits.commit_pending(only=revoked)

    async def run(self) -> None:
        """Consume until cancelled; a record that fails for good is never committed."""
        async with kafka_source(
            self._kafka,
            self._topic,
            STAGE,
            self._group_suffix,
            on_assigned=self.on_assigned,
            on_revoked=self.on_revoked,
            session_timeout_ms=int(self._session_timeout_s * 1000),
            heartbeat_interval_ms=1000,
            max_poll_records=MAX_POLL_RECORDS,
        ) as source:
            commits = self._commits = ChangelogCommits(
                source, self._table, interval_s=self._commit_interval_s, ends=source.highwater
            )
            try:
                await consume(
                    commits,
                    self._core,
                    publisher=self._publisher,
                    kafka=self._kafka,
                    stop=asyncio.Event(),  # runs until cancelled (the worker's stop)
                    max_records=MAX_POLL_RECORDS,
                    poll_timeout_s=0.2,
                    in_flight=IN_FLIGHT,
                    revocations=self._revocations,
                )
            finally:
                try:
                    with contextlib.suppress(Exception):
                        await self._core.cancel()
                        await commits.commit_pending()  # what was applied and acknowledged
                finally:
                    commits.abandon()
                    self._commits = None
