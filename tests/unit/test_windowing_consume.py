"""The windowing stage's core driven by the runtime's consume() over the in-memory broker:
a batch's offset is committed only after its snapshots were delivered and the changelog
table was flushed — no servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import encode
from mongomem.models import SessionKey, Snapshot, Turn
from mongomem.settings import KafkaSettings, WindowingSettings
from mongomem.stages.runtime import PipelinedStage, RetryPolicy, consume
from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.windowing.consumer import ChangelogCommits, ChangelogTable, WindowingCore
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import Policies, SnapshotWindower

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="wc")
SESSION = SessionKey(project_id="p", user_id="u", session_id="s")


def turn_bytes(seq: int) -> bytes:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq)
    return encode(
        Turn(
            turn_id=Turn.make_id("p", "u", "s", seq),
            project_id="p",
            user_id="u",
            session_id="s",
            seq=seq,
            role="user",
            content=f"turn {seq}",
            created_at=at,
        )
    )


class HeldSink:
    """Delivers snapshots only once :attr:`go` is set."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.delivered: list[Snapshot] = []

    async def deliver(self, snapshot: Snapshot) -> None:
        await self.go.wait()
        self.delivered.append(snapshot)


class Letters:
    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        self.sent.append(letter)


async def _until(check: Callable[[], bool], task: asyncio.Task[None]) -> None:
    for _ in range(4_000):
        if check():
            return
        if task.done():
            await task
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


def test_the_core_is_a_pipelined_stage() -> None:
    broker = MemoryBroker(partitions=1)
    table = ChangelogTable(broker.publisher(), "changelog", broker)
    windower = SnapshotWindower(
        store=table,
        sink=HeldSink(),
        policies=Policies(WindowingSettings()),
        dead_letters=Letters(),
        topic="turns",
    )
    assert isinstance(WindowingCore(windower, table), PipelinedStage)


async def test_commits_follow_the_snapshots_and_the_changelog_flush() -> None:
    broker = MemoryBroker(partitions=1)
    for seq in (1, 2, 3):  # max_messages = 3: the third closes a window
        broker.append("turns", turn_bytes(seq), key=SESSION.kafka_key(), partition=0)
    changelog = broker.publisher()
    table = ChangelogTable(changelog, "changelog", broker)
    sink = HeldSink()
    windower = SnapshotWindower(
        store=table,
        sink=sink,
        policies=Policies(WindowingSettings(max_messages=3, idle_timeout_s=10)),
        dead_letters=Letters(),
        topic="turns",
    )
    core = WindowingCore(windower, table)
    await core.assign([0])
    source = broker.source("turns", "g")
    commits = ChangelogCommits(
        source, table, interval_s=3600, ends=lambda p: broker.end_offsets("turns")[p]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        consume(
            commits,
            core,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=RetryPolicy(base_s=0.001, cap_s=0.002),
            poll_timeout_s=0.005,
            in_flight=2,
        )
    )
    await asyncio.sleep(0.05)
    assert broker.committed("g", "turns") == {}, "the snapshot is not delivered yet"
    assert broker.records("changelog") == []

    changelog.hold()  # the table's writes stay unacknowledged
    sink.go.set()
    await _until(lambda: len(sink.delivered) == 1 and changelog.pending > 0, task)
    await asyncio.sleep(0.05)
    assert broker.committed("g", "turns") == {}, "the changelog is not acknowledged yet"

    changelog.release()
    await _until(lambda: broker.committed("g", "turns") == {0: 3}, task)
    (record,) = broker.records("changelog")
    assert record.key == SESSION.kafka_key()
    assert record.value is not None
    assert WindowState.model_validate_json(record.value).next_seq == 4
    assert [(s.first_seq, s.last_seq) for s in sink.delivered] == [(1, 3)]
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_commits_are_held_back_until_the_interval_unless_caught_up() -> None:
    broker = MemoryBroker(partitions=1)
    table = ChangelogTable(broker.publisher(), "changelog", broker)
    source = broker.source("turns", "g")
    for seq in (1, 2):
        broker.append("turns", turn_bytes(seq), key=SESSION.kafka_key(), partition=0)
    commits = ChangelogCommits(
        source, table, interval_s=3600, ends=lambda p: broker.end_offsets("turns")[p]
    )
    assert await commits.commit({0: 1})
    assert broker.committed("g", "turns") == {}, "not caught up, interval not over: held back"
    assert await commits.commit({0: 2})
    assert broker.committed("g", "turns") == {0: 2}, "caught up: at once"
    broker.append("turns", turn_bytes(3), key=SESSION.kafka_key(), partition=0)
    broker.append("turns", turn_bytes(4), key=SESSION.kafka_key(), partition=0)
    await commits.commit({0: 3})
    assert broker.committed("g", "turns") == {0: 2}
    await commits.commit_pending(only=[0])  # a revocation, a stop: at once
    assert broker.committed("g", "turns") == {0: 3}


async def test_a_revoked_partition_is_not_handled_and_its_table_is_dropped() -> None:
    broker = MemoryBroker(partitions=1)
    table = ChangelogTable(broker.publisher(), "changelog", broker)
    sink = HeldSink()
    sink.go.set()
    windower = SnapshotWindower(
        store=table,
        sink=sink,
        policies=Policies(WindowingSettings(max_messages=3, idle_timeout_s=10)),
        dead_letters=Letters(),
        topic="turns",
    )
    core = WindowingCore(windower, table)
    await core.assign([0])
    record = broker.append("turns", turn_bytes(1), key=SESSION.kafka_key(), partition=0)
    await (await core.submit(0, [record]))
    assert table.get(SESSION.kafka_key()) is not None
    settled: list[list[int]] = []

    async def settle(partitions: list[int]) -> None:
        settled.append(partitions)

    await core.revoke([0], settle)
    assert settled == [[0]]
    assert table.get(SESSION.kafka_key()) is None, "dropped"
    later = broker.append("turns", turn_bytes(2), key=SESSION.kafka_key(), partition=0)
    await (await core.submit(0, [later]))
    assert table.get(SESSION.kafka_key()) is None, "not ours any more: untouched"
