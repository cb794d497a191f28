"""Short-term memory against the real MongoDB-compatible server (SPEC A1–A3)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongomem.adapters.mongo import TURNS, Document, connect, database
from mongomem.erasure import register as erasure_register
from mongomem.erasure.register import ERASURES, erasure_id
from mongomem.errors import Erased, InputError
from mongomem.models import Role, SessionKey, Turn
from mongomem.settings import Settings, StmSettings
from mongomem.stm.turns import SESSION_SEQ_INDEX, ShortTermMemory, session_key

pytestmark = pytest.mark.integration


@pytest.fixture
async def stm(mongo: AsyncMongoClient[Document], settings: Settings) -> ShortTermMemory:
    memory = ShortTermMemory(mongo[settings.mongodb.database], settings.stm)
    await memory.ensure_indexes()
    return memory


KEY = SessionKey(project_id="proj", user_id="user_1", session_id="thread_123")


async def test_record_then_read_in_order(stm: ShortTermMemory) -> None:
    """Recorded turns are readable at once, in order (SPEC A1, A2)."""
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
    # what record_turn returns is exactly a validated Turn (it is built without validation)
    assert [Turn.model_validate(t.model_dump()) for t in written] == written
    assert [t.model_dump_json() for t in written] == [
        Turn.model_validate_json(t.model_dump_json()).model_dump_json() for t in written
    ]


async def test_list_sessions_most_recent_first(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """A user's sessions are listed, most recent first (SPEC A2)."""
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


def _command_log() -> tuple[list[tuple[str, str]], monitoring.CommandListener]:
    events: list[tuple[str, str]] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            events.append(("sent", event.command_name))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            events.append(("answered", event.command_name))

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            events.append(("failed", event.command_name))

    return events, Listener()


async def test_a_turn_costs_one_round_trip_with_the_erasure_check(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The register's answer is remembered briefly, so a busy session's turn is one
    insert; once the answer is stale, the read goes out beside the insert, not first."""
    events, listener = _command_log()
    watched = connect(settings.mongodb, event_listeners=[listener])
    try:
        stm = ShortTermMemory(database(watched, settings.mongodb), settings.stm)
        await stm.ensure_indexes()
        await stm.record_turn(KEY, Role.USER, "warm: the seq and the answer are known")
        events.clear()
        await stm.record_turn(KEY, Role.USER, "the usual case")
        assert events == [("sent", "insert"), ("answered", "insert")]
        monkeypatch.setattr(erasure_register, "NOT_ERASED_TTL_S", 0.0)
        await stm.record_turn(KEY, Role.USER, "the answer is read again")  # now remembered 0 s
        events.clear()
        await stm.record_turn(KEY, Role.USER, "a stale answer")
    finally:
        await watched.close()
    assert sorted(events[:2]) == [("sent", "find"), ("sent", "insert")], events
    assert sorted(events[2:]) == [("answered", "find"), ("answered", "insert")], events


async def test_a_session_erased_elsewhere_keeps_nothing_of_a_turn_written_beside_the_check(
    stm: ShortTermMemory,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = mongo[settings.mongodb.database]
    monkeypatch.setattr(erasure_register, "NOT_ERASED_TTL_S", 0.0)  # it reads every time
    await stm.record_turn(KEY, Role.USER, "before the erasure")
    # another process erases the user: the register says so, this store does not know yet
    await db[ERASURES].insert_one({"_id": erasure_id(KEY.project_id, KEY.user_id)})
    await db[TURNS].delete_many({"user_id": KEY.user_id})
    with pytest.raises(Erased):
        await stm.record_turn(KEY, Role.USER, "written, then taken back")
    assert await db[TURNS].count_documents({"user_id": KEY.user_id}) == 0
    with pytest.raises(Erased):
        await stm.end_session(KEY)
    other = SessionKey(project_id=KEY.project_id, user_id="user_2", session_id="s")
    await stm.record_turn(other, Role.USER, "another user is not erased")
    assert await db[TURNS].count_documents({}) == 1
