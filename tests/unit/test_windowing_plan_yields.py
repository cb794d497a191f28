"""Planning a batch lets the event loop run between slices of records (issue 28, P3).

A batch's planning is CPU only; while it runs, the deliveries in flight cannot
read their replies. So the windower yields every ``PLAN_SLICE`` records, and
what it plans is the same as without yielding.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import mongomem.stages.windowing.windower as windower_module
from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import encode
from mongomem.models import SessionKey, Snapshot, Turn
from mongomem.settings import WindowingSettings
from mongomem.stages.windowing.ports import DictWindowStore, Policies
from mongomem.stages.windowing.windower import PLAN_SLICE, Record, SnapshotWindower

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SESSIONS = [SessionKey(project_id="p", user_id="u", session_id=f"s{i}") for i in range(10)]


def turns(count: int) -> list[Record]:
    records: list[Record] = []
    for i in range(count):
        session, seq = SESSIONS[i % len(SESSIONS)], i // len(SESSIONS) + 1
        turn = Turn(
            turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
            project_id=session.project_id,
            user_id=session.user_id,
            session_id=session.session_id,
            seq=seq,
            role="user",
            content=f"#{i}",
            created_at=T0 + timedelta(seconds=i),
        )
        records.append((i, session.kafka_key(), encode(turn)))
    return records


class Sink:
    async def deliver(self, snapshot: Snapshot) -> None:
        raise AssertionError("planning delivers nothing")


class Letters:
    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        raise AssertionError(f"nothing should be dead-lettered: {letter}")


def windower() -> SnapshotWindower:
    return SnapshotWindower(
        store=DictWindowStore(),
        sink=Sink(),
        policies=Policies(WindowingSettings(max_messages=5, idle_timeout_s=3600)),
        dead_letters=Letters(),
        topic="turns",
    )


async def test_planning_a_large_batch_lets_other_tasks_run() -> None:
    records = turns(3 * PLAN_SLICE)
    ran = 0
    planning = True

    async def other() -> None:
        nonlocal ran
        while planning:
            ran += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)  # started: it ran once
    started = ran
    try:
        planned = await windower().plan_batch(0, records)
    finally:
        planning = False
        await task
    assert planned.failed is None
    # decoding and planning each yield every PLAN_SLICE records: at least four times here
    assert ran - started >= 4, "the event loop ran nothing while the batch was planned"


async def test_yielding_plans_what_planning_at_once_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    records = turns(3 * PLAN_SLICE + 7)
    sliced = await windower().plan_batch(0, records)
    monkeypatch.setattr(windower_module, "PLAN_SLICE", 10**9)
    at_once = await windower().plan_batch(0, records)
    assert [s for _, s in sliced.snapshots] == [s for _, s in at_once.snapshots]
    per_session = [len(range(i, len(records), len(SESSIONS))) for i in range(len(SESSIONS))]
    assert len(sliced.snapshots) == sum(n // 5 for n in per_session)  # every full window of 5
    assert {k: o.window.state(offset=o.offset) for k, o in sliced.windows.items()} == {
        k: o.window.state(offset=o.offset) for k, o in at_once.windows.items()
    }
