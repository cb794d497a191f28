"""The watcher's pure decisions (token validity, error verdicts, flush timing), its read-ahead
and its batches, without servers."""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from aiokafka import AIOKafkaProducer
from pymongo.errors import OperationFailure

from mongomem.errors import ResumeTokenLost
from mongomem.stages.runtime.kafka import PartitionBatcher
from mongomem.stages.watcher_logic import (
    READ_PIPELINE,
    WATCH_PIPELINE,
    FlushPolicy,
    checkpoint_updates,
    mark_id,
    open_failure_verdict,
    token_id,
    usable_token,
)
from mongomem.stages.watcher_reader import ChangeReader, Idle, Stream


@pytest.mark.parametrize(
    ("stored", "usable"),
    [
        ({"_data": "826B0C4F8F000000042B"}, True),
        ({"_data": b"\x01"}, True),
        ({"_data": ""}, False),
        ({"_data": 12}, False),
        ({"format": "other"}, False),
        ("a string", False),
        (None, False),
    ],
)
def test_usable_token(stored: object, usable: bool) -> None:
    assert (usable_token(stored) is not None) == usable


@pytest.mark.parametrize("code", [286, 280, 260, 136])
def test_history_lost_codes_mean_backfill(code: int) -> None:
    assert open_failure_verdict(code, with_token=True) == "lost"
    assert open_failure_verdict(code, with_token=False) == "lost"


def test_unnamed_failures_with_a_token_are_probed_and_without_one_retried() -> None:
    assert open_failure_verdict(None, with_token=True) == "probe"
    assert open_failure_verdict(13, with_token=True) == "probe"
    assert open_failure_verdict(None, with_token=False) == "retry"
    assert open_failure_verdict(89, with_token=False) == "retry"


def test_checkpoint_ids_are_stable_and_per_topic() -> None:
    slot = ("p", "u", "s")
    assert mark_id("a.turns", slot) == mark_id("a.turns", slot)
    assert mark_id("a.turns", slot) != mark_id("b.turns", slot)
    assert mark_id("a.turns", slot) != mark_id("a.turns", ("p", "u", "t"))
    assert token_id("a.turns") != token_id("b.turns")


def test_flush_policy() -> None:
    policy = FlushPolicy(batch_max=3, interval_s=0.5)
    assert not policy.due(0, 10.0, idle=True, unacked=False)
    assert policy.due(1, 0.0, idle=True, unacked=False)
    assert not policy.due(2, 0.1, idle=False, unacked=False)
    assert policy.due(3, 0.0, idle=False, unacked=False)
    assert policy.due(1, 0.5, idle=False, unacked=False)


def test_a_full_or_old_batch_waits_for_the_previous_flush_but_an_idle_stream_does_not() -> None:
    policy = FlushPolicy(batch_max=3, interval_s=0.5)
    assert not policy.due(300, 0.0, idle=False, unacked=True)
    assert not policy.due(1, 9.0, idle=False, unacked=True)
    assert policy.due(1, 0.0, idle=True, unacked=True)
    assert not policy.due(0, 9.0, idle=True, unacked=True)


def test_the_read_pipeline_keeps_the_resume_token_and_the_turn_only() -> None:
    assert READ_PIPELINE[: len(WATCH_PIPELINE)] == WATCH_PIPELINE
    assert READ_PIPELINE[-1] == {"$project": {"fullDocument": 1}}  # _id stays (default)


# ---------------------------------------------------------------------- read-ahead


class FakeStream:
    """Batches as a change stream returns them; an exception in place of a batch is raised."""

    def __init__(self, batches: list[list[dict[str, Any]] | Exception]) -> None:
        self.batches = deque(batches)
        self.buffer: deque[dict[str, Any]] = deque()
        self.resume_token: dict[str, Any] | None = {"_data": "00"}
        self.getmores = 0

    async def try_next(self) -> dict[str, Any] | None:
        if not self.buffer:
            await asyncio.sleep(0)  # the round trip
            if not self.batches:
                return None
            batch = self.batches.popleft()
            if isinstance(batch, Exception):
                raise batch
            self.getmores += 1
            self.buffer.extend(batch)
            if not self.buffer:
                return None
        change = self.buffer.popleft()
        self.resume_token = change["_id"]
        return change


