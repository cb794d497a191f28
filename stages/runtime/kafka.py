"""The Kafka adapters of the runtime's ports: the one stage module that imports aiokafka.

aiokafka's errors become :class:`~mongomem.errors.BrokerError` here; a commit
refused because a rebalance took the partitions away is logged and skipped
(the new owner reads those records again: at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from mongomem.adapters.kafka import make_producer, until_topics_known
from mongomem.errors import BrokerError
from mongomem.extras import require
from mongomem.logs import dependency_ok
from mongomem.operations.status import consumer_group
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime.ports import Headers, Record

with require("stages"):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.client import AIOKafkaClient
    from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
    from aiokafka.partitioner import DefaultPartitioner

#: The producer the adapters wrap (the watcher hands it batches: :class:`PartitionBatcher`).
Producer = AIOKafkaProducer

__all__ = [
    "KafkaPartitionReader",
    "KafkaPublisher",
    "KafkaSource",
    "PartitionBatcher",
    "Producer",
    "consumer_options",
    "kafka_publisher",
    "kafka_source",
    "probe_kafka",
]

log = logging.getLogger("mongomem.stages.runtime")


#: How long the broker may hold a consumer's fetch that finds nothing (aiokafka's default
#: is 500 ms). A fetch is answered as soon as a record arrives, and a fetch in flight is
#: dropped when the assignment changes, so this adds no latency; it only makes an idle
#: consumer ask the broker ten times less often (issue 28: the broker's request threads
#: were most of an idle pipeline's broker CPU). The request timeout stays above it.
FETCH_MAX_WAIT_MS = 5000
#: How long the broker may hold a fetch while the consumer is behind on any partition. aiokafka
#: keeps one fetch in flight per broker and leaves a partition out of it while its fetched
#: records wait to be read, so when some partitions are caught up and one is behind, the fetch
#: of the caught-up ones is held and the behind one cannot be fetched again until it comes back:
#: held :data:`FETCH_MAX_WAIT_MS`, a stage draining a backlog stalled up to 5 s a time (issue 28:
#: P3's drains of 80,000 turns fell from about 22,000 turns/s to 10,000). While any partition
#: is behind, fetches are held this long instead; when all are caught up, FETCH_MAX_WAIT_MS again.
BEHIND_FETCH_MAX_WAIT_MS = 20
#: How long aiokafka's background fetch routine waits before it looks again at partitions
#: with nothing to do (aiokafka's ``consumer_timeout_ms``; its default is 200 ms). It wakes
#: at once when a fetch is answered, the assignment changes, a partition is resumed or its
#: buffered records are consumed, so this is only its idle tick: an idle consumer's event
#: loop woke five times a second for it (issue 28).
CONSUMER_TIMEOUT_MS = 1000


def consumer_options(kafka: KafkaSettings, stage: str, group_suffix: str = "") -> dict[str, Any]:
    """The consumer configuration every stage starts from: its group
    (:func:`mongomem.operations.status.consumer_group`), auto-commit off, from the earliest
    record when the group is new, idle fetches held :data:`FETCH_MAX_WAIT_MS`, the fetch
    routine's idle tick :data:`CONSUMER_TIMEOUT_MS`."""
    return {
        "bootstrap_servers": kafka.bootstrap,
        "group_id": consumer_group(kafka, stage, group_suffix),
        "client_id": f"mongomem-{stage}",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": max(int(kafka.request_timeout_s * 1000), FETCH_MAX_WAIT_MS + 5000),
        "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
        "consumer_timeout_ms": CONSUMER_TIMEOUT_MS,
    }


