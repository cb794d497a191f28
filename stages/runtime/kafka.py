"""The Kafka adapters of the runtime's ports: the one stage module that imports aiokafka.

aiokafka's errors become :class:`~mongomem.errors.BrokerError` here; a commit
refused because a rebalance took the partitions away is logged and skipped
(the new owner reads those records again: at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

from mongomem.errors import BrokerError
from mongomem.extras import require
from mongomem.kafka import make_producer
from mongomem.ops import consumer_group
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime.ports import Headers, Record

with require("stages"):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

__all__ = ["KafkaPublisher", "KafkaSource", "consumer_options", "kafka_publisher", "kafka_source"]

log = logging.getLogger("mongomem.stages.runtime")


def consumer_options(kafka: KafkaSettings, stage: str, group_suffix: str = "") -> dict[str, Any]:
    """The consumer configuration every stage starts from: its group
    (:func:`mongomem.ops.consumer_group`), auto-commit off, from the earliest
    record when the group is new."""
    return {
        "bootstrap_servers": kafka.bootstrap,
        "group_id": consumer_group(kafka, stage, group_suffix),
        "client_id": f"mongomem-{stage}",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": int(kafka.request_timeout_s * 1000),
    }


class KafkaSource:
    """A :class:`~mongomem.stages.runtime.ports.RecordSource` on one topic of a consumer group."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        self._consumer = consumer
        self.topic = topic
        self._committed: dict[int, int] = {}

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        try:
            batch = await self._consumer.getmany(
                timeout_ms=int(timeout_s * 1000), max_records=max_records
            )
        except KafkaError as exc:
            raise BrokerError(f"reading {self.topic} failed: {exc}") from exc
        return {tp.partition: records for tp, records in batch.items()}

    async def commit(self, offsets: Mapping[int, int]) -> None:
        try:
            await self._consumer.commit(
                {TopicPartition(self.topic, p): offset for p, offset in offsets.items()}
            )
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning("%s: commit skipped after a rebalance: %s", self.topic, exc)
            return
        except KafkaError as exc:
            raise BrokerError(f"committing offsets on {self.topic} failed: {exc}") from exc
        self._committed.update(offsets)

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
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers = ()
    ) -> Awaitable[Any]:
        try:
            future = await self.producer.send(topic, value, key=key, headers=list(headers) or None)
        except KafkaError as exc:
            raise BrokerError(f"could not publish to {topic}: {exc}") from exc
        return _acknowledged(topic, future)

    async def flush(self) -> None:
        try:
            await self.producer.flush()
        except KafkaError as exc:
            raise BrokerError(f"could not flush the producer: {exc}") from exc


async def _acknowledged(topic: str, future: Awaitable[Any]) -> Any:
    try:
        return await future
    except KafkaError as exc:
        raise BrokerError(f"Kafka did not acknowledge a record on {topic}: {exc}") from exc


@contextlib.asynccontextmanager
async def kafka_publisher(kafka: KafkaSettings, **overrides: Any) -> AsyncIterator[KafkaPublisher]:
    """A started :class:`KafkaPublisher` (:func:`mongomem.kafka.make_producer`), stopped after."""
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


@contextlib.asynccontextmanager
async def kafka_source(
    kafka: KafkaSettings, topic: str, stage: str, group_suffix: str = "", **overrides: Any
) -> AsyncIterator[KafkaSource]:
    """A started :class:`KafkaSource` of ``stage``'s group on ``topic``, stopped after."""
    options = consumer_options(kafka, stage, group_suffix)
    options.update(overrides)
    consumer = AIOKafkaConsumer(topic, **options)
    try:
        try:
            await consumer.start()
        except KafkaError as exc:
            raise BrokerError(f"cannot reach Kafka at {kafka.bootstrap}: {exc}") from exc
        yield KafkaSource(consumer, topic)
    finally:
        with contextlib.suppress(KafkaError):
            await consumer.stop()
