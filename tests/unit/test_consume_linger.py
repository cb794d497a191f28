"""The consume loop's linger (issue 24): records published moments after a poll's first
ones join its batch, so a stage that pays per batch (the reconciler's judge call per
snapshot) sees a snapshot's memory types together. In-memory broker, no servers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mongomem.settings import KafkaSettings, ReconcileSettings
from mongomem.stages.runtime import Record, RetryPolicy, consume
from mongomem.stages.runtime.memory import MemoryBroker

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="rt")


class Batches:
    """Keeps every batch it is handed, per partition."""

    stage = "batches"

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[bytes | None]]] = []

    async def handle(self, partition: int, batch: Sequence[Record]) -> None:
        self.calls.append((partition, [r.value for r in batch]))

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        raise AssertionError("nothing fails here")


async def _consume(
    broker: MemoryBroker, linger_s: float, max_records: int = 500
) -> tuple[Batches, asyncio.Event, asyncio.Task[None]]:
    stage = Batches()
    stop = asyncio.Event()
    task = asyncio.create_task(
        consume(
            broker.source("in", "g"),
            stage,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=RetryPolicy(base_s=0.001, max_attempts=2),
            poll_timeout_s=0.01,
            max_records=max_records,
            linger_s=linger_s,
        )
    )
    return stage, stop, task


async def _two_arrivals(linger_s: float, *, max_records: int = 500) -> Batches:
    """``a`` is on the topic; ``b`` and ``c`` arrive 50 ms later (partitions 0 and 1)."""
    broker = MemoryBroker(partitions=2)
    broker.append("in", b"a", partition=0)
    stage, stop, task = await _consume(broker, linger_s, max_records)
    await asyncio.sleep(0.05)
    broker.append("in", b"b", partition=0)
    broker.append("in", b"c", partition=1)
    for _ in range(400):
        if broker.committed("g", "in") == {0: 2, 1: 1}:
            break
        await asyncio.sleep(0.005)
    stop.set()
    await task
    assert broker.committed("g", "in") == {0: 2, 1: 1}  # everything handled and committed
    return stage


async def test_without_linger_records_arriving_apart_are_handled_apart() -> None:
    stage = await _two_arrivals(0.0)
    assert stage.calls[0] == (0, [b"a"])
    assert sorted(stage.calls[1:]) == [(0, [b"b"]), (1, [b"c"])]


async def test_with_linger_they_join_the_first_batch_each_partition_in_order() -> None:
    stage = await _two_arrivals(0.5)
    assert sorted(stage.calls) == [(0, [b"a", b"b"]), (1, [b"c"])]


async def test_a_full_batch_does_not_wait() -> None:
    stage = await _two_arrivals(5.0, max_records=1)
    # a full poll goes at once (the test would time out waiting 5 s otherwise)
    assert stage.calls[0] == (0, [b"a"])


async def test_records_that_keep_coming_join_until_a_quiet_moment_or_the_cap() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"0", partition=0)
    stage, stop, task = await _consume(broker, linger_s=0.3)
    started = asyncio.get_running_loop().time()
    for n in range(1, 21):  # one every 0.1 s for 2 s: never a quiet 0.3 s
        await asyncio.sleep(0.1)
        broker.append("in", str(n).encode(), partition=0)
    for _ in range(400):
        if broker.committed("g", "in") == {0: 21}:
            break
        await asyncio.sleep(0.005)
    stop.set()
    await task
    first = stage.calls[0][1]
    # they kept coming: the first batch waited for them, but no longer than 3 × 0.3 s
    assert 4 <= len(first) <= 14, stage.calls
    assert [v for _, values in stage.calls for v in values] == [
        str(n).encode() for n in range(21)
    ]  # in order, each once
    assert asyncio.get_running_loop().time() - started < 5


def test_the_reconciler_lingers_a_second_by_default() -> None:
    assert ReconcileSettings().judge_linger_s == 1.0
    assert ReconcileSettings(judge_linger_s=0).judge_linger_s == 0
