"""Pipelined stages on the runtime's consume(): acknowledgements stay in flight while the
next batch is submitted; commits never pass an unacknowledged batch — no servers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from mongomem.adapters.kafka import dead_letter_topic
from mongomem.errors import BrokerError, InputError, LLMRateLimited
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime import PipelinedStage, Record, RetryPolicy, Revocations, consume
from mongomem.stages.runtime.memory import MemoryBroker, MemorySource

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="rt")
FAST = RetryPolicy(base_s=0.001, cap_s=0.002, max_attempts=3)


class Pipelined:
    """Submits each batch at once; its acknowledgement is a future the test settles."""

    stage = "piped"

    def __init__(self, fail: dict[bytes, list[BaseException]] | None = None) -> None:
        self.fail = fail or {}
        self.submitted: list[tuple[int, list[bytes | None]]] = []
        self.acks: list[asyncio.Future[None]] = []
        self.flushes = 0
        self.dead: list[int] = []

    async def submit(self, partition: int, batch: Sequence[Record]) -> Awaitable[Any]:
        for record in batch:
            errors = self.fail.get(record.value or b"")
            if errors:
                raise errors.pop(0)
        self.submitted.append((partition, [r.value for r in batch]))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack

    async def flush(self) -> None:
        self.flushes += 1

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        self.dead.append(record.offset)


async def _until(check: Callable[[], bool], task: asyncio.Task[None] | None = None) -> None:
    for _ in range(4_000):
        if check():
            return
        if task is not None and task.done():
            await task
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


def _start(
    broker: MemoryBroker, stage: Pipelined, stop: asyncio.Event, *, in_flight: int = 4
) -> tuple[MemorySource, asyncio.Task[None]]:
    source = broker.source("in", "g")
    task = asyncio.create_task(
        consume(
            source,
            stage,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=FAST,
            max_records=1,  # one record per batch: each its own acknowledgement
            poll_timeout_s=0.005,
            in_flight=in_flight,
        )
    )
    return source, task


def test_the_test_double_is_a_pipelined_stage() -> None:
    assert isinstance(Pipelined(), PipelinedStage)


async def test_the_next_batch_is_submitted_while_the_previous_is_unacknowledged() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"b", b"c"):
        broker.append("in", value, partition=0)
    stage, stop = Pipelined(), asyncio.Event()
    _, task = _start(broker, stage, stop)
    await _until(lambda: len(stage.submitted) == 3, task)  # none acknowledged yet
    assert [values for _, values in stage.submitted] == [[b"a"], [b"b"], [b"c"]]
    await asyncio.sleep(0.02)
    assert broker.committed("g", "in") == {}  # nothing acknowledged: nothing committed
    stop.set()
    for ack in stage.acks:
        ack.set_result(None)
    await task


async def test_commits_never_pass_the_oldest_unacknowledged_batch() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"b", b"c"):
        broker.append("in", value, partition=0)
    stage, stop = Pipelined(), asyncio.Event()
    source, task = _start(broker, stage, stop)
    await _until(lambda: len(stage.acks) == 3, task)
    stage.acks[1].set_result(None)
    stage.acks[2].set_result(None)  # the later two, not the first
    await asyncio.sleep(0.02)
    assert broker.committed("g", "in") == {}
    stage.acks[0].set_result(None)
    await _until(lambda: broker.committed("g", "in") == {0: 3}, task)
    offsets = [c[0] for c in source.commits]
    assert offsets == sorted(offsets)  # in order, never back
    stop.set()
    await task


async def test_at_most_in_flight_batches_are_unacknowledged_and_the_stage_flushes_first() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"b", b"c", b"d"):
        broker.append("in", value, partition=0)
    stage, stop = Pipelined(), asyncio.Event()
    _, task = _start(broker, stage, stop, in_flight=2)
    await _until(lambda: len(stage.submitted) == 3, task)
    await asyncio.sleep(0.02)
    assert len(stage.submitted) == 3  # two in flight and a third submitted: it waits
    assert stage.flushes >= 1  # told to hand over what it holds before waiting
    stage.acks[0].set_result(None)
    await _until(lambda: len(stage.submitted) == 4, task)
    assert broker.committed("g", "in") == {0: 1}
    stop.set()
    for ack in stage.acks[1:]:
        ack.set_result(None)
    await task
    assert broker.committed("g", "in") == {0: 4}


async def test_a_failed_acknowledgement_ends_the_loop_with_no_commit_past_it() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"b", b"c"):
        broker.append("in", value, partition=0)
    stage, stop = Pipelined(), asyncio.Event()
    _, task = _start(broker, stage, stop)
    await _until(lambda: len(stage.acks) == 3, task)
    stage.acks[0].set_result(None)
    stage.acks[1].set_exception(BrokerError("no ack"))
    stage.acks[2].set_result(None)
    with pytest.raises(BrokerError, match="no ack"):
        await asyncio.wait_for(task, 5)
    assert broker.committed("g", "in") == {0: 1}  # the first only


async def test_stop_drains_every_outstanding_batch_before_returning() -> None:
    broker = MemoryBroker(partitions=2)
    broker.append("in", b"a", partition=0)
    broker.append("in", b"b", partition=1)
    stage, stop = Pipelined(), asyncio.Event()
    _, task = _start(broker, stage, stop)
    await _until(lambda: len(stage.acks) == 2, task)
    stop.set()
    await asyncio.sleep(0.02)
    assert not task.done()  # waiting for the acknowledgements, not abandoning them
    for ack in stage.acks:
        ack.set_result(None)
    await asyncio.wait_for(task, 5)
    assert broker.committed("g", "in") == {0: 1, 1: 1}


async def test_a_failed_submit_follows_the_retry_policy() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"flaky", b"bad", b"ok"):
        broker.append("in", value, partition=0)
    fail: dict[bytes, list[BaseException]] = {
        b"flaky": [LLMRateLimited("slow down")],  # retriable: submitted again
        b"bad": [InputError("not a record")],  # permanent: dead-lettered once
    }
    stage, stop = Pipelined(fail), asyncio.Event()
    _, task = _start(broker, stage, stop)
    await _until(lambda: len(stage.submitted) == 2, task)
    assert [values for _, values in stage.submitted] == [[b"flaky"], [b"ok"]]
    assert stage.dead == [1]
    for ack in stage.acks:
        ack.set_result(None)
    await _until(lambda: broker.committed("g", "in") == {0: 3}, task)
    stop.set()
    await task
    assert len(broker.records(dead_letter_topic(KAFKA, "piped"))) == 1


class Blocking(Pipelined):
    """Holds the submit of ``partition`` until :attr:`go` is set."""

    def __init__(self, partition: int) -> None:
        super().__init__()
        self.partition = partition
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def submit(self, partition: int, batch: Sequence[Record]) -> Awaitable[Any]:
        if partition == self.partition:
            self.entered.set()
            await self.go.wait()
        return await super().submit(partition, batch)


def _start_revocable(
    broker: MemoryBroker, stage: Pipelined, stop: asyncio.Event, revocations: Revocations
) -> tuple[MemorySource, asyncio.Task[None]]:
    source = broker.source("in", "g")
    task = asyncio.create_task(
        consume(
            source,
            stage,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=FAST,
            poll_timeout_s=0.005,
            revocations=revocations,
        )
    )
    return source, task


async def test_a_revocation_awaits_the_partitions_batches_and_commits_what_was_acknowledged() -> (
    None
):
    broker = MemoryBroker(partitions=2)
    broker.append("in", b"a", partition=0)
    broker.append("in", b"b", partition=1)
    stage, stop, revocations = Pipelined(), asyncio.Event(), Revocations()
    source, task = _start_revocable(broker, stage, stop, revocations)
    await _until(lambda: len(stage.acks) == 2, task)
    revoking = asyncio.create_task(revocations.revoke([0]))
    await asyncio.sleep(0.02)
    assert not revoking.done(), "waits for the revoked partition's batch in flight"
    assert stage.flushes >= 1, "the stage was told to hand over what it holds"
    ack_of = {values[0]: ack for (_, values), ack in zip(stage.submitted, stage.acks, strict=True)}
    ack_of[b"a"].set_result(None)
    await asyncio.wait_for(revoking, 5)
    assert broker.committed("g", "in") == {0: 1}, "committed before the revocation returns"
    commits_before = len(source.commits)
    ack_of[b"b"].set_result(None)
    await _until(lambda: broker.committed("g", "in") == {0: 1, 1: 1}, task)
    stop.set()
    await task
    assert all(0 not in c for c in source.commits[commits_before:]), "nothing of 0 after"


async def test_records_of_a_partition_revoked_while_they_are_handled_are_never_committed() -> None:
    broker = MemoryBroker(partitions=2)
    broker.append("in", b"a", partition=0)
    broker.append("in", b"b", partition=1)
    stage, stop, revocations = Blocking(partition=0), asyncio.Event(), Revocations()
    source, task = _start_revocable(broker, stage, stop, revocations)
    await _until(stage.entered.is_set, task)  # polled; its submit has begun
    await revocations.revoke([0])  # taken away meanwhile (nothing of it in flight yet)
    stage.go.set()
    await _until(lambda: len(stage.acks) == 2, task)
    for ack in stage.acks:
        ack.set_result(None)
    await _until(lambda: broker.committed("g", "in") == {1: 1}, task)
    stop.set()
    await task
    assert all(0 not in c for c in source.commits), "its new owner reads it again"
    assert broker.committed("g", "in") == {1: 1}


async def test_a_revocation_while_the_loop_waits_at_its_in_flight_limit_commits_once_in_order() -> (
    None
):
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"b", b"c"):
        broker.append("in", value, partition=0)
    stage, stop, revocations = Pipelined(), asyncio.Event(), Revocations()
    source = broker.source("in", "g")
    task = asyncio.create_task(
        consume(
            source,
            stage,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=FAST,
            max_records=1,
            poll_timeout_s=0.005,
            in_flight=1,
            revocations=revocations,
        )
    )
    await _until(lambda: len(stage.acks) == 2, task)  # the loop waits for the oldest
    revoking = asyncio.create_task(revocations.revoke([0]))
    await asyncio.sleep(0.01)
    stage.acks[0].set_result(None)
    stage.acks[1].set_result(None)
    await asyncio.wait_for(revoking, 5)
    await asyncio.sleep(0.02)
    stop.set()
    for ack in stage.acks[2:]:
        ack.set_result(None)
    await asyncio.wait_for(task, 5)
    assert source.commits[:1] == [{0: 2}], "the revocation commits both, the loop nothing of them"
    offsets = [c[0] for c in source.commits if 0 in c]
    assert offsets == sorted(offsets), "never back"