class KafkaSource:
    """A :class:`~mongomem.stages.runtime.ports.RecordSource` on one topic of a consumer group."""

    def __init__(
        self, consumer: AIOKafkaConsumer, topic: str, listener: _Listener | None = None
    ) -> None:
        self._consumer = consumer
        self.topic = topic
        self._committed: dict[int, int] = {}
        self._listener = listener

    def highwater(self, partition: int) -> int | None:
        """The partition's end as of the last fetch (``None``: not fetched yet)."""
        end: int | None = self._consumer.highwater(TopicPartition(self.topic, partition))
        return end

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        """The next records; raises what an assignment callback failed with (:class:`_Listener`)."""
        if self._listener is not None:
            self._listener.check()
        try:
            batch = await self._consumer.getmany(
                timeout_ms=int(timeout_s * 1000), max_records=max_records
            )
        except KafkaError as exc:
            raise BrokerError(f"reading {self.topic} failed: {exc}") from exc
        if self._listener is not None:
            self._listener.check()  # records fetched after a failed assignment are not used
        self._hold_fetches(fetched=bool(batch))
        return {tp.partition: records for tp, records in batch.items()}

    def _hold_fetches(self, *, fetched: bool) -> None:
        """How long the broker may hold the next fetches: :data:`BEHIND_FETCH_MAX_WAIT_MS`
        while this poll ``fetched`` records or a partition is behind, :data:`FETCH_MAX_WAIT_MS`
        when all are caught up. aiokafka reads its fetcher's setting for every fetch it sends
        (the option itself is fixed at the start); without that fetcher, nothing changes."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        if fetcher is not None:
            behind = fetched or self._behind()
            fetcher._fetch_max_wait_ms = BEHIND_FETCH_MAX_WAIT_MS if behind else FETCH_MAX_WAIT_MS

    def _behind(self) -> bool:
        """Whether a partition has records this consumer has not read yet (its end, as last
        fetched, past its position), or no end or position known yet; read from aiokafka's
        assignment state, as its own ``highwater`` is, without waiting for a position."""
        subscription = self._consumer._subscription.subscription
        assignment = subscription.assignment if subscription is not None else None
        if assignment is None:
            return True
        for tp in assignment.tps:
            state = assignment.state_value(tp)
            if state.highwater is None or not state.has_valid_position:
                return True
            if state.highwater > state.position:
                return True
        return False

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit; ``False`` when a rebalance took the partitions first (the new owner
        reads those records again). Nothing is committed once an assignment failed
        (:class:`_Listener`): records fetched while it ran were never applied."""
        if self._listener is not None:
            self._listener.check()
        try:
            await self._consumer.commit(
                {TopicPartition(self.topic, p): offset for p, offset in offsets.items()}
            )
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning("%s: commit skipped after a rebalance: %s", self.topic, exc)
            return False
        except KafkaError as exc:
            raise BrokerError(f"committing offsets on {self.topic} failed: {exc}") from exc
        self._committed.update(offsets)
        return True

    def lag(self) -> Mapping[int, int]:
        """From the highwater marks of the last fetches (no request to the broker)."""
        lags: dict[int, int] = {}
        for tp in self._consumer.assignment():
            end = self._consumer.highwater(tp)
            position = self._committed.get(tp.partition)
            if end is not None and position is not None:
                lags[tp.partition] = end - position
        return lags


class KafkaPublisher:
    """A :class:`~mongomem.stages.runtime.ports.Publisher` on an (idempotent, acks=all) producer."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> Awaitable[Any]:
        try:
            future = await self.producer.send(
                topic, value, key=key, partition=partition, headers=list(headers) or None
            )
        except KafkaError as exc:
            raise BrokerError(f"could not publish to {topic}: {exc}") from exc
        return _acknowledged(topic, future)

    async def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (from the producer's metadata)."""
        try:
            return sorted(await self.producer.partitions_for(topic))
        except KafkaError as exc:
            raise BrokerError(f"cannot read the partitions of {topic}: {exc}") from exc

    async def flush(self) -> None:
        try:
            await self.producer.flush()
        except KafkaError as exc:
            raise BrokerError(f"could not flush the producer: {exc}") from exc


