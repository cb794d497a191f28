"""The watcher's core driven by the runtime's consume() over the change-stream source, on
the in-memory broker: no MongoDB, no Kafka (the change stream and the checkpoint store are
test doubles; the publisher is the runtime's in-memory one)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from pymongo.asynchronous.collection import AsyncCollection

from mongomem.adapters.kafka import DeadLetter, dead_letter_topic
from mongomem.adapters.mongo import Document
from mongomem.codec import decode, peek_kind
from mongomem.metrics import DEAD_LETTERS
from mongomem.models import Role, Turn
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime import PublishedDeadLetters, consume
from mongomem.stages.runtime.memory import MemoryBatches, MemoryBroker
from mongomem.stages.watcher_checkpoints import WatcherCheckpoint, WatcherCheckpoints
from mongomem.stages.watcher_core import STAGE, WatcherCore
from mongomem.stages.watcher_logic import FlushPolicy, PublishLedger, WatermarkClock
from mongomem.stages.watcher_source import ChangeStreamSource
from mongomem.stm.turns import turn_document

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="w")
TOPIC = KAFKA.topic("turns")
STORED = {"_data": "00"}


class Stream:
    """A change stream that yields the changes it is given, then empty reads."""

    def __init__(self) -> None:
        self.changes: deque[dict[str, Any]] = deque()
        self.resume_token: dict[str, Any] | None = STORED

    async def try_next(self) -> dict[str, Any] | None:
        await asyncio.sleep(0)  # the round trip
        if not self.changes:
            return None
        change = self.changes.popleft()
        self.resume_token = change["_id"]
        return change

    async def close(self) -> None:
        pass


class Turns:
    """The ``turns`` collection as the source uses it: ``watch`` after the stored token."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.database = SimpleNamespace(name="db")
        self.resumed_after: list[object] = []

    async def watch(self, pipeline: object, *, resume_after: object, **options: Any) -> Stream:
        self.resumed_after.append(resume_after)
        return self.stream


class Checkpoints:
    """The checkpoint store: a resume token stored before, and every save kept."""

    def __init__(self) -> None:
        self.saved: list[WatcherCheckpoint] = []

    async def load_token(self) -> dict[str, Any] | None:
        return dict(STORED)

    async def load_marks(self) -> dict[tuple[str, str, str], int]:
        return {}

    async def save(self, checkpoint: WatcherCheckpoint) -> bool:
        self.saved.append(checkpoint)
        return bool(checkpoint.marks or checkpoint.token)

    def tokens(self) -> list[Mapping[str, Any]]:
        return [c.token for c in self.saved if c.token is not None]


def turn(seq: int) -> dict[str, Any]:
    t = Turn(
        turn_id=Turn.make_id("p", "u", "s", seq),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=seq,
        role=Role.USER,
        content=f"turn {seq}",
        created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq),
    )
    return {"_id": {"_data": f"t{seq}"}, "fullDocument": turn_document(t)}


async def _until(check: Callable[[], bool], task: asyncio.Task[None]) -> None:
    for _ in range(4_000):
        if check():
            return
        if task.done():
            await task
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


async def test_the_watcher_core_runs_on_consume_and_stores_a_token_only_after_the_acks() -> None:
    broker = MemoryBroker(partitions=2)
    publisher = broker.publisher()
    stream, checkpoints = Stream(), Checkpoints()
    ledger = PublishLedger()
    source = ChangeStreamSource(
        cast(AsyncCollection[Document], Turns(stream)),
        cast(WatcherCheckpoints, checkpoints),
        ledger,
        read_pipeline=[],
        read_batch=10,
        read_ahead=20,
        poll_s=0.001,
        max_await_ms=1,
        marks_interval_s=0.0,
        idle_probe=False,  # the fake collection has no server behind it
    )
    core = WatcherCore(
        MemoryBatches(publisher, TOPIC, records_per_batch=10),
        PublishedDeadLetters(publisher, KAFKA),
        ledger,
        FlushPolicy(batch_max=10, interval_s=0.01),
        WatermarkClock(lateness=timedelta(seconds=1), interval_s=3600),
    )
    dead_before = DEAD_LETTERS.labels(STAGE)._value.get()
    stop = asyncio.Event()
    await source.open()
    publisher.hold()  # Kafka acknowledges nothing yet
    stream.changes.extend([turn(1), turn(2)])
    task = asyncio.create_task(
        consume(
            source,
            core,
            publisher=publisher,
            kafka=KAFKA,
            stop=stop,
            max_records=10,
            poll_timeout_s=0.01,
            in_flight=8,
        )
    )
    try:
        await _until(lambda: core.published == 2 and publisher.pending >= 1, task)
        await asyncio.sleep(0.05)  # many polls and flush intervals pass
        assert checkpoints.tokens() == []  # nothing acknowledged: no token stored
        publisher.release()
        await _until(lambda: {"_data": "t2"} in checkpoints.tokens(), task)
        junk = {"_id": "x", "seq": "not a number"}
        stream.changes.extend([{"_id": {"_data": "junk"}, "fullDocument": junk}, turn(3)])
        await _until(lambda: {"_data": "t3"} in checkpoints.tokens(), task)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await source.finish()
        await core.close()
        await source.close()
    assert cast(Turns, source._turns).resumed_after == [STORED]  # resumed, no back-fill
    turns = [decode(m.value or b"", Turn) for m in broker.records(TOPIC) if _is_turn(m.value)]
    assert [t.seq for t in turns] == [1, 2, 3]
    letters = broker.records(dead_letter_topic(KAFKA, STAGE))
    assert len(letters) == 1  # once
    letter = decode(letters[0].value or b"", DeadLetter)
    assert letter.source_topic == "mongodb:db.turns"  # the collection, not a topic
    assert b"not a number" in (letter.original_value() or b"")
    assert DEAD_LETTERS.labels(STAGE)._value.get() == dead_before + 1  # and counted
    # Tokens are stored in stream order, the last one that of the last change.
    order = ["t1", "t2", "junk", "t3"]
    tokens = [order.index(t["_data"]) for t in checkpoints.tokens()]
    assert tokens == sorted(set(tokens))
    assert tokens[-1] == order.index("t3")
    assert any(c.marks == {("p", "u", "s"): 3} for c in checkpoints.saved)


def _is_turn(value: bytes | None) -> bool:
    return value is not None and peek_kind(value) == "turn"
