"""The aiokafka adapter of the windowing stage: a consumer group plus a changelog-backed table.

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
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import CommitFailedError, KafkaError, TopicAlreadyExistsError

from mongomem.errors import BrokerError
from mongomem.settings import KafkaSettings
from mongomem.stages.windowing.batches import BatchPipeline
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import Record, SnapshotWindower

__all__ = ["ChangelogTable", "WindowingConsumer", "ensure_changelog"]

log = logging.getLogger("mongomem.windowing")

#: Records per fetch (all partitions): a batch's snapshots go out in one bulk delivery.
MAX_POLL_RECORDS = 2000


async def ensure_changelog(settings: KafkaSettings, topic: str, partitions: int) -> None:
    """Create the compacted changelog topic if it does not exist."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        await admin.start()
        if topic in set(await admin.list_topics()):
            return
        new = NewTopic(
            name=topic,
            num_partitions=partitions,
            replication_factor=settings.replication_factor,
            topic_configs={"cleanup.policy": "compact"},
        )
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([new])
    except KafkaError as exc:
        raise BrokerError(f"could not create the changelog topic {topic}: {exc}") from exc
    finally:
        await admin.close()


class ChangelogTable:
    """A :class:`~mongomem.stages.windowing.windower.WindowStore` in memory and in a changelog."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, bootstrap: str) -> None:
        self._producer = producer
        self._topic = topic
        self._bootstrap = bootstrap
        self._data: dict[bytes, WindowState] = {}
        self._keys: dict[int, set[bytes]] = {}
        #: Written since the last send, latest only: (partition, state or None for a delete).
        self._dirty: dict[bytes, tuple[int, WindowState | None]] = {}
        self._in_flight: list[asyncio.Future[Any]] = []

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
        try:
            for key, (partition, state) in dirty.items():
                value = None if state is None else state.model_dump_json().encode()
                self._in_flight.append(
                    await self._producer.send(self._topic, value, key=key, partition=partition)
                )
        except KafkaError as exc:
            raise BrokerError(f"could not write the changelog: {exc}") from exc

    async def flush(self) -> None:
        """Wait until every changelog write so far is acknowledged."""
        await self.send_pending()
        in_flight, self._in_flight = self._in_flight, []
        try:
            await asyncio.gather(*in_flight)
        except KafkaError as exc:
            raise BrokerError(f"a changelog write failed: {exc}") from exc

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            for key in self._keys.pop(partition, set()):
                self._data.pop(key, None)
                self._dirty.pop(key, None)

    async def restore(self, partitions: Iterable[int]) -> int:
        """Load the given changelog partitions from the beginning; returns records read."""
        tps = [TopicPartition(self._topic, p) for p in partitions]
        if not tps:
            return 0
        reader = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False)
        await reader.start()
        count = 0
        try:
            reader.assign(tps)
            await reader.seek_to_beginning(*tps)
            ends: dict[TopicPartition, int] = await reader.end_offsets(tps)
            remaining = {tp for tp in tps if ends[tp] > 0}
            while remaining:
                batch = await reader.getmany(*remaining, timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        if record.key is not None and record.value is not None:
                            self._data[record.key] = WindowState.model_validate_json(record.value)
                            self._keys.setdefault(tp.partition, set()).add(record.key)
                            count += 1
                        elif record.key is not None:  # a tombstone: the session was retired
                            self._data.pop(record.key, None)
                            self._keys.get(tp.partition, set()).discard(record.key)
                        if record.offset + 1 >= ends[tp]:
                            remaining.discard(tp)
                for tp in list(remaining):  # the end may be a record we are not shown
                    if await reader.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        finally:
            await reader.stop()
        return count


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: WindowingConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.owner.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.owner.on_assigned(assigned)


class WindowingConsumer:
    """Reads the turns topic in a consumer group and feeds the windower, batch by batch."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group: str,
        topic: str,
        table: ChangelogTable,
        windower: SnapshotWindower,
        commit_interval_s: float = 1.0,
        session_timeout_s: float = 10.0,
    ) -> None:
        self._topic = topic
        self._table = table
        self._windower = windower
        self._commit_interval_s = commit_interval_s
        self._lock = asyncio.Lock()
        self._positions: dict[TopicPartition, int] = {}  # applied up to (may be committed)
        self._fetched: dict[TopicPartition, int] = {}  # handed to a pipeline up to
        self._committed: dict[TopicPartition, int] = {}
        self._pipelines: dict[TopicPartition, BatchPipeline] = {}
        self._failure: BaseException | None = None
        self.ready = asyncio.Event()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(session_timeout_s * 1000),
            heartbeat_interval_ms=1000,
            max_poll_records=MAX_POLL_RECORDS,
        )

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        async with self._lock:
            try:
                await self._drain()
            except Exception as exc:  # the stage fails with it at its next batch
                self._failure = exc
            await self._commit(only=set(revoked))
            self._table.drop(tp.partition for tp in revoked)
            for tp in revoked:
                self._positions.pop(tp, None)
                self._fetched.pop(tp, None)
                self._committed.pop(tp, None)
                self._pipelines.pop(tp, None)
            self._windower.invalidate_index()

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        async with self._lock:
            partitions = sorted(tp.partition for tp in assigned if tp.topic == self._topic)
            started = time.monotonic()
            read = await self._table.restore(partitions)
            self._windower.invalidate_index()
            log.info(
                "assigned partitions %s; restored %d changelog records in %.2f s",
                partitions, read, time.monotonic() - started,
            )  # fmt: skip
            self.ready.set()

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        offsets = {
            tp: pos
            for tp, pos in self._positions.items()
            if (only is None or tp in only) and self._committed.get(tp) != pos
        }
        await self._table.flush()  # the table is never behind the committed offset
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except CommitFailedError as exc:
            # A rebalance took the partitions: their records will be read again (idempotent).
            log.warning("commit skipped (%s); the records will be re-read", exc)
            return
        except KafkaError as exc:
            raise BrokerError(f"could not commit offsets: {exc}") from exc
        self._committed.update(offsets)

    def _caught_up(self, partitions: Iterable[TopicPartition]) -> bool:
        """True when these partitions are handed over up to their end as last fetched.

        Only decides when to commit early: extra commits are harmless.
        """
        for tp in partitions:
            end = self._consumer.highwater(tp)
            if end is None or self._fetched.get(tp, 0) < end:
                return False
        return True

    def _pipeline(self, tp: TopicPartition) -> BatchPipeline:
        pipeline = self._pipelines.get(tp)
        if pipeline is None:

            def applied(records: Sequence[Record]) -> None:
                self._positions[tp] = records[-1][0] + 1

            pipeline = self._pipelines[tp] = BatchPipeline(self._windower, tp.partition, applied)
        return pipeline

    async def _submit(self, tp: TopicPartition, records: list[ConsumerRecord[Any, Any]]) -> None:
        self._fetched[tp] = records[-1].offset + 1
        await self._pipeline(tp).submit([(r.offset, r.key, r.value) for r in records])

    async def _drain(self) -> None:
        """Wait until every batch handed over is applied (raises the first failure)."""
        for pipeline in list(self._pipelines.values()):
            await pipeline.drain()

    async def run(self) -> None:
        """Consume until cancelled; a record that fails for good is never committed."""
        try:
            await self._consumer.start()
        except KafkaError as exc:
            raise BrokerError(f"cannot join the consumer group: {exc}") from exc
        self._consumer.subscribe([self._topic], listener=_Rebalance(self))
        last_commit = time.monotonic()
        try:
            while True:
                batch = await self._consumer.getmany(timeout_ms=200)
                async with self._lock:
                    if self._failure is not None:
                        raise self._failure
                    for pipeline in self._pipelines.values():
                        pipeline.raise_failure()
                    assigned = self._consumer.assignment()
                    # Partitions are independent (own sessions, own states): each has its
                    # pipeline, which plans this batch now and delivers it in the background
                    # once the partition's previous batch is applied. A batch's position is
                    # recorded when it is applied; a failure stops the stage.
                    for tp, records in batch.items():
                        if tp in assigned and records:  # else revoked while fetched
                            await self._submit(tp, records)
                    if batch and self._caught_up(batch):
                        # Caught up: let the last batches land and commit at once, so that
                        # lag reads 0 between watermarks.
                        await self._drain()
                        await self._commit()
                        last_commit = time.monotonic()
                    elif time.monotonic() - last_commit >= self._commit_interval_s:
                        await self._commit()
                        last_commit = time.monotonic()
        finally:
            with contextlib.suppress(Exception):
                async with self._lock:
                    for pipeline in self._pipelines.values():
                        await pipeline.cancel()  # not applied: read again after a restart
                    await self._commit()
            await self._consumer.stop()
