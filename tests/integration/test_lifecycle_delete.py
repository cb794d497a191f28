"""Deleting a memory (SPEC J1) on the real servers: SDK direct and over HTTP, the
reconciler core, the caches of other processes, isolation and bad input."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_
from hypothesis import strategies as st
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, call, start
from test_service import KEY_A, KEY_B, with_keys

from mongomem.adapters.mongo import DECISIONS, MEMORIES, Document, database
from mongomem.cli.main import main
from mongomem.errors import InputError, ScopeError
from mongomem.ltm import MemoryStore, kind_of, make_candidate, scope_for
from mongomem.models import Action, Evidence, MemoryStatus, stable_id, utcnow
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


def ctx(user: str = "user_1", session: str = "thread_1") -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
        yield m


async def count(mongo: AsyncMongoClient[Document], settings: Settings, **query: Any) -> int:
    return await database(mongo, settings.mongodb)[MEMORIES].count_documents(query)


async def test_delete_hides_the_memory_from_every_read_and_keeps_the_history(
    memory: AsyncMemory,
) -> None:
    chat = memory.bind(ctx())
    saved = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    await chat.save_semantic("home-airport", "The user's home airport is Denver.")  # v2
    await chat.save_episode("Lisbon trip", "Planned a summer trip to Lisbon.")

    done = await chat.delete_memory(saved.memory_id, reason="the user asked")
    assert done is not None
    assert (done.memory_id, done.version, done.actor, done.reason) == (
        saved.memory_id,
        3,
        "user_1",
        "the user asked",
    )
    assert not done.already_deleted

    assert await chat.get_semantic("home-airport") is None
    assert await chat.search_semantic("home airport Denver") == []
    context = await chat.build_context("home airport Denver")
    assert all(i.memory_id != saved.memory_id for i in context.items)
    assert "Denver" not in context.text
    assert [e.title for e in await chat.list_episodes()] == ["Lisbon trip"]  # others stay

    history = await chat.history(saved.memory_id)
    assert [(v.version, v.action, v.status) for v in history] == [
        (1, Action.ADD, MemoryStatus.SUPERSEDED),
        (2, Action.UPDATE, MemoryStatus.SUPERSEDED),
        (3, Action.DELETE, MemoryStatus.DELETED),
    ]
    last = history[-1]
    assert (last.actor, last.reason, last.created_at) == (
        "user_1",
        "the user asked",
        done.deleted_at,
    )
    assert history[1].superseded_by == last.version_id

    again = await chat.delete_memory(saved.memory_id, reason="twice")
    assert again is not None
    assert again.already_deleted
    assert again.version_id == done.version_id
    assert again.reason == "the user asked"
    assert len(await chat.history(saved.memory_id)) == 3  # nothing changed


async def test_a_later_save_of_the_same_fact_is_a_fresh_add(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx())
    first = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    assert await chat.delete_semantic("home-airport", reason="wrong") is not None

    again = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    assert again.action is Action.ADD
    assert again.version == 1
    assert again.memory_id != first.memory_id
    found = await chat.get_semantic("home-airport")
    assert found is not None
    assert found.memory_id == again.memory_id
    assert found.reinforcement_count == 1
    assert [v.action for v in await chat.history(first.memory_id)] == [Action.ADD, Action.DELETE]
    # deleted twice: a third incarnation, still never the old ones
    assert await chat.delete_memory(again.memory_id) is not None
    third = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    assert third.action is Action.ADD
    assert third.memory_id not in (first.memory_id, again.memory_id)


async def test_an_extracted_candidate_after_a_delete_is_a_fresh_add_through_the_core(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = database(mongo, settings.mongodb)
    store = MemoryStore(db)
    await store.setup()
    scope_kind = kind_of("semantic")
    fields = scope_kind.check({"label": "seat", "text": "The user prefers aisle seats."})
    [vector] = await EMBEDDER.embed([scope_kind.text(fields)])

    def candidate(n: int) -> Any:
        snap = stable_id("snap", n)
        now = utcnow()
        return make_candidate(
            "semantic",
            scope_for("semantic", "travel", "user_1"),
            fields,
            vector,
            candidate_id=stable_id("cand", snap),
            created_at=now,
            evidence=Evidence(source="snapshot", ref=snap, session_id="s", at=now),
        )

    added = await store.reconcile(candidate(1))
    gone = await store.delete(
        added.memory_id, [scope_for("semantic", "travel", "user_1")], actor="test", reason="r"
    )
    assert gone is not None
    # a second store, as in another process: its first read sees the deletion
    other = MemoryStore(db)
    await other.setup()
    readd = await other.reconcile(candidate(2))
    assert readd.action is Action.ADD
    assert readd.memory_id != added.memory_id
    [back] = await other.reconcile_many([candidate(3)])  # the batched path too
    assert back.action is Action.REINFORCE
    assert back.memory_id == readd.memory_id
    decisions = await db[DECISIONS].find({"memory_id": added.memory_id}).to_list()
    assert sorted(d["action"] for d in decisions) == ["ADD", "DELETE"]


async def test_the_index_cache_of_another_process_drops_the_memory_at_once(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as a,
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as b,
    ):
        writer, reader = a.bind(ctx()), b.bind(ctx())
        saved = await writer.save_semantic("diet", "The user is vegetarian.")
        assert [h.memory.memory_id for h in await reader.search_semantic("vegetarian")] == [
            saved.memory_id
        ]  # reader's cache now holds it
        await writer.delete_memory(saved.memory_id)
        assert await reader.search_semantic("vegetarian") == []
        assert await reader.get_semantic("diet") is None


async def test_delete_by_key_per_type_and_bad_input(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    chat = memory.bind(ctx())
    await chat.save_episode("Lisbon trip", "Planned a summer trip to Lisbon.")
    await chat.save_procedure("compare-flights", "Compare flights.", "Rank by price.")
    await chat.save_taxonomic("airline", "red-eye", "An overnight flight.")
    assert (await chat.delete_episode("Lisbon trip")) is not None
    assert (await chat.delete_procedure("compare-flights")) is not None
    term = await chat.delete_taxonomic_term("airline", "red-eye")
    assert term is not None
    assert term.memory_type == "taxonomic"
    assert await chat.get_taxonomic_term("airline", "red-eye") is None
    assert await chat.delete_semantic("never-saved") is None
    assert await chat.delete_memory("mem_000000000000000000000000") is None

    before = await count(mongo, settings)
    with pytest.raises(InputError) as bad:
        await chat.delete_memory("")
    assert bad.value.field == "memory_id"
    with pytest.raises(InputError) as bad:
        await chat.delete_semantic("x", reason="r" * 5000)
    assert bad.value.field == "reason"
    with pytest.raises(InputError):
        await chat.delete_by_key("no-such-type", "x")
    assert await count(mongo, settings) == before


async def test_another_user_cannot_delete_and_the_sync_sdk_deletes(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        alice, bob = memory.bind(ctx("alice")), memory.bind(ctx("bob"))
        saved = alice.save_semantic("pet", "Alice has a cat.")
        assert bob.delete_memory(saved.memory_id) is None  # not in bob's scopes
        assert alice.get_semantic("pet") is not None
        done = alice.delete_memory(saved.memory_id, reason="moved")
        assert done is not None
        assert done.actor == "alice"
        assert alice.get_semantic("pet") is None


async def test_delete_over_http_and_a_key_of_another_project_changes_nothing(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, url = await start(with_keys(settings))
    try:
        async with (
            AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote,
            AsyncMemory(project_id="travel", api_key=KEY_B, base_url=url) as intruder,
        ):
            chat = remote.bind(ctx())
            saved = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
            before = await count(mongo, settings)
            with pytest.raises(ScopeError):
                await intruder.bind(ctx()).delete_memory(saved.memory_id)
            body = {"project_id": "travel", "user_id": "user_1", "memory_id": saved.memory_id}
            answer = await call(url, "delete", body, KEY_B)
            assert answer.status_code == 403
            assert await count(mongo, settings) == before
            assert await chat.get_semantic("home-airport") is not None

            with pytest.raises(InputError) as bad:
                await chat.delete_memory(saved.memory_id, reason="r" * 5000)
            assert bad.value.field == "reason"
            done = await chat.delete_semantic("home-airport", reason="over http")
            assert done is not None
            assert done.reason == "over http"
            assert done.actor == "user_1"
            assert await chat.get_semantic("home-airport") is None
            assert await chat.delete_memory("mem_nothing") is None
            assert (await chat.history(saved.memory_id))[-1].action is Action.DELETE
    finally:
        await runner.stop()


def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)


def test_cli_deletes_by_id_and_by_key_only_with_yes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_env(settings, monkeypatch)
    with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(ctx())
        saved = chat.save_semantic("home-airport", "The user's home airport is Boston.")
        chat.save_episode("Lisbon trip", "Planned a summer trip to Lisbon.")
        who = ["--project-id", "travel", "--user-id", "user_1"]

        assert main(["memory", "delete", saved.memory_id, *who]) == 2  # no --yes
        assert chat.get_semantic("home-airport") is not None
        assert main(["memory", "delete", *who, "--type", "semantic", "--yes"]) == 1  # no key
        assert main(["memory", "delete", saved.memory_id, *who, "--reason", "gdpr", "--yes"]) == 0
        assert "deleted" in capsys.readouterr().out
        assert chat.get_semantic("home-airport") is None
        last = chat.history(saved.memory_id)[-1]
        assert last.action is Action.DELETE
        assert last.reason == "gdpr"
        assert (last.actor or "").startswith("cli:")

        by_key = ["--type", "episodic", "--key", "Lisbon trip", "--yes"]
        assert main(["memory", "delete", *who, *by_key]) == 0
        assert chat.list_episodes() == []
        assert main(["memory", "delete", *who, *by_key]) == 1  # nothing current any more
        other = ["--project-id", "other", "--user-id", "user_1"]
        assert main(["memory", "delete", saved.memory_id, *other, "--yes"]) == 1  # not theirs


async def test_an_interrupted_delete_is_completed_by_the_next_one(
    memory: AsyncMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mongomem.ltm import deletes

    chat = memory.bind(ctx())
    saved = await chat.save_semantic("seat", "The user prefers aisle seats.")
    await chat.save_semantic("seat", "The user prefers window seats.")  # v2
    assert await chat.search_semantic("window seats")  # this process's index holds it

    async def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("killed between the DELETE version and the supersede")

    monkeypatch.setattr(deletes, "_complete", crash)
    with pytest.raises(RuntimeError):
        await chat.delete_memory(saved.memory_id, reason="first try")
    monkeypatch.undo()
    assert await chat.get_semantic("seat") is not None  # v2 still reads as current

    again = await chat.delete_memory(saved.memory_id, reason="second try")
    assert again is not None
    assert again.already_deleted
    assert again.reason == "first try"  # the deletion that was written
    assert await chat.get_semantic("seat") is None
    assert await chat.search_semantic("window seats") == []
    history = await chat.history(saved.memory_id)
    assert [v.status for v in history] == [MemoryStatus.SUPERSEDED] * 2 + [MemoryStatus.DELETED]


async def test_deletes_racing_saves_of_the_same_key_leave_one_current_memory_at_most(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """Two processes: one deletes the key's memory while the other saves new texts."""
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as a,
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as b,
    ):
        saver, deleter = a.bind(ctx()), b.bind(ctx())
        for round_ in range(12):
            await asyncio.gather(
                saver.save_semantic("city", f"The user lives in city number {round_}."),
                deleter.delete_semantic("city", reason=f"round {round_}"),
                saver.save_semantic("city", f"The user moved to town number {round_}."),
            )
        db = database(mongo, settings.mongodb)
        docs = await db[MEMORIES].find({"key_norm": "city"}).to_list()
        current = [d for d in docs if d["status"] == "current"]
        assert len({d["memory_id"] for d in current}) <= 1
        assert len(current) <= 1
        by_memory: dict[str, list[Document]] = {}
        for d in docs:
            by_memory.setdefault(d["memory_id"], []).append(d)
        for versions in by_memory.values():
            versions.sort(key=lambda d: d["version"])
            assert [d["version"] for d in versions] == list(range(1, len(versions) + 1))
            # one current version at most; history versions (an older statement, SPEC L2)
            # may be numbered past it, and then it names the highest number as its head
            live = [d for d in versions if d["status"] == "current"]
            assert len(live) <= 1
            for d in live:
                assert max(d["version"], d.get("head") or 0) == versions[-1]["version"]
                assert all(v["superseded_by"] == d["_id"] for v in versions[d["version"] :])
            deleted = [d for d in versions if d["status"] == "deleted"]
            assert deleted in ([], [versions[-1]])  # a DELETE version ends a history
        assert (await saver.get_semantic("city") is None) == (not current)


