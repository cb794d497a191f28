"""The change-stream watcher against real Kafka and MongoDB-compatible servers (SPEC I1)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError
from pymongo import AsyncMongoClient

import mongomem.stages.watcher
from mongomem.adapters.kafka import (
    DeadLetter,
    dead_letter_topic,
    ensure_topics,
    make_producer,
    pipeline_topics,
)
from mongomem.adapters.mongo import CHECKPOINTS, TURNS, Document
from mongomem.codec import decode, encode, peek_kind
from mongomem.errors import BrokerError
from mongomem.models import Turn, Watermark
from mongomem.settings import Settings, StmSettings
from mongomem.stages.watcher import STAGE, ChangeStreamWatcher
from mongomem.stages.watcher_logic import token_id
from mongomem.stm.turns import ShortTermMemory, session_key

pytestmark = pytest.mark.integration


def is_turn(value: bytes | None) -> bool:
    """Not a watermark (the watcher publishes those into the turns topic too)."""
    return peek_kind(value) != "watermark"


async def read_topic(
    settings: Settings,
    topic: str,
    *,
    until: int,
    timeout_s: float = 30.0,
    keep: Callable[[bytes | None], bool] = lambda _: True,
) -> list[tuple[int, bytes | None]]:
    """(partition, value) of each record ``keep`` accepts, once ``until`` are there (or timeout)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < until and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for tp, records in batch.items():
                out.extend((tp.partition, r.value) for r in records if keep(r.value))
        # Anything beyond ``until`` that is already there (duplicates) counts too.
        batch = await consumer.getmany(timeout_ms=300)
        for tp, records in batch.items():
            out.extend((tp.partition, r.value) for r in records if keep(r.value))
    finally:
        await consumer.stop()
    return out


async def published_turns(settings: Settings, until: int) -> list[tuple[int, Turn]]:
    records = await read_topic(settings, settings.kafka.topic("turns"), until=until, keep=is_turn)
    return [(p, decode(v, Turn)) for p, v in records]


@asynccontextmanager
async def running_watcher(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> AsyncIterator[ChangeStreamWatcher]:
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, [STAGE]))
    producer = make_producer(settings.kafka)
    await producer.start()
    watcher = ChangeStreamWatcher(
        mongo[settings.mongodb.database], producer, settings.kafka, settings.stm
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        yield watcher
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 30)
        finally:
            await producer.stop()


