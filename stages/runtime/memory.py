"""An in-memory broker: the test double of the runtime's ports (no servers).

Like ``httpx.MockTransport`` or ``bytewax.testing``, it ships with the package
so stages and the runtime are tested on it: a :class:`MemoryBroker` holds
partitioned topics and each group's committed offsets; a
:class:`MemoryPublisher` appends a record when it is acknowledged, which a test
can hold back (:meth:`MemoryPublisher.hold`) or make fail
(:meth:`MemoryPublisher.fail_next`); :class:`MemoryBatches` fills
per-partition batches and sends them through one; a :class:`MemorySource` reads a group's
share like a consumer that owns every partition. It is a stand-in, not Kafka:
no rebalances, no retention, no transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from mongomem.errors import BrokerError
from mongomem.stages.runtime.ports import Headers, Message, Record

__all__ = ["MemoryBatches", "MemoryBroker", "MemoryPublisher", "MemorySource"]


class MemoryBroker:
    """Topics of ``partitions`` partitions each, created on first use."""

    def __init__(self, partitions: int = 3) -> None:
        self.partitions = partitions
        self._logs: dict[str, list[list[Message]]] = {}
        self._committed: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
        self._arrived = asyncio.Event()
        #: Every record written, in the order written (all topics).
        self.history: list[Message] = []

    def _log(self, topic: str) -> list[list[Message]]:
        return self._logs.setdefault(topic, [[] for _ in range(self.partitions)])

    def partition_of(self, key: bytes | None) -> int:
        return zlib.crc32(key or b"") % self.partitions

    def append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers = (),
    ) -> Message:
        """Write a record now (as an acknowledged produce would)."""
        part = self.partition_of(key) if partition is None else partition
        log = self._log(topic)[part]
        message = Message(topic, part, len(log), key, value, tuple(headers))
        log.append(message)
        self.history.append(message)
        self._arrived.set()
        return message

    def records(self, topic: str) -> list[Message]:
        """Every record of ``topic``, partition by partition."""
        return [m for part in self._log(topic) for m in part]

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offsets on ``topic`` (partition → next offset)."""
        return dict(self._committed[(group, topic)])

    def end_offsets(self, topic: str) -> dict[int, int]:
        return {p: len(log) for p, log in enumerate(self._log(topic))}

    async def read(self, topic: str, partitions: Iterable[int]) -> AsyncIterator[Record]:
        """A :class:`~mongomem.stages.runtime.ports.PartitionReader`: whole partitions."""
        log = self._log(topic)
        for p in partitions:
            for message in list(log[p]):
                yield message

    def source(self, topic: str, group: str) -> MemorySource:
        return MemorySource(self, topic, group)

    def publisher(self) -> MemoryPublisher:
        return MemoryPublisher(self)

    async def _wait(self, timeout_s: float) -> None:
        self._arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout_s)

    def _commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._committed[(group, topic)].update(offsets)


class MemorySource:
    """A :class:`~mongomem.stages.runtime.ports.RecordSource`: ``group``'s view of ``topic``."""

    def __init__(self, broker: MemoryBroker, topic: str, group: str) -> None:
        self._broker = broker
        self.topic = topic
        self.group = group
        committed = broker.committed(group, topic)
        self._position = {p: committed.get(p, 0) for p in range(broker.partitions)}
        self.commits: list[dict[int, int]] = []

    def _ready(self, max_records: int) -> dict[int, list[Record]]:
        batch: dict[int, list[Record]] = {}
        left = max_records
        for p, log in enumerate(self._broker._log(self.topic)):
            start = self._position[p]
            taken = log[start : start + left]
            if taken:
                batch[p] = list(taken)
                self._position[p] = start + len(taken)
                left -= len(taken)
            if left <= 0:
                break
        return batch

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        batch = self._ready(max_records)
        if not batch:
            await self._broker._wait(timeout_s)
            batch = self._ready(max_records)
        return batch

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        self.commits.append(dict(offsets))
        self._broker._commit(self.group, self.topic, offsets)
        return True

    def lag(self) -> Mapping[int, int]:
        committed = self._broker.committed(self.group, self.topic)
        ends = self._broker.end_offsets(self.topic)
        return {p: ends[p] - committed[p] for p in committed}


