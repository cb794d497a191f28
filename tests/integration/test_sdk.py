"""The SDK against the real MongoDB-compatible server (SPEC E1–E2, F1–F3)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, TURNS, Document
from mongomem.errors import InputError, ScopeError
from mongomem.models import Action, MemoryStatus, utcnow
from mongomem.sdk import (
    AsyncMemory,
    Episode,
    Memory,
    MemoryRequestContext,
    Procedure,
    SemanticMemory,
    TaxonomicTerm,
)
from mongomem.sdk.idempotency import keyed_candidate_id, request_fingerprint
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder(64)


def ctx(user: str, session: str = "thread_123") -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
        yield m


async def test_async_round_trip_of_every_call(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx("user_1"))
    saved = await chat.save_semantic(
        label="home-airport", text="The user's home airport is Boston."
    )
    assert saved.action is Action.ADD
    fact = await chat.get_semantic("home-airport")
    assert isinstance(fact, SemanticMemory)
    assert fact.label == "home-airport"
    assert (await chat.search_semantic("home airport"))[0].memory.memory_id == saved.memory_id

    await chat.save_episode(title="Vacation planning", content="Planned a summer trip to Lisbon.")
    hits = await chat.search_episodes("trip to Lisbon")
    assert isinstance(hits[0].memory, Episode)
    assert hits[0].memory.title == "Vacation planning"
    assert 0 < hits[0].score <= 1.0
    assert [e.title for e in await chat.list_episodes()] == ["Vacation planning"]

    await chat.save_procedure(
        procedure="compare-flights",
        description="Compare flight options.",
        content="Rank flights by price, stops, and total travel time.",
    )
    found = await chat.discover_procedures("compare flights")
    assert isinstance(found[0].memory, Procedure)
    proc = await chat.get_procedure("compare-flights")
    assert proc is not None
    assert proc.content.startswith("Rank flights")

    await chat.save_taxonomic(
        domain="airline", term="red-eye", definition="An overnight flight landing next morning."
    )
    term = await chat.get_taxonomic_term("airline", "red-eye")
    assert isinstance(term, TaxonomicTerm)
    assert term.definition.startswith("An overnight")
    assert (await chat.search_taxonomic("overnight flight", domain="airline"))[0].memory.term == (
        "red-eye"
    )
    assert await chat.search_taxonomic("overnight flight", domain="hotel") == []
    assert await chat.list_domains() == ["airline"]

    context = await chat.build_context("trip Lisbon home airport")
    assert {i.memory_type for i in context.items} == {"semantic", "episodic"}
    assert "Lisbon" in context.text
    full = await chat.build_context(
        "flights", include=["semantic", "episodic", "procedural", "taxonomic"], max_chars=120
    )
    assert len(full.text) <= 120
    assert full.truncated

    history = await chat.history(saved.memory_id)
    assert [v.action for v in history] == [Action.ADD]


async def test_evolving_fact_through_the_sdk(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx("user_1"))
    first = await chat.save_semantic("home-airport", "The user's home airport is Boston.")
    second = await chat.save_semantic("home-airport", "The user's home airport is Denver.")
    third = await chat.save_semantic("Home Airport", "The user's home airport is Denver.")
    assert [first.action, second.action, third.action] == [
        Action.ADD,
        Action.UPDATE,
        Action.REINFORCE,
    ]
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert "Denver" in fact.text
    assert fact.reinforcement_count == 2
    history = await chat.history(first.memory_id)
    assert [(v.version, v.status) for v in history] == [
        (1, MemoryStatus.SUPERSEDED),
        (2, MemoryStatus.CURRENT),
    ]
    assert [len(v.evidence) for v in history] == [1, 2]
    assert all(e.source == "direct" and e.session_id == "thread_123" for e in history[1].evidence)


async def test_no_read_or_write_crosses_a_user(memory: AsyncMemory) -> None:
    alice, bob = memory.bind(ctx("alice")), memory.bind(ctx("bob"))
    a = await alice.save_semantic("home-airport", "The user's home airport is Boston.")
    b = await bob.save_semantic("home-airport", "The user's home airport is Denver.")
    assert (a.action, b.action) == (Action.ADD, Action.ADD)
    assert a.memory_id != b.memory_id
    alice_fact, bob_fact = (
        await alice.get_semantic("home-airport"),
        await bob.get_semantic("home-airport"),
    )
    assert alice_fact is not None
    assert bob_fact is not None
    assert ("Boston" in alice_fact.text, "Denver" in bob_fact.text) == (True, True)
    await bob.save_episode("Ski trip", "Bob booked a ski trip to Aspen.")
    # Searching with exactly another user's words finds nothing of theirs.
    assert await alice.search_episodes("Bob booked a ski trip to Aspen.") == []
    hits = await alice.search_semantic("The user's home airport is Denver.")
    assert [h.memory.memory_id for h in hits] == [a.memory_id]
    assert await alice.history(b.memory_id) == []
    assert await alice.list_episodes() == []


async def test_taxonomic_is_shared_by_a_project_and_only_by_it(
    memory: AsyncMemory, settings: Settings
) -> None:
    await memory.bind(ctx("alice")).save_taxonomic("airline", "red-eye", "An overnight flight.")
    bob = memory.bind(ctx("bob"))
    term = await bob.get_taxonomic_term("airline", "red-eye")
    assert term is not None
    assert (await bob.save_taxonomic("airline", "red-eye", "An overnight flight.")).action is (
        Action.REINFORCE
    )
    assert await bob.history(term.memory_id) != []
    async with AsyncMemory(project_id="other", settings=settings, embedder=EMBEDDER) as other:
        carol = other.bind(ctx("alice"))
        assert await carol.get_taxonomic_term("airline", "red-eye") is None
        assert await carol.search_taxonomic("overnight flight") == []
        assert await carol.list_domains() == []
        assert await carol.history(term.memory_id) == []


async def test_service_account_identity_ignores_the_end_user(memory: AsyncMemory) -> None:
    as_alice = memory.bind(MemoryRequestContext(service_account="agent-7", user_id="alice"))
    as_bob = memory.bind(MemoryRequestContext(service_account="agent-7", user_id="bob"))
    assert as_alice.identity.user_id == as_bob.identity.user_id == "sa:agent-7"
    await as_alice.save_semantic("tone", "Answer briefly.")
    assert await as_bob.get_semantic("tone") is not None
    assert await memory.bind(ctx("alice")).get_semantic("tone") is None
    with pytest.raises(ScopeError):
        memory.bind(ctx("sa:agent-7"))


async def test_bad_input_is_rejected_before_anything_is_stored(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx("alice"))
    with pytest.raises(InputError) as err:
        await chat.save_semantic("", "text")
    assert err.value.field == "label"
    with pytest.raises(InputError):
        memory.bind(MemoryRequestContext(user_id="$where"))
    with pytest.raises(InputError):
        await chat.search_semantic("hello", limit=0)
    assert await chat.list_episodes() == []


async def test_short_term_memory_on_the_bound_context(memory: AsyncMemory) -> None:
    """Recent turns and sessions through the bound SDK context (SPEC A2)."""
    chat = memory.bind(ctx("alice", "s-1"))
    await chat.record_turn("user", "Find me a flight to Lisbon")
    await chat.record_turn("assistant", "Here are three options.", {"tool": "search"})
    turns = await chat.recent_turns(10)
    assert [t.seq for t in turns] == [1, 2]
    assert turns[1].metadata == {"tool": "search"}
    assert [s.session_id for s in await chat.list_sessions()] == ["s-1"]
    with pytest.raises(InputError):
        await memory.bind(MemoryRequestContext(user_id="alice")).recent_turns()


async def test_what_one_conversation_learned_is_known_in_the_next(memory: AsyncMemory) -> None:
    """Long-term memory is the user's, not the session's: the next conversation reads,
    searches and is given what an earlier one learned, while recent turns stay with
    their own session (SPEC B3)."""
    first, second = memory.bind(ctx("alice", "s-1")), memory.bind(ctx("alice", "s-2"))
    await first.record_turn("user", "My home airport is Boston.")
    saved = await first.save_semantic("home-airport", "The user's home airport is Boston.")
    fact = await second.get_semantic("home-airport")
    assert fact is not None
    assert fact.memory_id == saved.memory_id
    assert [h.memory.memory_id for h in await second.search_semantic("home airport")] == [
        saved.memory_id
    ]
    assert "home airport is Boston" in (await second.build_context("home airport")).text
    assert await second.recent_turns() == []
    assert [t.content for t in await first.recent_turns()] == ["My home airport is Boston."]


async def test_end_session_is_an_event_at_the_next_seq_that_no_reader_takes_for_a_turn(
    memory: AsyncMemory, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    chat = memory.bind(ctx("alice", "s-end"))
    await chat.record_turn("user", "Book the 9am flight")
    await chat.record_turn("assistant", "Booked.")
    ended = await chat.end_session()
    assert (ended.session_id, ended.seq) == ("s-end", 3)
    after = await chat.record_turn("user", "And a hotel?")
    assert after.seq == 4, "the end holds seq 3; the next turn takes the one after"
    assert [t.seq for t in await chat.recent_turns(10)] == [1, 2, 4]
    [summary] = await chat.list_sessions()
    assert (summary.turn_count, summary.last_seq) == (3, 4)
    stored = await mongo[settings.mongodb.database][TURNS].find_one({"_id": ended.seq_id})
    assert stored is not None
    assert stored["event"] == "end"
    assert "role" not in stored
    assert "content" not in stored
    with pytest.raises(InputError):
        await memory.bind(MemoryRequestContext(user_id="alice")).end_session()


def test_sync_round_trip_of_every_call(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """Every call of the blocking SDK on the real servers (SPEC G1, E1)."""
    with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(ctx("user_1"))
        s = chat.save_semantic(label="home-airport", text="The user's home airport is Boston.")
        assert chat.get_semantic("home-airport") is not None
        assert chat.search_semantic("home airport")[0].memory.memory_id == s.memory_id
        chat.save_episode(title="Vacation planning", content="Planned a summer trip to Lisbon.")
        assert chat.search_episodes("trip to Lisbon")[0].memory.title == "Vacation planning"
        assert len(chat.list_episodes()) == 1
        chat.save_procedure("compare-flights", "Compare flight options.", "Rank by price.")
        assert chat.discover_procedures("compare flights")[0].memory.name == "compare-flights"
        assert chat.get_procedure("compare-flights") is not None
        chat.save_taxonomic("airline", "red-eye", "An overnight flight that lands next morning.")
        assert chat.get_taxonomic_term("airline", "red-eye") is not None
        assert chat.search_taxonomic("overnight flight", domain="airline")[0].score > 0
        assert chat.list_domains() == ["airline"]
        assert "Lisbon" in chat.build_context("Lisbon trip").text
        assert len(chat.history(s.memory_id)) == 1
        chat.record_turn("user", "hello")
        assert [t.content for t in chat.recent_turns()] == ["hello"]
        assert len(chat.list_sessions()) == 1
        assert chat.end_session().seq == 2
        assert [t.content for t in chat.recent_turns()] == ["hello"]


# -- idempotency keys (direct saves) ----------------------------------------------------

BOSTON = "The user's home airport is Boston."
DENVER = "The user's home airport is Denver."


async def stored(mongo: AsyncMongoClient[Document], settings: Settings) -> tuple[int, int]:
    """(memory versions, decision-log entries) in the test's database."""
    db = mongo[settings.mongodb.database]
    return await db[MEMORIES].count_documents({}), await db[DECISIONS].count_documents({})


