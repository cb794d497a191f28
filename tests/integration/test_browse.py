"""Browsing memories, sessions and turns (SPEC J3) on the real servers: SDK direct and
over HTTP, the CLI, cursors that neither skip nor repeat, filters, counts, isolation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, start
from test_service import KEY_A, KEY_B, with_keys

from mongomem.adapters.mongo import Document
from mongomem.cli.main import main
from mongomem.errors import InputError, ScopeError
from mongomem.models import Action, MemoryStatus
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings

pytestmark = pytest.mark.integration


def ctx(user: str = "user_1", session: str | None = "s1") -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


async def fill(chat: AsyncBoundMemory) -> dict[str, str]:
    """12 facts, 1 updated, 1 deleted; an episode; a project term. Their memory ids."""
    ids = {}
    for i in range(12):
        saved = await chat.save_semantic(f"fact-{i:02d}", f"Fact number {i} is {i * 7}.")
        ids[f"fact-{i:02d}"] = saved.memory_id
    await chat.save_semantic("fact-00", "Fact number 0 is now 1000.")  # v2; v1 superseded
    assert await chat.delete_semantic("fact-01", reason="wrong") is not None
    ids["trip"] = (await chat.save_episode("Lisbon trip", "Planned a trip to Lisbon.")).memory_id
    ids["red-eye"] = (await chat.save_taxonomic("airline", "red-eye", "Overnight.")).memory_id
    return ids


async def every_page(chat: AsyncBoundMemory, limit: int, **filters: object) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = await chat.browse_memories(limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        pages.append([item.version_id for item in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return pages


async def test_browse_filters_counts_and_pages_without_skipping_or_repeating(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(ctx())
        started = datetime.now(UTC) - timedelta(seconds=1)
        ids = await fill(chat)
        await memory.bind(ctx("bob")).save_semantic("fact-99", "Bob's own fact.")  # not ours

        pages = await every_page(chat, 5, memory_type="semantic")
        assert [len(p) for p in pages] == [5, 5, 1]  # 11 current facts (one was deleted)
        flat = [v for p in pages for v in p]
        assert len(set(flat)) == 11
        assert await chat.count_memories("semantic") == 11
        # every type: the facts, the episode and the project's term
        assert await chat.count_memories() == 13
        types = {i.memory_type for p in [await chat.browse_memories(limit=100)] for i in p.items}
        assert types == {"semantic", "episodic", "taxonomic"}

        superseded = await chat.browse_memories("semantic", status="superseded")
        assert [(i.key, i.version, i.status) for i in superseded.items] == [
            ("fact-01", 1, MemoryStatus.SUPERSEDED),
            ("fact-00", 1, MemoryStatus.SUPERSEDED),
        ]  # newest first
        deleted = await chat.browse_memories(status="deleted")
        [gone] = deleted.items
        assert (gone.memory_id, gone.action, gone.reason) == (
            ids["fact-01"],
            Action.DELETE,
            "wrong",
        )
        assert await chat.count_memories(status="deleted") == 1

        assert await chat.count_memories("semantic", key_prefix="fact-1") == 2  # 10, 11
        prefixed = await chat.browse_memories("semantic", key_prefix="FACT-1")
        assert sorted(i.key for i in prefixed.items) == ["fact-10", "fact-11"]
        assert await chat.count_memories(updated_since=started) == 13
        assert await chat.count_memories(updated_since=datetime.now(UTC) + timedelta(1)) == 0

        # A write between pages neither shifts nor repeats the versions already paged.
        first = await chat.browse_memories("semantic", limit=4)
        await chat.save_semantic("fact-zz", "A new fact.")
        await chat.save_semantic("fact-02", "Fact number 2 is 14.")  # a REINFORCE
        rest, cursor = [], first.next_cursor
        while cursor is not None:
            page = await chat.browse_memories("semantic", limit=4, cursor=cursor)
            rest += [i.version_id for i in page.items]
            cursor = page.next_cursor
        seen = [i.version_id for i in first.items] + rest
        assert len(seen) == len(set(seen)) == 11  # the new fact came after the first page

        item = await chat.get_memory(ids["fact-00"])
        assert item is not None
        assert (item.version, item.status, item.memory_type) == (
            2,
            MemoryStatus.CURRENT,
            "semantic",
        )
        deleted_item = await chat.get_memory(ids["fact-01"])
        assert deleted_item is not None
        assert deleted_item.status is MemoryStatus.DELETED
        assert await memory.bind(ctx("bob")).get_memory(ids["fact-00"]) is None
        assert await chat.get_memory(ids["red-eye"]) is not None  # the project's, shared

        for bad, field in [
            ({"status": "gone"}, "status"),
            ({"cursor": "not-a-cursor"}, "cursor"),
            ({"cursor": first.next_cursor, "status": "superseded"}, "cursor"),
            ({"updated_since": datetime(2026, 1, 1)}, "updated_since"),  # noqa: DTZ001 - naive
            ({"limit": 0}, "limit"),
        ]:
            with pytest.raises(InputError) as err:
                await chat.browse_memories("semantic", **bad)  # type: ignore[arg-type]
            assert err.value.field == field, bad
        with pytest.raises(InputError):
            await chat.browse_memories("no-such-type")


async def test_sessions_and_turns_page_by_id_and_seq(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
    async with AsyncMemory(project_id="travel", settings=settings) as memory:
        for s in ("c", "a", "e", "b", "d"):
            await memory.bind(ctx(session=s)).record_turn("user", f"hello {s}")
        chat = memory.bind(ctx(session="a"))
        for i in range(6):
            await chat.record_turn("assistant" if i % 2 else "user", f"turn {i}")
        await memory.bind(ctx("bob", "z")).record_turn("user", "not ours")

        first = await chat.browse_sessions(limit=2)
        assert [s.session_id for s in first.items] == ["a", "b"]
        second = await chat.browse_sessions(limit=2, cursor=first.next_cursor)
        third = await chat.browse_sessions(limit=2, cursor=second.next_cursor)
        assert [s.session_id for s in second.items + third.items] == ["c", "d", "e"]
        assert third.next_cursor is None
        assert first.items[0].turn_count == 7
        future = datetime.now(UTC) + timedelta(days=1)
        assert (await chat.browse_sessions(active_since=future)).items == ()

        turns = await chat.browse_turns(limit=3)
        more = await chat.browse_turns(limit=3, cursor=turns.next_cursor)
        last = await chat.browse_turns(limit=3, cursor=more.next_cursor)
        assert [t.seq for t in turns.items + more.items + last.items] == [1, 2, 3, 4, 5, 6, 7]
        assert last.next_cursor is None
        with pytest.raises(InputError) as err:
            await chat.browse_turns(cursor=first.next_cursor)  # a sessions cursor
        assert err.value.field == "cursor"
        with pytest.raises(InputError) as err:
            await memory.bind(ctx(session=None)).browse_turns()
        assert err.value.field == "session_id"


async def test_browse_over_http_matches_direct_and_another_projects_key_is_refused(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, url = await start(with_keys(settings))
    try:
        async with (
            AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as direct,
            AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote,
            AsyncMemory(project_id="travel", api_key=KEY_B, base_url=url) as intruder,
        ):
            ids = await fill(remote.bind(ctx()))
            here, there = direct.bind(ctx()), remote.bind(ctx())
            assert await every_page(there, 4) == await every_page(here, 4)
            assert await there.count_memories("semantic", status="superseded") == 2
            assert await there.get_memory(ids["trip"]) == await here.get_memory(ids["trip"])
            assert await there.get_memory("mem_none") is None
            since = datetime.now(UTC) - timedelta(hours=1)
            page = await there.browse_memories(updated_since=since, limit=2)
            assert page == await here.browse_memories(updated_since=since, limit=2)
            await there.record_turn("user", "hi")
            assert await there.browse_turns() == await here.browse_turns()
            assert await there.browse_sessions() == await here.browse_sessions()
            with pytest.raises(InputError) as err:
                await there.browse_memories(status="gone")
            assert err.value.field == "status"
            with pytest.raises(ScopeError):
                await intruder.bind(ctx()).browse_memories()
            with pytest.raises(ScopeError):
                await intruder.bind(ctx()).get_memory(ids["trip"])
    finally:
        await runner.stop()


def test_cli_lists_counts_gets_and_pages(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(ctx())
        saved = [chat.save_semantic(f"k{i}", f"Fact {i}.") for i in range(3)]
        chat.record_turn("user", "hello")
    who = ["--project-id", "travel", "--user-id", "user_1"]
    assert main(["memory", "list", *who, "--type", "semantic", "--limit", "2"]) == 0
    out = capsys.readouterr()
    first = [json.loads(line) for line in out.out.splitlines()]
    assert len(first) == 2
    cursor = out.err.strip().removeprefix("next page: --cursor ")
    assert main(["memory", "list", *who, "--type", "semantic", "--cursor", cursor]) == 0
    out = capsys.readouterr()
    second = [json.loads(line) for line in out.out.splitlines()]
    assert {d["memory_id"] for d in first + second} == {s.memory_id for s in saved}
    assert out.err == ""  # the last page
    assert main(["memory", "count", *who, "--prefix", "k"]) == 0
    assert capsys.readouterr().out.strip() == "3"
    assert main(["memory", "get", saved[0].memory_id, *who]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == "k0"
    assert main(["memory", "history", saved[0].memory_id, *who]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "ADD"
    assert (
        main(["memory", "get", saved[0].memory_id, "--project-id", "travel", "--user-id", "bob"])
        == 1
    )
    assert main(["memory", "sessions", *who]) == 0
    assert json.loads(capsys.readouterr().out)["session_id"] == "s1"
    assert main(["memory", "turns", *who, "--session-id", "s1"]) == 0
    assert json.loads(capsys.readouterr().out)["content"] == "hello"
    assert main(["memory", "list", *who, "--cursor", "junk"]) == 1
    assert "cursor" in capsys.readouterr().err


async def test_an_ended_session_browses_its_turns_only(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """A session end is stored in ``turns`` at its own seq; browsing failed on it (503)."""
    async with AsyncMemory(project_id="p", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(ctx(session="ended"))
        await chat.record_turn("user", "Book me a flight to Lisbon.")
        await chat.end_session()
        await chat.record_turn("user", "And a hotel.")
        page = await chat.browse_turns(limit=10)
        assert [(t.seq, t.content) for t in page.items] == [
            (1, "Book me a flight to Lisbon."),
            (3, "And a hotel."),
        ]
        sessions = await chat.browse_sessions()
        assert [(s.session_id, s.turn_count) for s in sessions.items] == [("ended", 2)]
