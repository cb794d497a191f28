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
* **checkpoint**: offsets are committed every ``commit_interval_s`` and when
  partitions are revoked, always after every changelog write so far has been
  acknowledged. So the table is never behind the committed offset; it may be
  ahead, which the windower's per-session position stamp makes harmless.
  The changelog is written at those commits, with each changed session's
  latest state only (a session that changed in many batches is written once).
* records are applied as fetched, one batch per partition, through a
  :class:`~mongomem.stages.windowing.batches.BatchPipeline` per partition: a batch is
  planned at once and delivered (snapshots, then the changed states written
  once each) when the partition's previous batch is applied, so planning the
  next batch overlaps the delivery of the last; partitions go side by side.
  Batches are handed over under a lock that the rebalance callbacks also
  take, and a revocation waits for every batch in flight, so a rebalance
  never interleaves with one. A batch's position is recorded only after the
  whole batch was applied.

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
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from mongomem.kafka import ensure_topics
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime import PartitionReader, Publisher, record_lag
from mongomem.stages.runtime.kafka import KafkaSource, kafka_source
from mongomem.stages.windowing.batches import BatchPipeline
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import STAGE, Record, SnapshotWindower

__all__ = ["ChangelogTable", "WindowingConsumer", "ensure_changelog"]

log = logging.getLogger("mongomem.windowing")

#: Records per fetch (all partitions): a batch's snapshots go out in one bulk delivery.
MAX_POLL_RECORDS = 2000


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


class WindowingConsumer:
    """Reads the turns topic in a consumer group and feeds the windower, batch by batch."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group_suffix: str,
        topic: str,
        table: ChangelogTable,
        windower: SnapshotWindower,
        commit_interval_s: float = 1.0,
        session_timeout_s: float = 10.0,
    ) -> None:
        self._kafka = settings
        self._group_suffix = group_suffix
        self._topic = topic
        self._table = table
        self._windower = windower
        self._commit_interval_s = commit_interval_s
        self._session_timeout_s = session_timeout_s
        self._lock = asyncio.Lock()
        self._positions: dict[int, int] = {}  # applied up to (may be committed)
        self._fetched: dict[int, int] = {}  # handed to a pipeline up to
        self._committed: dict[int, int] = {}
        self._pipelines: dict[int, BatchPipeline] = {}
        self._failure: BaseException | None = None
        self._source: KafkaSource | None = None
        self.ready = asyncio.Event()

    async def on_revoked(self, revoked: list[int]) -> None:
        async with self._lock:
            try:
                await self._drain()
            except Exception as exc:  # the stage fails with it at its next batch
                self._failure = exc
            await self._commit(only=set(revoked))
            self._table.drop(revoked)
            for partition in revoked:
                self._positions.pop(partition, None)
                self._fetched.pop(partition, None)
                self._committed.pop(partition, None)
                self._pipelines.pop(partition, None)
            self._windower.invalidate_index()

    async def on_assigned(self, assigned: list[int]) -> None:
        async with self._lock:
            started = time.monotonic()
            read = await self._table.restore(assigned)
            self._windower.invalidate_index()
            log.info(
                "assigned partitions %s; restored %d changelog records in %.2f s",
                assigned,
                read,
                time.monotonic() - started,
            )
            self.ready.set()

    async def _commit(self, only: set[int] | None = None) -> None:
        offsets = {
            partition: pos
            for partition, pos in self._positions.items()
            if (only is None or partition in only) and self._committed.get(partition) != pos
        }
        await self._table.flush()  # the table is never behind the committed offset
        if not offsets or self._source is None:
            return
        # False: a rebalance took the partitions; their records will be read again (idempotent)
        if await self._source.commit(offsets):
            self._committed.update(offsets)
            record_lag(STAGE, self._source)

    def _caught_up(self, source: KafkaSource, partitions: Iterable[int]) -> bool:
        """True when these partitions are handed over up to their end as last fetched.

        Only decides when to commit early: extra commits are harmless.
        """
        for partition in partitions:
            end = source.highwater(partition)
            if end is None or self._fetched.get(partition, 0) < end:
                return False
        return True

    def _pipeline(self, partition: int) -> BatchPipeline:
        pipeline = self._pipelines.get(partition)
        if pipeline is None:

            def applied(records: Sequence[Record]) -> None:
                self._positions[partition] = records[-1][0] + 1

            pipeline = self._pipelines[partition] = BatchPipeline(
                self._windower, partition, applied
            )
        return pipeline

    async def _submit(self, partition: int, records: Sequence[Any]) -> None:
        self._fetched[partition] = records[-1].offset + 1
        await self._pipeline(partition).submit([(r.offset, r.key, r.value) for r in records])

    async def _drain(self) -> None:
        """Wait until every batch handed over is applied (raises the first failure)."""
        for pipeline in list(self._pipelines.values()):
            await pipeline.drain()

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
            self._source = source
            try:
                await self._consume(source)
            finally:
                with contextlib.suppress(Exception):
                    async with self._lock:
                        for pipeline in self._pipelines.values():
                            await pipeline.cancel()  # not applied: read again after a restart
                        await self._commit()
                self._source = None

    async def _consume(self, source: KafkaSource) -> None:
        last_commit = time.monotonic()
        while True:
            batch = await source.poll(MAX_POLL_RECORDS, 0.2)
            async with self._lock:
                if self._failure is not None:
                    raise self._failure
                for pipeline in self._pipelines.values():
                    pipeline.raise_failure()
                assigned = source.assignment()
                # Partitions are independent (own sessions, own states): each has its
                # pipeline, which plans this batch now and delivers it in the background
                # once the partition's previous batch is applied. A batch's position is
                # recorded when it is applied; a failure stops the stage.
                for partition, records in batch.items():
                    if partition in assigned and records:  # else revoked while fetched
                        await self._submit(partition, records)
                if batch and self._caught_up(source, batch):
                    # Caught up: let the last batches land and commit at once, so that
                    # lag reads 0 between watermarks.
                    await self._drain()
                    await self._commit()
                    last_commit = time.monotonic()
                elif time.monotonic() - last_commit >= self._commit_interval_s:
                    await self._commit()
                    last_commit = time.monotonic()