async def test_a_save_repeated_with_its_key_answers_the_first_result_and_changes_nothing(
    memory: AsyncMemory, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    chat = memory.bind(ctx("alice"))
    # ADD, REINFORCE and UPDATE, each sent twice with its own key
    for key, text, action in [
        ("a-1", BOSTON, Action.ADD),
        ("a-2", BOSTON, Action.REINFORCE),
        ("a-3", DENVER, Action.UPDATE),
    ]:
        first = await chat.save_semantic("home-airport", text, idempotency_key=key)
        before = await stored(mongo, settings)
        again = await chat.save_semantic("home-airport", f"  {text} ", idempotency_key=key)
        assert first.action is action
        assert again == first
        assert await stored(mongo, settings) == before
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert (fact.text, fact.version, fact.reinforcement_count) == (DENVER, 2, 1)
    history = await chat.history(first.memory_id)
    assert [(v.version, v.reinforcement_count) for v in history] == [(1, 2), (2, 1)]
    assert [e.ref for e in history[0].evidence] == [
        keyed_candidate_id(chat.identity, "semantic", k) for k in ("a-1", "a-2")
    ]
    # every type, and the sync SDK
    saves = [
        lambda k: chat.save_episode("Ski trip", "Booked Aspen.", idempotency_key=k),
        lambda k: chat.save_procedure("pack", "Packing.", "Socks first.", idempotency_key=k),
        lambda k: chat.save_taxonomic("airline", "red-eye", "Overnight.", idempotency_key=k),
    ]
    for save in saves:
        first = await save("t-1")
        assert (await save("t-1"), first.action) == (first, Action.ADD)
        assert [v.reinforcement_count for v in await chat.history(first.memory_id)] == [1]

    def sync_twice() -> tuple[object, object]:
        with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
            bound = m.bind(ctx("alice"))
            return (
                bound.save_semantic("seat", "Aisle.", idempotency_key="s-1"),
                bound.save_semantic("seat", "Aisle.", idempotency_key="s-1"),
            )

    one, two = await asyncio.to_thread(sync_twice)
    assert one == two
    seat = await chat.get_semantic("seat")
    assert seat is not None
    assert seat.reinforcement_count == 1


async def test_a_key_reused_for_different_content_is_refused_and_stores_nothing(
    memory: AsyncMemory, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    chat = memory.bind(ctx("alice"))
    first = await chat.save_semantic("home-airport", BOSTON, idempotency_key="k")
    before = await stored(mongo, settings)
    refused = [
        lambda: chat.save_semantic("home-airport", DENVER, idempotency_key="k"),
        lambda: chat.save_semantic("work-airport", BOSTON, idempotency_key="k"),
    ]
    for call in refused:
        with pytest.raises(InputError, match="already used for a different request") as err:
            await call()
        assert err.value.field == "idempotency_key"
    assert await stored(mongo, settings) == before
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert (fact.text, fact.reinforcement_count) == (BOSTON, 1)
    assert await chat.get_semantic("work-airport") is None
    # the first request still answers as before
    assert await chat.save_semantic("home-airport", BOSTON, idempotency_key="k") == first
    # a key belongs to one caller and one memory type
    episode = await chat.save_episode("Trip", "Booked Lisbon.", idempotency_key="k")
    bobs = await memory.bind(ctx("bob")).save_semantic("home-airport", DENVER, idempotency_key="k")
    assert (episode.action, bobs.action) == (Action.ADD, Action.ADD)
    for bad in ["", "x" * 256, "has space", "naïve", "new\nline", 7]:
        with pytest.raises(InputError) as err:
            await chat.save_semantic("home-airport", DENVER, idempotency_key=bad)  # type: ignore[arg-type]
        assert err.value.field == "idempotency_key"
    assert await chat.save_semantic("x", "y", idempotency_key="K" * 255) is not None


async def test_different_keys_or_no_key_reinforce_as_before(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx("alice"))
    one = await chat.save_semantic("home-airport", BOSTON, idempotency_key="k-1")
    two = await chat.save_semantic("home-airport", BOSTON, idempotency_key="k-2")
    three = await chat.save_semantic("home-airport", BOSTON)
    four = await chat.save_semantic("home-airport", BOSTON)
    assert [r.action for r in (one, two, three, four)] == [Action.ADD] + [Action.REINFORCE] * 3
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert fact.reinforcement_count == 4
    refs = [e.ref for e in (await chat.history(one.memory_id))[0].evidence]
    assert len(set(refs)) == 4
    assert refs[:2] == [keyed_candidate_id(chat.identity, "semantic", k) for k in ("k-1", "k-2")]


async def test_concurrent_saves_with_one_key_have_one_effect(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    # two clients (two stores, as two service replicas would be) racing with one key
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as other:
        chats = [memory.bind(ctx("alice")), other.bind(ctx("alice"))]
        adds = await asyncio.gather(
            *[
                chats[i % 2].save_semantic("home-airport", BOSTON, idempotency_key="race-1")
                for i in range(8)
            ]
        )
        reinforces = await asyncio.gather(
            *[
                chats[i % 2].save_semantic("Home Airport", BOSTON, idempotency_key="race-2")
                for i in range(8)
            ]
        )
    assert all(r == adds[0] for r in adds)
    assert adds[0].action is Action.ADD
    assert all(r == reinforces[0] for r in reinforces)
    assert reinforces[0].action is Action.REINFORCE
    assert await stored(mongo, settings) == (1, 2)
    fact = await chats[0].get_semantic("home-airport")
    assert fact is not None
    assert (fact.version, fact.reinforcement_count) == (1, 2)


async def test_a_keyed_save_interrupted_before_writing_is_completed_by_its_retry(
    memory: AsyncMemory, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    chat = memory.bind(ctx("alice"))
    cid = keyed_candidate_id(chat.identity, "semantic", "k")
    fields = {"label": "home-airport", "text": BOSTON}
    # what a crash right after marking the candidate pending leaves behind
    await mongo[settings.mongodb.database][LEDGER].insert_one(
        {
            "_id": cid,
            "state": "pending",
            "at": utcnow() - timedelta(minutes=5),
            "fingerprint": request_fingerprint("semantic", fields),
        }
    )
    done = await chat.save_semantic("home-airport", BOSTON, idempotency_key="k")
    assert done.action is Action.ADD
    assert await chat.save_semantic("home-airport", BOSTON, idempotency_key="k") == done
    with pytest.raises(InputError):
        await chat.save_semantic("home-airport", DENVER, idempotency_key="k")
    assert await stored(mongo, settings) == (1, 1)
