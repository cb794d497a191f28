"""The windowing stage's checkpoints while it drains a backlog: a commit due at the interval
with the partitions behind runs beside the loop (the loop is not held up by the changelog's
acknowledgements), yet nothing is committed before the changelog writes are acknowledged,
one checkpoint runs at a time, and a failed one ends the loop at the next commit."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from mongomem.codec import encode
from mongomem.errors import BrokerError
from mongomem.models import SessionKey, Turn
from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.windowing.consumer import ChangelogCommits, ChangelogTable
from mongomem.stages.windowing.logic import WindowState

SESSION = SessionKey(project_id="p", user_id="u", session_id="s")
KEY = SESSION.kafka_key()


def turn_bytes(seq: int) -> bytes:
    return encode(
        Turn(
            turn_id=Turn.make_id("p", "u", "s", seq),
            project_id="p",
            user_id="u",
            session_id="s",
            seq=seq,
            role="user",
            content=f"turn {seq}",
            created_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seq),
        )
    )


def state(next_seq: int, offset: int) -> WindowState:
    return WindowState(
        project_id="p", user_id="u", session_id="s", next_seq=next_seq, partition=0, offset=offset
    )


def backlog(broker: MemoryBroker, records: int) -> None:
    for seq in range(1, records + 1):
        broker.append("turns", turn_bytes(seq), key=KEY, partition=0)


async def settled(check: object) -> None:
    for _ in range(1_000):
        if callable(check) and check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


async def test_a_checkpoint_due_behind_the_end_does_not_hold_up_the_commit_call() -> None:
    broker = MemoryBroker(partitions=1)
    backlog(broker, 10)
    changelog = broker.publisher()
    table = ChangelogTable(changelog, "changelog", broker)
    commits = ChangelogCommits(broker.source("turns", "g"), table, interval_s=0, ends=lambda p: 10)
    table.put(KEY, state(3, 1))
    changelog.hold()  # the changelog's writes stay unacknowledged

    # behind the end (2 of 10): the commit returns at once, the checkpoint runs beside it
    assert await asyncio.wait_for(commits.commit({0: 2}), 1)
    await settled(lambda: changelog.pending == 1)
    assert broker.committed("g", "turns") == {}, "not before the changelog is acknowledged"

    table.put(KEY, state(5, 3))
    assert await asyncio.wait_for(commits.commit({0: 4}), 1)  # one checkpoint at a time
    assert changelog.pending == 1, "held back: the next checkpoint starts after this one"

    changelog.release()
    await settled(lambda: broker.committed("g", "turns") == {0: 2})
    # the next commit due starts the next checkpoint, with what was held back
    assert await commits.commit({0: 5})
    await settled(lambda: broker.committed("g", "turns") == {0: 5})
    (*_, last) = broker.records("changelog")
    assert last.value is not None
    assert WindowState.model_validate_json(last.value) == state(5, 3)


@pytest.mark.parametrize("caught_up", [True, False])
async def test_caught_up_or_settling_waits_for_the_checkpoint_in_the_background(
    caught_up: bool,
) -> None:
    broker = MemoryBroker(partitions=1)
    backlog(broker, 10)
    changelog = broker.publisher()
    table = ChangelogTable(changelog, "changelog", broker)
    commits = ChangelogCommits(broker.source("turns", "g"), table, interval_s=0, ends=lambda p: 10)
    table.put(KEY, state(3, 1))
    changelog.hold()
    assert await commits.commit({0: 2})  # in the background, unacknowledged
    await settled(lambda: changelog.pending == 1)
    table.put(KEY, state(11, 9))
    if caught_up:
        last = asyncio.create_task(commits.commit({0: 10}))
    else:
        last = asyncio.create_task(commits.commit_pending())  # a revocation, a stop
    await asyncio.sleep(0.02)
    assert not last.done(), "it waits for the changelog"
    assert broker.committed("g", "turns") == {}
    changelog.release()
    await settled(lambda: changelog.pending > 0 or last.done())
    changelog.release()  # the second flush's writes
    assert await asyncio.wait_for(last, 1)
    assert broker.committed("g", "turns") == {0: 10 if caught_up else 2}
    values = [r.value for r in broker.records("changelog")]
    states = [WindowState.model_validate_json(v) for v in values if v is not None]
    assert states == [state(3, 1), state(11, 9)], "one session's states stay in order"


async def test_a_failed_checkpoint_is_raised_by_the_next_commit_and_commits_nothing() -> None:
    broker = MemoryBroker(partitions=1)
    backlog(broker, 10)
    changelog = broker.publisher()
    table = ChangelogTable(changelog, "changelog", broker)
    commits = ChangelogCommits(broker.source("turns", "g"), table, interval_s=0, ends=lambda p: 10)
    table.put(KEY, state(3, 1))
    changelog.fail_next()
    assert await commits.commit({0: 2})
    await asyncio.sleep(0.01)
    with pytest.raises(BrokerError):
        await commits.commit({0: 3})
    assert broker.committed("g", "turns") == {}


async def test_abandon_stops_a_checkpoint_in_the_background() -> None:
    broker = MemoryBroker(partitions=1)
    backlog(broker, 10)
    changelog = broker.publisher()
    table = ChangelogTable(changelog, "changelog", broker)
    commits = ChangelogCommits(broker.source("turns", "g"), table, interval_s=0, ends=lambda p: 10)
    table.put(KEY, state(3, 1))
    changelog.hold()
    assert await commits.commit({0: 2})
    commits.abandon()
    changelog.release()
    await asyncio.sleep(0.02)
    assert broker.committed("g", "turns") == {}, "an abandoned checkpoint commits nothing"
