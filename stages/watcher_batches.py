"""Per-partition record batches for the watcher (aiokafka ``send_batch``).

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

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from mongomem.errors import BrokerError

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
        """Send the batches that filled up; their ack futures.

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
        return future