async def wait_published(watcher: ChangeStreamWatcher, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if watcher.published >= count:
            return
        await asyncio.sleep(0.05)
    assert watcher.published >= count


def assert_session_order(records: list[tuple[int, Turn]]) -> None:
    partitions: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    seqs: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for partition, turn in records:
        slot = (turn.project_id, turn.user_id, turn.session_id)
        partitions[slot].add(partition)
        if turn.seq not in seqs[slot]:
            seqs[slot].append(turn.seq)
    for slot, seen in seqs.items():
        assert seen == sorted(seen), f"{slot} out of order: {seen}"
        assert len(partitions[slot]) == 1


async def test_a_caught_up_watcher_puts_a_watermark_behind_the_turns_of_every_partition(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    async with running_watcher(mongo, settings) as watcher:
        while not watcher.streaming:  # noqa: ASYNC110 - a flag of the watcher's own task
            await asyncio.sleep(0.05)
        turns = [
            await stm.record_turn(session_key("p", "u", f"s{i}"), "user", str(i)) for i in range(8)
        ]
        await wait_published(watcher, len(turns))
        watermarks = watcher.watermarks
        while watcher.watermarks == watermarks:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    every = len(turns) + watcher.watermarks * settings.kafka.partitions
    records = await read_topic(settings, settings.kafka.topic("turns"), until=every)
    assert len(records) == every
    lateness = timedelta(seconds=settings.stm.watcher_watermark_lateness_s)
    for partition in range(settings.kafka.partitions):
        mine = [v for p, v in records if p == partition]
        marks = [decode(v, Watermark) for v in mine if not is_turn(v)]
        assert marks, f"no watermark in partition {partition}"
        assert [m.at for m in marks] == sorted(m.at for m in marks), "never back"
        last = marks[-1]
        assert last.caught_up
        # Every turn is ahead of the last watermark, which covers all of them.
        assert not any(is_turn(v) for v in mine[mine.index(encode(last)) :])
        assert last.at >= max(t.created_at for t in turns) - lateness


async def test_concurrent_writers_across_sessions_all_reach_kafka_in_order(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    writers = [ShortTermMemory(db, settings.stm) for _ in range(3)]
    await writers[0].ensure_indexes()
    sessions = [session_key("proj", f"user-{i % 4}", f"s-{i}") for i in range(20)]

    async def write(memory: ShortTermMemory, n: int) -> None:
        for i in range(5):
            for key in sessions[n::3]:
                await memory.record_turn(key, "user", f"turn {i} from writer {n}")

    async with running_watcher(mongo, settings) as watcher:
        await asyncio.gather(*(write(m, n) for n, m in enumerate(writers)))
        in_mongo = {d["_id"] for d in await db[TURNS].find({}, {"_id": 1}).to_list()}
        await wait_published(watcher, len(in_mongo))
    records = await published_turns(settings, len(in_mongo))
    assert {t.turn_id for _, t in records} == in_mongo
    assert len(records) == len(in_mongo)  # no restart, so no duplicate either
    assert_session_order(records)
    checkpoint = await db[CHECKPOINTS].find_one({"_id": token_id(settings.kafka.topic("turns"))})
    assert checkpoint is not None
    assert "_data" in checkpoint["token"]


@pytest.mark.parametrize(
    "bad_token",
    [{"_data": "zz-not-a-token"}, {"format": "from another server"}, "a string"],
    ids=["rejected-by-server", "unknown-format", "not-a-document"],
)
async def test_lost_resume_token_backfills_without_loss(
    mongo: AsyncMongoClient[Document], settings: Settings, bad_token: object
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    a, b = session_key("p", "u", "a"), session_key("p", "u", "b")
    async with running_watcher(mongo, settings) as watcher:
        for i in range(5):
            await stm.record_turn(a, "user", f"a{i}")
        await wait_published(watcher, 5)
    # While the watcher is down: more turns, and its token becomes unusable.
    for i in range(4):
        await stm.record_turn(a, "user", f"a-late{i}")
        await stm.record_turn(b, "user", f"b{i}")
    await db[CHECKPOINTS].update_one(
        {"_id": token_id(settings.kafka.topic("turns"))}, {"$set": {"token": bad_token}}
    )
    async with running_watcher(mongo, settings) as watcher:
        await wait_published(watcher, 8)
        assert watcher.backfills == 1
        await stm.record_turn(b, "user", "after the back-fill")  # streaming again
        await wait_published(watcher, 9)
    records = await published_turns(settings, 14)
    in_mongo = {d["_id"] for d in await db[TURNS].find({}, {"_id": 1}).to_list()}
    assert {t.turn_id for _, t in records} == in_mongo
    # The marks said where each session stood: nothing was published twice.
    assert len(records) == 14
    assert_session_order(records)


async def test_first_start_publishes_turns_written_before_it(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    for i in range(6):
        await stm.record_turn(session_key("p", "u", f"s{i % 2}"), "user", str(i))
    async with running_watcher(mongo, settings) as watcher:
        await wait_published(watcher, 6)
        assert watcher.backfills == 1
    records = await published_turns(settings, 6)
    assert sorted((t.session_id, t.seq) for _, t in records) == [
        ("s0", 1),
        ("s0", 2),
        ("s0", 3),
        ("s1", 1),
        ("s1", 2),
        ("s1", 3),
    ]


async def test_a_document_that_is_not_a_turn_goes_to_the_dead_letter_topic(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    key = session_key("p", "u", "s")
    async with running_watcher(mongo, settings) as watcher:
        await stm.record_turn(key, "user", "before")
        await db[TURNS].insert_one({"_id": "junk", "seq": "not a number"})
        await stm.record_turn(key, "user", "after")
        await wait_published(watcher, 2)
    letters = await read_topic(settings, dead_letter_topic(settings.kafka, STAGE), until=1)
    letter = decode(letters[0][1], DeadLetter)
    assert letter.stage == STAGE
    assert b"not a number" in (letter.original_value() or b"")
    assert [t.content for _, t in await published_turns(settings, 2)] == ["before", "after"]


class RecordedBatch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: None) -> object:
        self.records.append((key, value))
        return object()  # never full


class HeldProducer:
    """A producer whose acknowledgements the test releases (or fails) by hand."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.futures: list[asyncio.Future[None]] = []
        self.released = False

    def release(self) -> None:
        """Acknowledge everything held, and every later send at once."""
        self.released = True
        for future in self.futures:
            if not future.done():
                future.set_result(None)

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    def create_batch(self) -> RecordedBatch:
        return RecordedBatch()

    async def send_batch(
        self, batch: RecordedBatch, topic: str, *, partition: int
    ) -> asyncio.Future[None]:
        for key, value in batch.records:
            self.sent.append((topic, value, key))
        return self._future()

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None
    ) -> asyncio.Future[None]:
        self.sent.append((topic, value, key))
        return self._future()

    def _future(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        if self.released:
            future.set_result(None)
        return future


async def until(condition: Callable[[], bool], task: asyncio.Task[None]) -> None:
    """Wait (at most 20 s) for ``condition``; fail early if the watcher task ended."""
    deadline = time.monotonic() + 20
    while not condition():
        if task.done():
            task.result()  # raises the watcher's error
            pytest.fail("the watcher stopped")
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def stored_token(mongo: AsyncMongoClient[Document], settings: Settings) -> object:
    doc = await mongo[settings.mongodb.database][CHECKPOINTS].find_one(
        {"_id": token_id(settings.kafka.topic("turns"))}
    )
    return None if doc is None else doc["token"]


async def test_the_token_is_stored_only_after_kafka_acknowledged(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    producer = HeldProducer()
    watcher = ChangeStreamWatcher(
        db, cast(AIOKafkaProducer, producer), settings.kafka, settings.stm
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await until(lambda: watcher.streaming, task)  # held acks would block a back-fill
        key = session_key("p", "u", "s")
        for i in range(3):
            await stm.record_turn(key, "user", str(i))
        await until(lambda: len(producer.sent) >= 3, task)
        await asyncio.sleep(0.3)  # several flush intervals pass, acks still held
        assert await stored_token(mongo, settings) is None
        for future in producer.futures:
            future.set_result(None)
        deadline = time.monotonic() + 10
        while await stored_token(mongo, settings) is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert await stored_token(mongo, settings) is not None
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_failed_acknowledgement_stops_the_watcher_without_advancing_the_token(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    producer = HeldProducer()
    watcher = ChangeStreamWatcher(
        db, cast(AIOKafkaProducer, producer), settings.kafka, settings.stm
    )
    task = asyncio.create_task(watcher.run(asyncio.Event()))
    await until(lambda: watcher.streaming, task)
    await stm.record_turn(session_key("p", "u", "s"), "user", "lost in transit")
    await until(lambda: bool(producer.futures), task)
    producer.futures[0].set_exception(KafkaTimeoutError("no ack"))
    with pytest.raises(BrokerError):
        await asyncio.wait_for(task, 10)
    assert await stored_token(mongo, settings) is None


class InstantProducer(HeldProducer):
    """Acknowledges at once; sets ``stop`` after ``limit`` sends."""

    def __init__(self, stop: asyncio.Event, limit: int) -> None:
        super().__init__()
        self.stop, self.limit = stop, limit

    def _future(self) -> asyncio.Future[None]:
        future = super()._future()
        future.set_result(None)
        if len(self.sent) >= self.limit:
            self.stop.set()
        return future


async def test_a_backfill_stopped_midway_stores_no_token_and_resumes_next_time(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    for i in range(30):
        await stm.record_turn(session_key("p", "u", f"s{i % 3}"), "user", str(i))
    stop = asyncio.Event()
    first = InstantProducer(stop, limit=10)
    small = StmSettings(watcher_batch_max=10)  # a flush (and so the stop) after 10 turns
    watcher = ChangeStreamWatcher(db, cast(AIOKafkaProducer, first), settings.kafka, small)
    await asyncio.wait_for(watcher.run(stop), 20)
    assert len(first.sent) == 10
    assert await stored_token(mongo, settings) is None  # the rest of the scan is still owed

    stop = asyncio.Event()
    second = InstantProducer(stop, limit=10**6)
    watcher = ChangeStreamWatcher(db, cast(AIOKafkaProducer, second), settings.kafka, settings.stm)
    task = asyncio.create_task(watcher.run(stop))
    await until(lambda: watcher.streaming, task)
    stop.set()
    await asyncio.wait_for(task, 20)
    sent = [decode(v, Turn).turn_id for _, v, _ in first.sent + second.sent if is_turn(v)]
    in_mongo = {d["_id"] for d in await db[TURNS].find({}, {"_id": 1}).to_list()}
    assert set(sent) == in_mongo
    assert len(sent) == 30  # the marks of the first run spared its 10 turns


async def test_a_backlog_waits_in_the_open_batches_while_the_previous_flush_is_unacknowledged(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    for i in range(60):
        await stm.record_turn(session_key("p", "u", f"s{i % 3}"), "user", str(i))
    producer = HeldProducer()
    small = StmSettings(watcher_batch_max=10)
    watcher = ChangeStreamWatcher(db, cast(AIOKafkaProducer, producer), settings.kafka, small)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))  # no token: a back-fill of all 60
    try:
        await until(lambda: len(producer.sent) == 60, task)  # the scan's end flushes the rest
        # Held acks: the first flush of 10, then the other 50 in one flush, at
        # most one batch per partition each — not six flushes of 10.
        assert len(producer.futures) <= 2 * 3
        producer.release()  # and the watermarks that streaming adds
        await until(lambda: watcher.streaming, task)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert watcher.published == 60


class MarksHeld:
    """The watcher's ``checkpoints`` collection, with every write that holds marks held back."""

    def __init__(self, collection: Any, token: str) -> None:
        self._collection = collection
        self._token = token
        self.release = asyncio.Event()
        self.held = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def bulk_write(self, writes: list[Any], **options: Any) -> Any:
        if any(write._filter["_id"] != self._token for write in writes):  # a mark among them
            self.held += 1
            await self.release.wait()
        return await self._collection.bulk_write(writes, **options)


async def test_a_slow_marks_write_does_not_hold_the_tokens_up(
    mongo: AsyncMongoClient[Document], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        mongomem.stages.watcher, "MARKS_INTERVAL_S", 0.0
    )  # marks due at every commit
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, [STAGE]))
    producer = make_producer(settings.kafka)
    await producer.start()
    watcher = ChangeStreamWatcher(db, producer, settings.kafka, settings.stm)
    store = watcher._checkpoint_store  # the watcher's CheckpointStore, on a held collection
    checkpoints = MarksHeld(store._checkpoints, token_id(topic))
    store._checkpoints = cast(Any, checkpoints)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await until(lambda: watcher.streaming, task)
        await stm.record_turn(session_key("p", "u", "a"), "user", "first")
        await until(lambda: checkpoints.held == 1, task)  # its marks wait …
        deadline = time.monotonic() + 20
        while (first := await stored_token(mongo, settings)) is None:  # … its token does not
            assert time.monotonic() < deadline, "the token waited for the marks"
            await asyncio.sleep(0.02)
        for i in range(3):
            await stm.record_turn(session_key("p", "u", "b"), "user", str(i))
        await until(lambda: watcher.published == 4, task)
        deadline = time.monotonic() + 20
        while await stored_token(mongo, settings) == first:
            assert time.monotonic() < deadline, "the token waited for the marks"
            await asyncio.sleep(0.02)
        assert checkpoints.held == 1  # one marks write at a time: still the first
        assert await db[CHECKPOINTS].count_documents({"kind": "watcher-mark"}) == 0
    finally:
        checkpoints.release.set()
        stop.set()
        await asyncio.wait_for(task, 30)
        await producer.stop()
    marks = {
        doc["session_id"]: doc["seq"]
        async for doc in db[CHECKPOINTS].find({"kind": "watcher-mark", "topic": topic})
    }
    assert marks == {"a": 1, "b": 3}  # the stop wrote every mark
