"""Short-term memory against the real MongoDB-compatible server (SPEC A1–A3)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.errors import InputError
from mongomem.models import Role, SessionKey, Turn
from mongomem.mongo import TURNS, Document
from mongomem.settings import Settings, StmSettings
from mongomem.stm import SESSION_SEQ_INDEX, ShortTermMemory, session_key

pytestmark = pytest.mark.integration


@pytest.fixture
async def stm(mongo: AsyncMongoClient[Document], settings: Settings) -> ShortTermMemory:
    memory = ShortTermMemory(mongo[settings.mongodb.database], settings.stm)
    await memory.ensure_indexes()
    return memory


KEY = SessionKey(project_id="proj", user_id="user_1", session_id="thread_123")


async def test_record_then_read_in_order(stm: ShortTermMemory) -> None:
    written = [
        await stm.record_turn(KEY, Role.USER, "Book me a flight to Lisbon."),
        await stm.record_turn(KEY, "assistant", "Which dates?", {"tool_calls": [1, 2]}),
        await stm.record_turn(KEY, "user", "June 3rd.", {"lang": "en", "n": 1.5}),
    ]
    assert [t.seq for t in written] == [1, 2, 3]
    assert written[0].turn_id == Turn.make_id("proj", "user_1", "thread_123", 1)
    assert await stm.recent_turns(KEY) == written
    assert await stm.recent_turns(KEY, limit=2) == written[1:]
    assert written[1].metadata == {"tool_calls": [1, 2]}


async def test_list_sessions_most_recent_first(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    def clock() -> datetime:
        now[0] += timedelta(seconds=1)
        return now[0]

    stm = ShortTermMemory(mongo[settings.mongodb.database], settings.stm, clock=clock)
    a = session_key("proj", "u", "a")
    b = session_key("proj", "u", "b")
    for _ in range(3):
        await stm.record_turn(a, "user", "hi")
    await stm.record_turn(b, "user", "hello")
    await stm.record_turn(session_key("proj", "other-user", "c"), "user", "not mine")
    sessions = await stm.list_sessions("proj", "u")
    assert [(s.session_id, s.turn_count, s.last_seq) for s in sessions] == [
        ("b", 1, 1),
        ("a", 3, 3),
    ]
    assert sessions[0].last_activity == datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)
    assert [s.session_id for s in await stm.list_sessions("proj", "u", limit=1)] == ["b"]


async def test_many_concurrent_writers_to_one_session_get_gap_free_seqs(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    # Four "processes" (independent instances, no shared cache or lock), each with
    # ten concurrent writers: conflicts are resolved only by the unique index.
    memories = [ShortTermMemory(db, settings.stm) for _ in range(4)]
    await memories[0].ensure_indexes()

    async def writer(memory: ShortTermMemory, name: str) -> list[int]:
        return [(await memory.record_turn(KEY, "user", f"{name}-{i}")).seq for i in range(5)]

    results = await asyncio.gather(
        *(writer(m, f"w{j}-{k}") for j, m in enumerate(memories) for k in range(10))
    )
    seqs = sorted(s for r in results for s in r)
    assert seqs == list(range(1, 201))
    for r in results:  # each writer's own turns got increasing numbers
        assert r == sorted(r)
    stored = await db[TURNS].find({}, {"seq": 1, "content": 1}).to_list()
    assert sorted(d["seq"] for d in stored) == seqs
    assert len({d["content"] for d in stored}) == 200  # no turn stored twice


async def test_stale_cache_is_only_a_hint(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    first, second = ShortTermMemory(db), ShortTermMemory(db)
    await first.ensure_indexes()
    await first.record_turn(KEY, "user", "1")
    await second.record_turn(KEY, "user", "2")
    await second.record_turn(KEY, "user", "3")
    turn = await first.record_turn(KEY, "user", "4")  # first's cache says 1
    assert turn.seq == 4


async def test_a_session_end_takes_a_seq_among_concurrent_writers_and_is_no_turn(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    first, second = ShortTermMemory(db), ShortTermMemory(db)
    await first.ensure_indexes()
    await first.record_turn(KEY, "user", "1")
    await second.record_turn(KEY, "user", "2")
    end = await first.end_session(KEY)  # first's cache says 1: seq 2 is taken
    assert end.seq == 3
    writes = [second.record_turn(KEY, "user", f"w{i}") for i in range(5)]
    ends = [first.end_session(KEY) for _ in range(2)]
    await asyncio.gather(*writes, *ends)
    stored = sorted([d["seq"] async for d in db[TURNS].find({})])
    assert stored == list(range(1, 11)), "turns and ends share one gap-free numbering"
    turns = await second.recent_turns(KEY, 100)
    assert len(turns) == 7
    assert all(t.content for t in turns)
    assert (await second.list_sessions(KEY.project_id, KEY.user_id))[0].turn_count == 7


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.record_turn(KEY, "robot", "x"), "role"),
        (lambda s: s.record_turn(KEY, "user", "x" * 2049), "content"),
        (lambda s: s.record_turn(KEY, "user", "\ud800"), "content"),
        (lambda s: s.record_turn(KEY, "user", "x", {"$where": 1}), "metadata"),
        (lambda s: s.record_turn(KEY, "user", "x", {"a": object()}), "metadata"),
        (lambda s: s.record_turn(KEY, "user", "x", {"a": float("nan")}), "metadata"),
        (lambda s: s.record_turn(KEY, "user", "x", {"a": "y" * 600}), "metadata"),
        (
            lambda s: s.record_turn(
                SessionKey.model_construct(project_id="p", user_id="", session_id="s"), "user", "x"
            ),
            "user_id",
        ),
        (
            lambda s: s.record_turn(
                SessionKey.model_construct(project_id="$p", user_id="u", session_id="s"),
                "user",
                "x",
            ),
            "project_id",
        ),
        (
            lambda s: s.record_turn(
                SessionKey.model_construct(project_id="p", user_id="u", session_id="a\x00b"),
                "user",
                "x",
            ),
            "session_id",
        ),
    ],
)
async def test_bad_input_names_the_field_and_stores_nothing(
    mongo: AsyncMongoClient[Document], settings: Settings, call: object, field: str
) -> None:
    limits = StmSettings(max_content_bytes=2048, max_metadata_bytes=512)
    stm = ShortTermMemory(mongo[settings.mongodb.database], limits)
    await stm.ensure_indexes()
    with pytest.raises(InputError) as caught:
        await call(stm)  # type: ignore[operator]
    assert caught.value.field == field
    assert await mongo[settings.mongodb.database][TURNS].count_documents({}) == 0
    # The session still starts at 1 afterwards: no number was used up.
    assert (await stm.record_turn(KEY, "user", "ok")).seq == 1


async def test_unique_index_exists(
    stm: ShortTermMemory, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    info = await mongo[settings.mongodb.database][TURNS].index_information()
    assert info[SESSION_SEQ_INDEX]["unique"] is True