async def test_a_delete_leaves_no_current_version_behind_even_two_left_by_a_crash(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    chat = memory.bind(ctx())
    first = await chat.save_semantic("seat", "The user prefers aisle seats.")
    await chat.save_semantic("seat", "The user prefers window seats.")
    memories = database(mongo, settings.mongodb)[MEMORIES]
    # an UPDATE interrupted before it superseded version 1: two current versions
    await memories.update_one({"_id": first.version_id}, {"$set": {"status": "current"}})
    assert await chat.delete_memory(first.memory_id) is not None
    assert await memories.count_documents({"memory_id": first.memory_id, "status": "current"}) == 0
    assert await chat.get_semantic("seat") is None
    assert await chat.search_semantic("aisle seats") == []


EXAMPLES = itertools.count()
OPS = st.lists(
    st.tuples(
        st.sampled_from(["save", "save", "delete"]), st.sampled_from(["a", "b"]), st.integers(0, 2)
    ),
    min_size=1,
    max_size=10,
)


@settings_(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
async def test_random_saves_and_deletes_never_bring_a_deleted_memory_back(
    memory: AsyncMemory, ops: list[tuple[str, str, int]]
) -> None:
    """Against a model: a key is live or not; a save of a key that is not live is an ADD
    of a memory id never used before; a delete ends the live memory's history."""
    chat = memory.bind(ctx(f"u-{next(EXAMPLES)}"))  # a fresh scope for every example
    live: dict[str, str] = {}
    used: set[str] = set()
    for op, key, text in ops:
        if op == "save":
            saved = await chat.save_semantic(key, f"Fact {key} has value {text}.")
            if key in live:
                assert saved.memory_id == live[key]
                assert saved.action is not Action.ADD
            else:
                assert saved.action is Action.ADD
                assert saved.memory_id not in used
                live[key] = saved.memory_id
                used.add(saved.memory_id)
        else:
            done = await chat.delete_semantic(key)
            assert (done is None) == (key not in live)
            if done is not None:
                assert done.memory_id == live.pop(key)
        for k in ("a", "b"):
            found = await chat.get_semantic(k)
            assert (None if found is None else found.memory_id) == live.get(k)
        assert await chat.count_memories("semantic") == len(live)
        assert await chat.count_memories("semantic", status="deleted") == len(used) - len(live)