class MemoryPublisher:
    """A :class:`~mongomem.stages.runtime.ports.Publisher` into a :class:`MemoryBroker`.

    A record is written when acknowledged: at once, or — after :meth:`hold` —
    only at :meth:`release` (until then its acknowledgement stays pending).
    """

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker
        self._held = False
        self._pending: list[tuple[asyncio.Future[Message], Callable[[], Message]]] = []
        self._failures: list[BaseException] = []
        self.sent = 0

    def hold(self) -> None:
        """Acknowledge nothing from now on until :meth:`release`."""
        self._held = True

    def release(self) -> None:
        """Acknowledge (write) everything held, and stop holding."""
        self._held = False
        for future, write in self._pending:
            if not future.done():
                future.set_result(write())
        self._pending.clear()

    def fail_next(self, count: int = 1, error: BaseException | None = None) -> None:
        """Make the next ``count`` sends fail (a :class:`BrokerError` by default)."""
        self._failures += [error or BrokerError("memory broker: send refused")] * count

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> Awaitable[Any]:
        if self._failures:
            raise self._failures.pop(0)
        self.sent += 1
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        write = partial(
            self._broker.append, topic, value, key=key, headers=headers, partition=partition
        )
        if self._held:
            self._pending.append((future, write))
        else:
            future.set_result(write())
        return future

    @property
    def pending(self) -> int:
        """Records handed over and not acknowledged yet."""
        return len(self._pending)

    async def flush(self) -> None:
        await asyncio.gather(*(f for f, _ in self._pending))


class MemoryBatches:
    """A :class:`~mongomem.stages.runtime.ports.PartitionBatches` into a :class:`MemoryBroker`.

    A batch holds at most ``records_per_batch`` records; sending it hands each
    record to ``publisher`` (so :meth:`MemoryPublisher.hold` and
    :meth:`~MemoryPublisher.fail_next` apply), and its acknowledgement
    completes when all of them are acknowledged.
    """

    def __init__(
        self, publisher: MemoryPublisher, topic: str, *, records_per_batch: int = 100
    ) -> None:
        self._publisher = publisher
        self._topic = topic
        self._size = records_per_batch
        self.partitions = tuple(range(publisher._broker.partitions))
        self._open: dict[int, list[tuple[bytes | None, bytes]]] = {}
        #: Batches that filled up, in the order they filled: (partition, records).
        self.full: list[tuple[int, list[tuple[bytes | None, bytes]]]] = []
        #: Batches sent, in order: (partition, number of records).
        self.sent: list[tuple[int, int]] = []

    def add(self, key: bytes, value: bytes) -> bool:
        return self._append(self._publisher._broker.partition_of(key), key, value)

    def add_everywhere(self, value: bytes) -> None:
        for partition in self.partitions:
            self._append(partition, None, value)

    def _append(self, partition: int, key: bytes | None, value: bytes) -> bool:
        batch = self._open.setdefault(partition, [])
        batch.append((key, value))
        if len(batch) < self._size:
            return False
        self.full.append((partition, batch))
        self._open[partition] = []
        return True

    async def send_full(self) -> list[asyncio.Future[Any]]:
        full, self.full = self.full, []
        return [await self._send(partition, batch) for partition, batch in full]

    async def send_all(self) -> list[asyncio.Future[Any]]:
        futures = await self.send_full()
        batches, self._open = self._open, {}
        futures += [await self._send(p, batch) for p, batch in batches.items() if batch]
        return futures

    async def _send(
        self, partition: int, batch: list[tuple[bytes | None, bytes]]
    ) -> asyncio.Future[Any]:
        acks = [
            await self._publisher.send(self._topic, value, key=key, partition=partition)
            for key, value in batch
        ]
        self.sent.append((partition, len(batch)))
        acknowledged: asyncio.Future[Any] = asyncio.gather(*acks)
        return acknowledged
