"""Per-partition record batches for the watcher (aiokafka ``send_batch``).

Handing aiokafka one prepared batch per partition costs far less per record
than one ``send()`` call per record. The partition of a key is chosen by the
same murmur2 partitioner ``send()`` uses, so a session lands in the same
partition either way. Batches of one partition are sent in the order they
were filled, and the producer is idempotent, so per-partition order holds.
The partition of each key is remembered (murmur2 is pure Python, and a
session sends many turns); the partition list is fixed for a batcher's life.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from pipeline.errors import BrokerError

__all__ = ["PartitionBatcher"]

#: Keys whose partition is remembered (the memo is emptied when it is full).
_KEYS_REMEMBERED = 65_536


class PartitionBatcher:
    """Collects keyed records into one open batch per partition."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: Sequence[int]) -> None:
        if not partitions:
            raise BrokerError(f"topic {topic!r} has no partitions")
        self._producer = producer
        self._topic = topic
        self._partitions = sorted(partitions)
        self._partitioner = DefaultPartitioner()
        self._open: dict[int, Any] = {}
        self._partition_of: dict[bytes, int] = {}

    def partition_of(self, key: bytes) -> int:
        partition = self._partition_of.get(key)
        if partition is None:
            partition = int(self._partitioner(key, self._partitions, self._partitions))
            if len(self._partition_of) >= _KEYS_REMEMBERED:
                self._partition_of.clear()
            self._partition_of[key] = partition
        return partition

    async def add(self, key: bytes, value: bytes) -> asyncio.Future[Any] | None:
        """Add a record; returns the ack future of a batch sent because it was full."""
        partition = self.partition_of(key)
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is not None:
            return None
        # Full: send it, and start the next batch with this record.
        future = await self._send(batch, partition)
        batch = self._open[partition] = self._producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            raise BrokerError(f"a record of {len(value)} bytes does not fit in an empty batch")
        return future

    async def send_all(self) -> list[asyncio.Future[Any]]:
        """Send every open batch; their ack futures."""
        batches, self._open = self._open, {}
        return [await self._send(batch, partition) for partition, batch in batches.items()]

    async def _send(self, batch: Any, partition: int) -> asyncio.Future[Any]:
        try:
            future: asyncio.Future[Any] = await self._producer.send_batch(
                batch, self._topic, partition=partition
            )
        except KafkaError as exc:
            raise BrokerError(f"could not publish to {self._topic}[{partition}]: {exc}") from exc
        return future
