"""How the windowing stage delivers a batch's snapshots on the real servers: the upserts go
out as several bulk writes side by side (one large write is applied in series), and the
erasure register (SPEC J3) that the windower and the sink share relies on a "not erased"
answer for a short while instead of reading it for every batch and every delivery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import SNAPSHOTS, Document, database
from mongomem.erasure.register import ERASURES, NOT_ERASED_TTL_S, ErasureRegister, erasure_id
from mongomem.models import Role, SessionKey, Snapshot, SnapshotTurn, Turn
from mongomem.settings import Settings
from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.windowing.sinks import UPSERTS_PER_WRITE, SnapshotPublisher
from mongomem.stages.windowing.worker import ERASED_CHECK_TTL_S, stage_register

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def session(i: int) -> SessionKey:
    return SessionKey(project_id="p", user_id=f"u{i}", session_id="s")


def snapshot(key: SessionKey, first: int = 1, last: int = 2) -> Snapshot:
    turns = tuple(
        SnapshotTurn(
            turn_id=Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
            seq=seq,
            role=Role.USER,
            content=f"turn {seq} of {key.user_id}",
            created_at=T0 + timedelta(seconds=seq),
        )
        for seq in range(first, last + 1)
    )
    return Snapshot(
        snapshot_id=Snapshot.make_id(key, first, last),
        project_id=key.project_id,
        user_id=key.user_id,
        session_id=key.session_id,
        first_seq=first,
        last_seq=last,
        turns=turns,
        reason="count",
        closed_at=T0 + timedelta(minutes=1),
    )


async def erase_session(db: Any, key: SessionKey) -> None:
    await db[ERASURES].insert_one(
        {"_id": erasure_id(key.project_id, key.user_id, key.session_id), "state": "running"}
    )


async def test_a_remembering_register_answers_a_batch_of_sessions_without_a_read_for_its_ttl(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = database(mongo, settings.mongodb)
    remembering = ErasureRegister(db, remember_absent=True, absent_ttl_s=0.3)
    reading = ErasureRegister(db)
    a, b, c = session(1), session(2), session(3)
    assert await remembering.erased_among([a, b]) == set()
    await erase_session(db, a)

    assert await reading.erased_among([a, b]) == {a}, "a register that does not remember reads"
    started = time.monotonic()
    answer = await remembering.erased_among([a, b])
    if time.monotonic() - started < 0.25:  # (a slow machine may have let the answers expire)
        assert answer == set(), "answered from memory: no read"
    await erase_session(db, c)
    assert await remembering.erased_among([b, c]) == {c}, "a session not asked before is read"

    await asyncio.sleep(0.35)
    assert await remembering.erased_among([a, b]) == {a}, "expired: read again"
    await db[ERASURES].delete_many({})
    assert await remembering.erased_among([a, c]) == {a, c}, "an erasure is never undone"


async def test_a_register_keeps_no_answer_longer_than_an_erasure_allows(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = database(mongo, settings.mongodb)
    greedy = ErasureRegister(db, remember_absent=True, absent_ttl_s=60)
    a = session(1)
    assert await greedy.erased_among([a]) == set()
    await erase_session(db, a)
    await asyncio.sleep(NOT_ERASED_TTL_S + 0.05)
    assert await greedy.erased_among([a]) == {a}, "capped at NOT_ERASED_TTL_S"


async def test_the_stages_register_relies_on_an_answer_for_half_of_what_an_erasure_allows(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    assert ERASED_CHECK_TTL_S <= NOT_ERASED_TTL_S / 2
    register = stage_register(database(mongo, settings.mongodb))
    a = session(1)
    assert await register.erased_among([a]) == set()
    assert register.remembered(a.project_id, a.user_id, a.session_id) is False
    await asyncio.sleep(ERASED_CHECK_TTL_S + 0.05)
    assert register.remembered(a.project_id, a.user_id, a.session_id) is None


class Recorded:
    """The ``snapshots`` collection, recording each bulk write: its size, start and end."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection
        self.writes: list[tuple[int, float, float]] = []

    async def bulk_write(self, requests: Sequence[Any], **options: Any) -> Any:
        started = time.monotonic()
        try:
            return await self._collection.bulk_write(requests, **options)
        finally:
            self.writes.append((len(requests), started, time.monotonic()))


class OneCollection:
    def __init__(self, collection: Recorded) -> None:
        self._collection = collection

    def __getitem__(self, name: str) -> Recorded:
        assert name == SNAPSHOTS
        return self._collection


async def test_a_deliverys_upserts_go_out_as_bulk_writes_side_by_side(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = database(mongo, settings.mongodb)
    recorded = Recorded(db[SNAPSHOTS])
    broker = MemoryBroker(partitions=3)
    sink = SnapshotPublisher(
        OneCollection(recorded),  # type: ignore[arg-type]
        broker.publisher(),
        "snapshots",
        erasures=stage_register(db),
    )
    count = 2 * UPSERTS_PER_WRITE + 6
    snapshots = [snapshot(session(i)) for i in range(count)]
    await erase_session(db, session(0))
    await sink.deliver_many(snapshots)

    # the erased session's is left out first: 2 × 32 + 5
    assert sorted(n for n, _, _ in recorded.writes) == [5, UPSERTS_PER_WRITE, UPSERTS_PER_WRITE]
    last_start = max(start for _, start, _ in recorded.writes)
    first_end = min(end for _, _, end in recorded.writes)
    assert last_start <= first_end, "every write was sent before any was answered"
    stored = {d["_id"] for d in await db[SNAPSHOTS].find({}, {"_id": 1}).to_list()}
    assert stored == {s.snapshot_id for s in snapshots[1:]}, "the erased session's left out"
    published = {r.key for r in broker.records("snapshots")}
    assert published == {s.session.kafka_key() for s in snapshots[1:]}

    await sink.deliver_many(snapshots[1:])  # a redelivery rewrites the same documents
    assert await db[SNAPSHOTS].count_documents({}) == count - 1