def _acknowledged(topic: str, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """``future`` with a :class:`KafkaError` turned into a :class:`BrokerError` (a callback,
    not a task: this runs for every record a stage publishes)."""
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(acked: asyncio.Future[Any]) -> None:
        if out.done():
            return
        if acked.cancelled():
            out.cancel()
        elif (exc := acked.exception()) is not None:
            if isinstance(exc, KafkaError):
                error = BrokerError(f"Kafka did not acknowledge a record on {topic}: {exc}")
                error.__cause__ = exc
                out.set_exception(error)
            else:
                out.set_exception(exc)
        else:
            out.set_result(acked.result())

    future.add_done_callback(done)
    return out


@contextlib.asynccontextmanager
async def kafka_publisher(kafka: KafkaSettings, **overrides: Any) -> AsyncIterator[KafkaPublisher]:
    """A started :class:`KafkaPublisher` (``make_producer``), stopped after."""
    producer = make_producer(kafka, **overrides)
    try:
        try:
            await producer.start()
        except KafkaError as exc:
            raise BrokerError(f"cannot reach Kafka at {kafka.bootstrap}: {exc}") from exc
        yield KafkaPublisher(producer)
    finally:
        with contextlib.suppress(KafkaError, asyncio.CancelledError):
            await producer.stop()


#: A rebalance callback: the partitions (numbers) of the source's topic.
Rebalanced = Callable[[list[int]], Awaitable[None]]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands a rebalance of ``topic`` to the callbacks. An assignment is the group
    coordinator answering, so it also ends a Kafka outage (:func:`mongomem.logs.dependency_ok`):
    an idle stage has no other success to tell one by, and an outage left open by a
    transient error at its start (a fresh broker's ``GroupCoordinatorNotAvailable``) would
    swallow the lines of the next one.

    aiokafka logs a callback's exception and carries on with the new assignment, so
    a stage whose partitions were never set up (a changelog that could not be read)
    went on rejoining and failing forever (the CI failure after a broker restart
    during start-up). The first failed *assignment* is kept instead, and the source's
    next poll raises it: the attempt ends and the stage's supervisor restarts it.
    """

    def __init__(self, topic: str, assigned: Rebalanced, revoked: Rebalanced) -> None:
        self._topic = topic
        self._assigned = assigned
        self._revoked = revoked
        self.failure: Exception | None = None

    def check(self) -> None:
        """Raise the exception the first failed assignment ended with, if any."""
        if self.failure is not None:
            raise self.failure

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # a failed revocation costs nothing kept: what it did not commit is read again
        await self._revoked(sorted(tp.partition for tp in revoked if tp.topic == self._topic))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        dependency_ok("Kafka")
        try:
            await self._assigned(sorted(tp.partition for tp in assigned if tp.topic == self._topic))
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
            raise


@contextlib.asynccontextmanager
async def kafka_source(
    kafka: KafkaSettings,
    topic: str,
    stage: str,
    group_suffix: str = "",
    *,
    on_assigned: Rebalanced | None = None,
    on_revoked: Rebalanced | None = None,
    **overrides: Any,
) -> AsyncIterator[KafkaSource]:
    """A started :class:`KafkaSource` of ``stage``'s group on ``topic``, stopped after.

    ``on_assigned`` / ``on_revoked`` run inside the group's rebalance (a revoked
    partition's records are committed, or not, before it is handed on).
    """
    options = consumer_options(kafka, stage, group_suffix)
    options.update(overrides)
    listener = _Listener(topic, on_assigned or _nothing, on_revoked or _nothing)
    consumer = AIOKafkaConsumer(**options)
    listening = on_assigned is not None or on_revoked is not None
    if not listening:  # subscribed before start: start waits for the first assignment
        consumer.subscribe([topic], listener=listener)
    try:
        try:
            await consumer.start()
        except KafkaError as exc:
            raise BrokerError(f"cannot join the consumer group: {exc}") from exc
        if listening:
            consumer.subscribe([topic], listener=listener)
        yield KafkaSource(consumer, topic, listener)
    finally:
        with contextlib.suppress(KafkaError):
            await consumer.stop()


async def _nothing(partitions: list[int]) -> None:
    return None


class KafkaPartitionReader:
    """A :class:`~mongomem.stages.runtime.ports.PartitionReader` (no group, no commits)."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka

    async def read(self, topic: str, partitions: Iterable[int]) -> AsyncIterator[Record]:
        tps = [TopicPartition(topic, p) for p in partitions]
        if not tps:
            return
        reader = AIOKafkaConsumer(bootstrap_servers=self._kafka.bootstrap, enable_auto_commit=False)
        try:
            await reader.start()
            # a missing topic's offsets would be asked for 80 s, inside a rebalance
            if await until_topics_known(reader.topics, [topic], TOPIC_KNOWN_S):
                raise BrokerError(f"could not read {topic}: the topic does not exist")
            reader.assign(tps)
            await reader.seek_to_beginning(*tps)
            ends: dict[TopicPartition, int] = await reader.end_offsets(tps)
            remaining = {tp for tp in tps if ends[tp] > 0}
            while remaining:
                batch = await reader.getmany(*remaining, timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        yield record
                        if record.offset + 1 >= ends[tp]:
                            remaining.discard(tp)
                for tp in list(remaining):  # the end may be a record we are not shown
                    if await reader.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        except KafkaError as exc:
            raise BrokerError(f"could not read {topic}: {exc}") from exc
        finally:
            with contextlib.suppress(KafkaError):
                await reader.stop()


#: How long a reader waits for a topic to appear in its metadata (one just created
#: may take a moment to reach every client).
TOPIC_KNOWN_S = 5.0


#: Keys whose partition is remembered (the memo is emptied when it is full).
_KEYS_REMEMBERED = 65_536


class PartitionBatcher:
    """Collects keyed records into one open batch per partition (the watcher's publisher).

    Per-partition record batches for the watcher (aiokafka ``send_batch``).

    Handing aiokafka one prepared batch per partition costs far less per record
    than one ``send()`` call per record. The partition of a key is chosen by the
    same murmur2 partitioner ``send()`` uses, so a session lands in the same
    partition either way. Batches of one partition are sent in the order they
    were filled, and the producer is idempotent, so per-partition order holds.
    The partition of each key is remembered (murmur2 is pure Python, and a
    session sends many turns); the partition list is fixed for a batcher's life.

    :meth:`PartitionBatcher.add` is synchronous and cheap: a batch that fills up
    waits in :attr:`PartitionBatcher.full` until the caller sends it
    (:meth:`~PartitionBatcher.send_full`), so the per-record path never awaits.
    """

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: Sequence[int]) -> None:
        if not partitions:
            raise BrokerError(f"topic {topic!r} has no partitions")
        self._producer = producer
        self._topic = topic
        self._partitions = sorted(partitions)
        self._partitioner = DefaultPartitioner()
        self._open: dict[int, Any] = {}
        self._partition_of: dict[bytes, int] = {}
        #: Batches that filled up, in the order they filled: (partition, batch).
        self.full: list[tuple[int, Any]] = []

    def partition_of(self, key: bytes) -> int:
        partition = self._partition_of.get(key)
        if partition is None:
            partition = int(self._partitioner(key, self._partitions, self._partitions))
            if len(self._partition_of) >= _KEYS_REMEMBERED:
                self._partition_of.clear()
            self._partition_of[key] = partition
        return partition

    def add(self, key: bytes, value: bytes) -> bool:
        """Add a record; True when a batch filled up and waits in :attr:`full`."""
        return self._append(self.partition_of(key), key, value)

    def add_everywhere(self, value: bytes) -> None:
        """Add an unkeyed record (a watermark) to every partition, after what each holds."""
        for partition in self._partitions:
            self._append(partition, None, value)

    def _append(self, partition: int, key: bytes | None, value: bytes) -> bool:
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is not None:
            return False
        # Full: it waits to be sent; the next batch starts with this record.
        self.full.append((partition, batch))
        batch = self._open[partition] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            raise BrokerError(f"a record of {len(value)} bytes does not fit in an empty batch")
        return True

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(self._partitions)

    async def send_full(self) -> list[asyncio.Future[Any]]:
        """Send the batches that filled up; their ack futures (failing with
        :class:`~mongomem.errors.BrokerError`).

        aiokafka queues one batch per partition behind the one in flight; a
        second one waits here until the first is taken (backpressure).
        """
        full, self.full = self.full, []
        return [await self._send(batch, partition) for partition, batch in full]

    async def send_all(self) -> list[asyncio.Future[Any]]:
        """Send the full batches, then every open batch; their ack futures."""
        futures = await self.send_full()
        batches, self._open = self._open, {}
        futures += [await self._send(batch, partition) for partition, batch in batches.items()]
        return futures

    async def _send(self, batch: Any, partition: int) -> asyncio.Future[Any]:
        try:
            future: asyncio.Future[Any] = await self._producer.send_batch(
                batch, self._topic, partition=partition
            )
        except KafkaError as exc:
            raise BrokerError(f"could not publish to {self._topic}[{partition}]: {exc}") from exc
        return _acknowledged(self._topic, future)


async def probe_kafka(settings: KafkaSettings, timeout_s: float = 3.0) -> bool:
    """Whether a broker of ``settings.bootstrap`` answers a metadata request (a client
    bootstraps), within ``timeout_s``; never raises (the outage probe of
    :mod:`mongomem.stages.runtime.outages`)."""
    if not settings.bootstrap:
        return False
    client = AIOKafkaClient(
        bootstrap_servers=settings.bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
    except Exception:  # any failure is the outage going on
        return False
    else:
        return True
    finally:
        with contextlib.suppress(Exception):
            await client.close()