def change(n: int) -> dict[str, Any]:
    return {"_id": {"_data": f"{n:02d}"}, "fullDocument": {"n": n}}


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_reader_fetches_the_next_batch_before_the_publisher_takes_the_first() -> None:
    stream = FakeStream([[change(1), change(2)], [change(3), change(4)], [change(5)]])
    wake = asyncio.Event()
    reader = ChangeReader(cast(Stream, stream), wake, limit=4, poll_s=0.01)
    try:
        await settle()
        assert wake.is_set()
        assert stream.getmores == 2  # stopped at the limit, not after the first batch
        assert reader.take(3) == [change(1), change(2), change(3)]
        await settle()
        assert stream.getmores == 3
        assert reader.take(10)[:2] == [change(4), change(5)]
    finally:
        await reader.close()


async def test_the_reader_marks_an_empty_read_with_the_token_and_raises_failures_in_order() -> None:
    lost = OperationFailure("history lost", code=286)
    stream = FakeStream([[change(1)], [], [change(2)], lost])
    reader = ChangeReader(cast(Stream, stream), asyncio.Event(), limit=10, poll_s=0.01)
    try:
        before = datetime.now(UTC)
        await settle()
        taken = reader.take(10)
        assert taken[0] == change(1)
        assert taken[2] == change(2)
        idle = taken[1]
        assert isinstance(idle, Idle)
        assert idle.token == {"_data": "01"}
        # When the empty read began: after the change before it was read.
        assert before <= idle.read_at <= datetime.now(UTC)
        with pytest.raises(ResumeTokenLost):
            reader.take(10)
    finally:
        await reader.close()


# ---------------------------------------------------------------------- batches


class SmallBatch:
    """Holds two records."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def append(self, *, key: bytes, value: bytes, timestamp: None) -> object | None:
        if len(self.records) == 2:
            return None
        self.records.append(value)
        return object()


class BatchProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[int, list[bytes]]] = []

    def create_batch(self) -> SmallBatch:
        return SmallBatch()

    async def send_batch(self, batch: SmallBatch, topic: str, *, partition: int) -> object:
        self.sent.append((partition, batch.records))
        return asyncio.get_running_loop().create_future()


async def test_a_full_batch_waits_for_the_caller_and_is_sent_before_the_open_ones() -> None:
    producer = BatchProducer()
    batcher = PartitionBatcher(cast(AIOKafkaProducer, producer), "t", [0])
    assert [batcher.add(b"k", v) for v in (b"1", b"2", b"3", b"4", b"5")] == [
        False,
        False,
        True,
        False,
        True,
    ]
    assert producer.sent == []  # adding never sends
    assert len(await batcher.send_full()) == 2
    assert producer.sent == [(0, [b"1", b"2"]), (0, [b"3", b"4"])]
    batcher.add(b"k", b"6")
    batcher.add(b"k", b"7")
    await batcher.send_all()
    assert producer.sent[2:] == [(0, [b"5", b"6"]), (0, [b"7"])]


async def test_a_watermark_goes_into_every_partition_after_the_records_it_follows() -> None:
    producer = BatchProducer()
    batcher = PartitionBatcher(cast(AIOKafkaProducer, producer), "t", [2, 0, 1])
    batcher.add(b"k", b"1")
    batcher.add(b"k", b"2")  # fills this key's batch; the watermark starts the next one
    home = batcher.partition_of(b"k")
    batcher.add_everywhere(b"w")
    assert batcher.partitions == (0, 1, 2)
    await batcher.send_all()
    sent = {p: [v for q, batch in producer.sent if q == p for v in batch] for p in (0, 1, 2)}
    assert sent[home] == [b"1", b"2", b"w"]
    assert all(sent[p] == [b"w"] for p in (0, 1, 2) if p != home)


def test_checkpoint_writes_marks_before_the_token_and_never_lowers_a_mark() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    updates = checkpoint_updates("t.turns", {("p", "u", "s"): 7}, {"_data": "82"}, now)
    assert [f["_id"] for f, _ in updates] == [
        mark_id("t.turns", ("p", "u", "s")),
        token_id("t.turns"),
    ]
    assert updates[0][1]["$max"] == {"seq": 7}
    assert updates[1][1]["$set"]["token"] == {"_data": "82"}
    assert checkpoint_updates("t.turns", {}, None, now) == []
