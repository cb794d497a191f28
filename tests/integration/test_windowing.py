"""The windowing stage on real Kafka and MongoDB (SPEC B1–B4).

Count and idle closes, a SIGKILLed worker process restarted mid-session, and
a replay from offset 0 in a new consumer group.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import dead_letter_topic, ensure_topics, make_producer
from mongomem.adapters.mongo import SNAPSHOTS, TURNS, Document
from mongomem.codec import encode
from mongomem.errors import StorageError
from mongomem.local.infra import free_port
from mongomem.models import SessionKey, Snapshot, Turn, utcnow
from mongomem.operations.status import group_lag
from mongomem.settings import MongoSettings, Settings, WindowingSettings
from mongomem.stages.runtime.kafka import KafkaPartitionReader, KafkaPublisher
from mongomem.stages.windowing import WindowingWorker
from mongomem.stages.windowing.consumer import ChangelogTable
from mongomem.stm.lineage import snapshot_holding
from mongomem.testing.watermarks import InFlight, watermarks_every

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def with_windows(settings: Settings, **values: Any) -> Settings:
    return settings.model_copy(update={"windowing": WindowingSettings(**values)})


def make_turn(session: SessionKey, seq: int, at_offset_s: float = 0.0) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user" if seq % 2 else "assistant",
        content=f"{session.session_id} says {seq}",
        created_at=utcnow() + timedelta(seconds=at_offset_s),
    )


class Turns:
    """Writes turns as the watcher would: into ``turns`` (MongoDB) and onto the turns topic.

    Each send is in :attr:`in_flight`, which the writer's watermarks follow
    (:func:`turn_writer`): a watermark comes after every turn created before it.
    """

    def __init__(self, settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
        self.settings = settings
        self.coll = mongo[settings.mongodb.database][TURNS]
        self.producer: AIOKafkaProducer = make_producer(settings.kafka)
        self.in_flight = InFlight()

    async def send(self, turn: Turn, *, store: bool = True) -> int:
        """Write ``turn``; returns the partition it went to."""
        with self.in_flight.sending(turn.created_at):
            return await self._send(turn, store=store)

    async def _send(self, turn: Turn, *, store: bool) -> int:
        if store:
            doc = {"_id": turn.turn_id, **turn.model_dump(mode="python", exclude={"turn_id"})}
            doc["role"] = str(doc["role"])
            await self.coll.replace_one({"_id": turn.turn_id}, doc, upsert=True)
        sent = await self.producer.send_and_wait(
            self.settings.kafka.topic("turns"), encode(turn), key=turn.session.kafka_key()
        )
        return int(sent.partition)


#: How often the test writer publishes a watermark, as a caught-up watcher would.
WATERMARK_S = 0.3


@contextlib.asynccontextmanager
async def turn_writer(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[Turns]:
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, [topic])
    turns = Turns(settings, mongo)
    await turns.producer.start()
    try:
        async with watermarks_every(turns.producer, topic, WATERMARK_S, turns.in_flight):
            yield turns
    finally:
        await turns.producer.stop()


@contextlib.asynccontextmanager
async def running(settings: Settings, **kwargs: Any) -> AsyncIterator[WindowingWorker]:
    worker = WindowingWorker(settings, **kwargs)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            while not worker.started.is_set():
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield worker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Callable[[], Any], within: float) -> Any:
    """Await ``check()`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.1)


async def stored(mongo: AsyncMongoClient[Document], settings: Settings) -> list[Document]:
    coll = mongo[settings.mongodb.database][SNAPSHOTS]
    return [d async for d in coll.find({}).sort([("session_id", 1), ("first_seq", 1)])]


async def at_least(
    mongo: AsyncMongoClient[Document], settings: Settings, count: int
) -> list[Document] | None:
    docs = await stored(mongo, settings)
    return docs if len(docs) >= count else None


def spans(docs: list[Document]) -> list[tuple[str, int, int, str]]:
    return [(d["session_id"], d["first_seq"], d["last_seq"], d["reason"]) for d in docs]


@pytest.mark.parametrize("engine", ["aiokafka", "faust"])
async def test_a_window_closes_on_count(
    engine: Literal["aiokafka", "faust"], settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = with_windows(settings, max_messages=3, idle_timeout_s=120)
    a = SessionKey(project_id="p", user_id="u", session_id="a")
    published: list[Snapshot] = []
    async with (
        turn_writer(settings, mongo) as writer,
        running(settings, on_snapshot=published.append, engine=engine),
    ):
        for seq in range(1, 8):
            await writer.send(make_turn(a, seq))
        docs = await eventually(lambda: at_least(mongo, settings, 2), within=30)
        await eventually(lambda: len(published) >= 2, within=30)  # called after the publish ack
    assert spans(docs) == [("a", 1, 3, "count"), ("a", 4, 6, "count")]
    assert docs[0]["_id"] == Snapshot.make_id(a, 1, 3)
    assert [t["seq"] for t in docs[1]["turns"]] == [4, 5, 6]
    assert [s.snapshot_id for s in published] == [d["_id"] for d in docs]
    db = mongo[settings.mongodb.database]
    lineage = {seq: await snapshot_holding(db, a, seq) for seq in range(1, 8)}
    first, second = docs[0]["_id"], docs[1]["_id"]
    assert lineage == {1: first, 2: first, 3: first, 4: second, 5: second, 6: second, 7: None}
    stored = [t async for t in db[TURNS].find({})]
    assert len(stored) == 7
    assert not any("snapshot_id" in t for t in stored), "lineage costs no write to the turns"


async def test_an_idle_session_closes_at_the_first_watermark_past_its_idle_timeout(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """An idle session is closed in the background by the periodic watermark (SPEC B1, B3)."""
    idle, tick = 1.5, WATERMARK_S
    settings = with_windows(settings, max_messages=50, idle_timeout_s=idle)
    b = SessionKey(project_id="p", user_id="u", session_id="b")
    closed: list[tuple[Snapshot, float]] = []
    async with (
        turn_writer(settings, mongo) as writer,
        running(settings, on_snapshot=lambda s: closed.append((s, time.time()))),
    ):
        for seq in (1, 2):
            last = make_turn(b, seq)
            await writer.send(last)
        await eventually(lambda: closed, within=idle + tick + 10)
    snapshot, seen_at = closed[0]
    assert (snapshot.first_seq, snapshot.last_seq, snapshot.reason) == (1, 2, "idle")
    delay = seen_at - last.created_at.timestamp()
    assert idle <= delay <= idle + tick + 1.0, f"closed {delay:.2f} s after the last turn"
    assert snapshot.closed_at == last.created_at + timedelta(seconds=idle)


def spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "mongomem.cli", "run", "windowing"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.parametrize(
    "settle_s",
    [0.0, 2.5],
    ids=["kill-at-once", "kill-after-commit"],  # after a commit, only the changelog has 6 and 7
)
async def test_a_worker_killed_mid_session_recovers_its_state(
    settle_s: float,
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    settings = with_windows(settings, max_messages=5, idle_timeout_s=600)
    env = {
        **subprocess_env,
        "MONGOMEM_WINDOW_MAX_MESSAGES": "5",
        "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "600",
    }
    sessions = [SessionKey(project_id="p", user_id="u", session_id=s) for s in ("c", "d")]
    log = tmp_path / "windowing.log"

    async with turn_writer(settings, mongo) as writer:
        worker = spawn(env, log)
        try:
            for seq in range(1, 8):
                for session in sessions:
                    await writer.send(make_turn(session, seq))
            await eventually(lambda: at_least(mongo, settings, 2), within=60)
            await asyncio.sleep(settle_s)
            worker.send_signal(signal.SIGKILL)  # turns 6 and 7 are mid-window
            worker.wait(10)
            for seq in range(8, 13):
                for session in sessions:
                    await writer.send(make_turn(session, seq))
            worker = spawn(env, log)
            try:
                await eventually(lambda: at_least(mongo, settings, 4), within=90)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; worker log:\n{log.read_text()[-8000:]}") from exc
            await asyncio.sleep(2)  # time for a wrong extra snapshot to show up
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
    docs = await stored(mongo, settings)
    expected = [(s, first, last, "count") for s in ("c", "d") for first, last in ((1, 5), (6, 10))]
    assert spans(docs) == expected, log.read_text()[-3000:]
    for doc in docs:
        assert [t["seq"] for t in doc["turns"]] == list(
            range(doc["first_seq"], doc["last_seq"] + 1)
        )
    assert worker.returncode == 0, log.read_text()[-3000:]


async def test_a_replay_from_offset_zero_in_a_new_group_adds_no_snapshot(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = with_windows(settings, max_messages=3, idle_timeout_s=1.0)
    sessions = [SessionKey(project_id="p", user_id=f"u{i}", session_id=f"s{i}") for i in range(4)]
    live: list[Snapshot] = []
    async with turn_writer(settings, mongo) as writer, running(settings, on_snapshot=live.append):
        for seq in range(1, 6):
            for session in sessions:
                await writer.send(make_turn(session, seq))
            if seq == 2:
                await asyncio.sleep(1.6)  # an idle close between seq 2 and 3
        await eventually(lambda: sum(s.last_seq == 5 for s in live) == len(sessions), within=30)
    before = await stored(mongo, settings)
    assert {(d["first_seq"], d["last_seq"]) for d in before} == {(1, 2), (3, 5)}
    assert len(before) == 2 * len(sessions)

    replayed: list[Snapshot] = []
    async with running(settings, group_suffix=".replay-1", on_snapshot=replayed.append):
        await eventually(lambda: len(replayed) >= len(live), within=60)
        await asyncio.sleep(1.0)
    after = await stored(mongo, settings)
    assert after == before, "same ids, same turns, same close times: no new documents"
    assert sorted(s.snapshot_id for s in replayed) == sorted(s.snapshot_id for s in live)
    assert {s.snapshot_id: s for s in replayed} == {s.snapshot_id: s for s in live}


async def test_a_gap_closes_with_what_is_there_and_poison_goes_to_the_dead_letter_topic(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = with_windows(settings, max_messages=10, idle_timeout_s=1.0)
    e = SessionKey(project_id="p", user_id="u", session_id="e")
    turns_topic = settings.kafka.topic("turns")
    async with turn_writer(settings, mongo) as writer, running(settings) as worker:
        await writer.producer.send_and_wait(turns_topic, b"\xffnot an envelope", key=b"junk")
        for seq in (1, 2, 4, 5):  # seq 3 was allocated by a writer that died
            await writer.send(make_turn(e, seq))
        docs = await eventually(lambda: at_least(mongo, settings, 2), within=30)
        windower = worker.windower
        assert windower is not None
        # A snapshot is stored before its batch's counters are (the batch is applied then).
        await eventually(lambda: windower.stats.lost and windower.stats.dead_letters, within=10)
        assert windower.stats.lost == 1
        assert windower.stats.dead_letters == 1
    assert spans(docs) == [("e", 1, 2, "gap"), ("e", 4, 5, "idle")]
    letters = await group_lag(
        settings.kafka, "nobody", dead_letter_topic(settings.kafka, "windowing")
    )
    assert letters.end == 1


async def test_windows_survive_rebalances_between_two_workers(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    settings = with_windows(settings, max_messages=5, idle_timeout_s=600)
    env = {
        **subprocess_env,
        "MONGOMEM_WINDOW_MAX_MESSAGES": "5",
        "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "600",
    }
    names = [f"r{i}" for i in range(6)]  # spread over the 3 partitions
    sessions = [SessionKey(project_id="p", user_id="u", session_id=s) for s in names]
    logs = [tmp_path / "first.log", tmp_path / "second.log"]

    async def send(seqs: range) -> None:
        for seq in seqs:
            for session in sessions:
                await writer.send(make_turn(session, seq))

    async with turn_writer(settings, mongo) as writer:
        first = spawn(env, logs[0])
        second: subprocess.Popen[bytes] | None = None
        try:
            await send(range(1, 8))
            await eventually(lambda: at_least(mongo, settings, 6), within=60)
            second = spawn(env, logs[1])  # joins the group: partitions and their windows move
            await eventually(lambda: "running as" in logs[1].read_text(), within=60)
            await send(range(8, 13))
            await eventually(lambda: at_least(mongo, settings, 12), within=60)
            first.send_signal(signal.SIGTERM)  # leaves: everything moves to the second
            first.wait(30)
            await send(range(13, 18))
            await eventually(lambda: at_least(mongo, settings, 18), within=60)
            await asyncio.sleep(1)
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    docs = await stored(mongo, settings)
    ranges = ((1, 5), (6, 10), (11, 15))
    expected = [(s, first_seq, last_seq, "count") for s in names for first_seq, last_seq in ranges]
    assert spans(docs) == expected, logs[1].read_text()[-3000:]
    assert first.returncode == 0


async def test_a_record_that_keeps_failing_stops_the_stage_unacknowledged(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = with_windows(settings, max_messages=1, idle_timeout_s=600)
    nowhere = settings.model_copy(
        update={
            "mongodb": MongoSettings(
                uri=f"mongodb://127.0.0.1:{free_port()}/?directConnection=true",
                database=settings.mongodb.database,
                server_selection_timeout_s=0.3,
            )
        }
    )
    f = SessionKey(project_id="p", user_id="u", session_id="f")
    async with turn_writer(settings, mongo) as writer:
        partition = await writer.send(make_turn(f, 1))
        worker = WindowingWorker(nowhere)
        with pytest.raises(StorageError):
            await asyncio.wait_for(worker.run(), 60)
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(worker.group)
        finally:
            await admin.close()
        committed = offsets.get(TopicPartition(settings.kafka.topic("turns"), partition))
        assert committed is None or committed.offset <= 0, "the failing turn was not acknowledged"
        async with running(settings):  # MongoDB is back: the turn is processed after all
            docs = await eventually(lambda: at_least(mongo, settings, 1), within=30)
    assert spans(docs) == [("f", 1, 1, "count")]


async def test_a_quiet_session_leaves_the_table_and_resumes_after_its_last_snapshot(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """State TTL: the session's changelog entry is tombstoned; MongoDB says where it resumes."""
    settings = with_windows(settings, max_messages=10, idle_timeout_s=0.5, state_ttl_s=2.0)
    a = SessionKey(project_id="p", user_id="u", session_id="quiet")
    async with turn_writer(settings, mongo) as writer, running(settings) as worker:
        changelog = f"{worker.group}-windows-changelog"

        async def in_changelog() -> bool:
            """Whether a table restored from the changelog (as after a restart) has ``a``."""
            table = ChangelogTable(
                KafkaPublisher(writer.producer), changelog, KafkaPartitionReader(settings.kafka)
            )
            await table.restore(range(settings.kafka.partitions))
            return table.get(a.kafka_key()) is not None

        for seq in (1, 2):
            await writer.send(make_turn(a, seq))
        await eventually(lambda: at_least(mongo, settings, 1), within=30)
        await eventually(in_changelog, within=30)
        windower = worker.windower
        assert windower is not None
        await eventually(lambda: windower.stats.retired >= 1, within=30)
        assert windower.store.get(a.kafka_key()) is None
        await eventually(lambda: not_(in_changelog), within=30)  # the tombstone
        for seq in (3, 4):
            await writer.send(make_turn(a, seq))
        docs = await eventually(lambda: at_least(mongo, settings, 2), within=30)
        await eventually(lambda: windower.stats.resumed >= 1, within=10)
        assert windower.stats.lost == 0
    assert spans(docs) == [("quiet", 1, 2, "idle"), ("quiet", 3, 4, "idle")]


async def not_(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()
