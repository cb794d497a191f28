"""The ports of the stage runtime: what a stage reads, writes and checkpoints.

Stages depend on these Protocols, never on a client library. The Kafka
adapters are :mod:`mongomem.stages.runtime.kafka`; the in-memory test double
is :mod:`mongomem.stages.runtime.memory`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from mongomem.adapters.kafka import DeadLetter

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "ConsumerStage",
    "DeadLetterSink",
    "Headers",
    "Message",
    "PartitionBatches",
    "PartitionReader",
    "PipelinedStage",
    "Publisher",
    "Record",
    "RecordSource",
    "Stage",
]

#: Kafka-style record headers: (name, bytes) pairs.
Headers = Sequence[tuple[str, bytes]]


class Record(Protocol):
    """One consumed record (an aiokafka ``ConsumerRecord`` fits)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...


@dataclass(frozen=True)
class Message:
    """A plain :class:`Record` (the in-memory broker's, and the tests')."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class RecordSource(Protocol):
    """A partitioned, ordered source with committed positions (a consumer group)."""

    @property
    def topic(self) -> str: ...

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        """The next records per partition, in offset order (empty after ``timeout_s``)."""
        ...

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        """Record that every record below ``offsets[partition]`` is handled; ``False`` when
        the partitions were taken away first (their new owner reads them again)."""
        ...

    def lag(self) -> Mapping[int, int]:
        """Records between the committed position and the end, per partition, as far as
        this source knows without asking the broker (partitions it knows nothing of are
        left out)."""
        ...


class Publisher(Protocol):
    """Writes records; a write counts only once its acknowledgement has arrived."""

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> Awaitable[Any]:
        """Hand a record over (to ``partition``, else the key's); the returned awaitable
        completes when it is acknowledged (and raises
        :class:`~mongomem.errors.BrokerError` if it is not). ``None`` is a tombstone."""
        ...

    async def flush(self) -> None:
        """Wait until everything handed over is acknowledged or failed."""
        ...


class PartitionBatches(Protocol):
    """Open per-partition batches that a stage fills without awaiting and sends when it
    chooses (the watcher's publisher: :class:`~mongomem.stages.runtime.kafka.PartitionBatcher`
    on Kafka, :class:`~mongomem.stages.runtime.memory.MemoryBatches` in memory).

    A key's records go to one partition, in the order added; batches of a
    partition are sent in the order they were filled.
    """

    @property
    def partitions(self) -> tuple[int, ...]: ...

    @property
    def full(self) -> Sequence[Any]:
        """Batches that filled up and wait for :meth:`send_full` (empty: none)."""
        ...

    def add(self, key: bytes, value: bytes) -> bool:
        """Add a keyed record; ``True`` when a batch filled up (it waits in :attr:`full`)."""
        ...

    def add_everywhere(self, value: bytes) -> None:
        """Add an unkeyed record to every partition, after what each holds."""
        ...

    async def send_full(self) -> list[asyncio.Future[Any]]:
        """Send the batches that filled up; one acknowledgement per batch."""
        ...

    async def send_all(self) -> list[asyncio.Future[Any]]:
        """Send the full batches, then every open one; one acknowledgement per batch."""
        ...


class DeadLetterSink(Protocol):
    """Where :func:`~mongomem.stages.runtime.dead_letter` puts a letter; returns once it is
    kept (acknowledged). :class:`~mongomem.stages.runtime.consume.PublishedDeadLetters` is
    the real one (``dlq.<stage>`` through a :class:`Publisher`)."""

    async def send(self, letter: DeadLetter, key: bytes | None) -> None: ...


class PartitionReader(Protocol):
    """Reads whole partitions outside any group (a changelog restored on assignment)."""

    def read(self, topic: str, partitions: Iterable[int]) -> AsyncIterator[Record]:
        """Every record of ``partitions`` from the beginning up to their end as of the call."""
        ...


T = TypeVar("T")
Checkpoint = Mapping[str, Any]


class CheckpointStore(Protocol[T]):
    """Where a source that is not a consumer group keeps its position (the watcher's
    resume token and marks: :class:`mongomem.stages.watcher_checkpoints.WatcherCheckpoints`)."""

    async def load(self) -> T | None: ...

    async def save(self, checkpoint: T) -> bool:
        """Store ``checkpoint`` (only ever after what it covers was acknowledged);
        ``False`` when there was nothing to write."""
        ...


class ConsumerStage(Protocol):
    """A stage's pure core behind one method, driven by :func:`~mongomem.stages.runtime.consume`.

    ``handle(partition, batch)`` returns only when every output of ``batch``
    is acknowledged, and raises (nothing acknowledged is then assumed) when
    it cannot. The runtime decides what a failure means: retry, apply the
    records one by one, dead-letter one, or stop the stage.
    """

    @property
    def stage(self) -> str: ...

    async def handle(self, partition: int, batch: Sequence[Record]) -> None: ...

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        """Called after ``record`` was dead-lettered (record the failure, say)."""
        ...


@runtime_checkable
class PipelinedStage(Protocol):
    """A stage whose acknowledgements stay in flight while its next batch is handled.

    :func:`~mongomem.stages.runtime.consume` drives it instead of a
    :class:`ConsumerStage` (it tells the two apart by this method). ``submit
    (partition, batch)`` does the batch's in-order work and hands its outputs
    over, then returns without waiting for them to be acknowledged: the
    awaitable it returns completes when every output of ``batch`` is
    acknowledged, and raises when one is not. It must complete without any
    further call of ``submit`` (a stage that holds outputs back to send them
    together sends them on its own, say when the previous send is
    acknowledged or after a delay). The runtime keeps a few such batches in
    flight per partition and commits a partition only up to the oldest
    batch not yet acknowledged; see the delivery contract in
    :mod:`mongomem.stages.runtime` for what a failure of either means.
    """

    @property
    def stage(self) -> str: ...

    async def submit(self, partition: int, batch: Sequence[Record]) -> Awaitable[Any]: ...

    async def flush(self) -> None:
        """Hand over at once whatever ``submit`` held back: the runtime is about to wait
        for acknowledgements (at its in-flight limit, or draining at a stop)."""
        ...

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        """Called after ``record`` was dead-lettered (record the failure, say)."""
        ...


class Stage(Protocol):
    """What :func:`~mongomem.stages.runtime.run_stage` runs: one attempt of a stage.

    ``run`` opens its connections, works until ``stop`` is set, drains (finishes
    and checkpoints what is in flight) and returns. It raises a retriable
    :class:`~mongomem.errors.MongomemError` to be restarted, anything else to
    end the process.
    """

    @property
    def name(self) -> str: ...

    async def run(self, stop: asyncio.Event) -> None: ...
