"""The memory store against the real MongoDB-compatible server (SPEC D1–D3)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, Document
from mongomem.ltm import MemoryStore, ScriptedJudge, probe_vector_search
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryCandidate, MemoryScope, MemoryStatus
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

ME = MemoryScope(project_id="p1", user_id="u1")


@pytest.fixture
async def store(mongo: AsyncMongoClient[Document], settings: Settings) -> MemoryStore:
    s = MemoryStore(mongo[settings.mongodb.database])
    await s.setup()
    return s


def airport(city: str, snapshot: str, **kw: Any) -> MemoryCandidate:
    return candidate(
        "semantic",
        label="home-airport",
        text=f"The user's home airport is {city}.",
        snapshot=snapshot,
        **kw,
    )


async def test_evolving_fact_updates_and_keeps_history(store: MemoryStore) -> None:
    first = await store.reconcile(airport("Boston", "snap-a"))
    second = await store.reconcile(airport("Denver", "snap-b"))
    assert (first.action, second.action) == (Action.ADD, Action.UPDATE)
    assert second.memory_id == first.memory_id
    assert second.version == 2
    current = await store.get(ME, "semantic", "home-airport")
    assert current is not None
    assert "Denver" in current.text
    history = await store.history(first.memory_id, [ME])
    assert [(v.version, v.status, v.action) for v in history] == [
        (1, MemoryStatus.SUPERSEDED, Action.ADD),
        (2, MemoryStatus.CURRENT, Action.UPDATE),
    ]
    assert history[0].superseded_by == history[1].version_id
    assert history[0].superseded_at is not None
    assert [e.ref for v in history for e in v.evidence] == ["snap-a", "snap-b"]
    logged = await store.decisions_for(first.memory_id)
    assert [d["action"] for d in logged] == ["ADD", "UPDATE"]
    assert all(d["reason"] for d in logged)


async def test_same_fact_from_two_snapshots_reinforces(store: MemoryStore) -> None:
    await store.reconcile(airport("Boston", "snap-a"))
    again = await store.reconcile(airport("Boston", "snap-b"))
    assert again.action is Action.REINFORCE
    current = await store.get(ME, "semantic", "Home Airport")
    assert current is not None
    assert current.reinforcement_count == 2
    assert [e.ref for e in current.evidence] == ["snap-a", "snap-b"]
    assert len(await store.history(current.memory_id, [ME])) == 1


async def test_same_candidate_twice_changes_nothing(
    store: MemoryStore, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    cand = airport("Boston", "snap-a")
    await store.reconcile(airport("Lisbon", "snap-0", position=1))
    first = await store.reconcile(cand)

    async def dump() -> list[list[Document]]:
        return [
            await db[name].find({}, {"at": 0}).sort("_id").to_list()
            for name in (MEMORIES, LEDGER, DECISIONS)
        ]

    before = await dump()
    again = await store.reconcile(cand)
    assert again.replayed
    assert again.version_id == first.version_id
    assert await dump() == before
    # A second store (another process) sees the ledger too.
    other = MemoryStore(db)
    assert (await other.reconcile(cand)).replayed
    assert await dump() == before


async def test_interrupted_update_is_completed_not_replanned(
    store: MemoryStore, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    await store.reconcile(airport("Boston", "snap-a"))
    denver = airport("Denver", "snap-b")
    await store.reconcile(denver)
    # Simulate a crash after the insert of version 2: undo the supersede and the ledger.
    first = await store.get(ME, "semantic", "home-airport")
    assert first is not None
    history = await store.history(first.memory_id, [ME])
    await db[MEMORIES].update_one(
        {"_id": history[0].version_id}, {"$set": {"status": "current", "superseded_by": None}}
    )
    await db[LEDGER].update_one({"_id": denver.candidate_id}, {"$set": {"state": "pending"}})
    # Readers already prefer the higher version.
    now = await store.get(ME, "semantic", "home-airport")
    assert now is not None
    assert now.version == 2
    again = await MemoryStore(db).reconcile(denver)
    assert (again.action, again.version) == (Action.UPDATE, 2)
    statuses = [v.status for v in await store.history(first.memory_id, [ME])]
    assert statuses == [MemoryStatus.SUPERSEDED, MemoryStatus.CURRENT]


async def test_taxonomic_reinforce_merges_definitions(store: MemoryStore) -> None:
    text, term = "An overnight flight that lands the next morning", "red-eye"
    a = candidate("taxonomic", domain="airline", term=term, definition=f"{text}.", snapshot="a")
    b = candidate("taxonomic", domain="airline", term=term, definition=text, snapshot="b")
    await store.reconcile(a)
    out = await store.reconcile(b)
    assert out.action is Action.REINFORCE
    stored = await store.get(MemoryScope(project_id="p1"), "taxonomic", "airline/red-eye")
    assert stored is not None
    assert stored.reinforcement_count == 2
    assert stored.fields["variants"] == [b.fields["definition"]]
    assert [e.ref for e in stored.evidence] == ["a", "b"]


async def test_judge_settles_a_key_match_and_sees_the_stored_evidence_dates(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    judge = ScriptedJudge(lambda q: Action.REINFORCE)
    store = MemoryStore(mongo[settings.mongodb.database], judge=judge)
    await store.setup()
    learned, confirmed, stated = (datetime(2026, 1, d, 9, tzinfo=UTC) for d in (2, 3, 9))
    await store.reconcile(airport("Boston", "snap-a", at=learned))
    await store.reconcile(airport("Boston", "snap-b", at=confirmed))  # equivalent: no judge
    assert judge.calls == 0
    out = await store.reconcile(
        candidate(
            "semantic",
            label="home-airport",
            text="User flies out of Boston",
            snapshot="snap-c",
            at=stated,
        )
    )
    assert (out.action, judge.calls) == (Action.REINFORCE, 1)
    assert out.reason == "judge: scripted"
    question = judge.questions[0]
    assert question.existing_evidence_at == (learned, confirmed)
    assert question.new_stated_at == stated
    assert (question.same_key, question.existing_key, question.memory_type) == (
        True,
        "home-airport",
        "semantic",
    )
    logged = await store.decisions.find_one({"_id": out.candidate_id})
    assert logged is not None
    assert logged["judged"] is True
    assert logged["judge_input_chars"] == len(question.render())
    assert logged["judge_latency_ms"] >= 0


async def test_two_writers_racing_on_one_key_leave_one_memory(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    db = mongo[settings.mongodb.database]
    a, b = MemoryStore(db), MemoryStore(db)
    await a.setup()
    cities = ["Boston", "Denver", "Austin", "Paris", "Oslo", "Rome"]
    writes = [
        (a if i % 2 else b).reconcile(airport(city, f"snap-{i}")) for i, city in enumerate(cities)
    ]
    outcomes = await asyncio.gather(*writes)
    assert sum(o.action is Action.ADD for o in outcomes) == 1
    docs = await db[MEMORIES].find({}).to_list()
    assert len({d["memory_id"] for d in docs}) == 1
    current = [d for d in docs if d["status"] == "current"]
    assert len(current) == 1
    assert sorted(d["version"] for d in docs) == list(range(1, len(docs) + 1))


async def test_search_is_exact_and_scoped(store: MemoryStore) -> None:
    for i, text in enumerate(["I love window seats", "Allergic to peanuts", "Vegan meals"]):
        await store.reconcile(candidate("semantic", label=f"l{i}", text=text, snapshot=f"s{i}"))
    await store.reconcile(
        candidate("semantic", user_id="u2", label="x", text="Allergic to peanuts", snapshot="o")
    )
    probe = candidate("semantic", label="q", text="peanuts allergy", snapshot="q")
    hits = await store.search(ME, "semantic", probe.embedding, limit=2)
    assert next(h[0].fields["label"] for h in hits) == "l1"
    assert all(v.scope == ME for v, _ in hits)
    assert hits[0][1] >= hits[1][1]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_batched_and_single_writers_racing_stay_consistent(
    mongo: AsyncMongoClient[Document], settings: Settings, seed: int
) -> None:
    """The stage's batch path and direct saves (separate caches, as in two processes)."""
    db = mongo[settings.mongodb.database]
    batched, single = MemoryStore(db), MemoryStore(db)
    await batched.setup()
    cities = ["Boston", "Denver", "Austin", "Denver"]
    staged = [airport(cities[i % 4], f"snap-{i}") for i in range(20)]
    direct = [
        candidate(
            "semantic",
            label="home-airport",
            snapshot=None,
            text=f"The user's home airport is {cities[i % 3]}.",
        )
        for i in range(20)
    ]
    rng = random.Random(seed)

    async def batches() -> None:
        i = 0
        while i < len(staged):
            n = rng.randint(1, 6)
            await batched.reconcile_many(staged[i : i + n])
            i += n
            await asyncio.sleep(rng.random() * 0.003)

    async def singles() -> None:
        for c in direct:
            await single.reconcile(c)

    await asyncio.gather(batches(), singles())
    docs = await db[MEMORIES].find({}).to_list()
    assert [d["status"] for d in docs].count("current") == 1
    assert sorted(d["version"] for d in docs) == list(range(1, len(docs) + 1))
    assert sum(len(d["candidate_ids"]) for d in docs) == 40
    assert await db[LEDGER].count_documents({"state": "done"}) == 40


async def test_batch_applies_in_order_and_skips_repeats(store: MemoryStore) -> None:
    boston, denver = airport("Boston", "a"), airport("Denver", "b")
    again = airport("Denver", "c")
    outcomes = await store.reconcile_many([boston, denver, denver, again])
    assert [o.action for o in outcomes] == [
        Action.ADD,
        Action.UPDATE,
        Action.UPDATE,
        Action.REINFORCE,
    ]
    assert [o.replayed for o in outcomes] == [False, False, True, False]
    assert all(o.replayed for o in await store.reconcile_many([boston, again]))
    current = await store.get(ME, "semantic", "home-airport")
    assert current is not None
    assert (current.version, current.reinforcement_count) == (2, 2)


async def test_vector_search_is_used_where_the_server_has_it(store: MemoryStore) -> None:
    await store.reconcile(airport("Boston", "a"))
    probe = airport("Boston", "q")
    hits = await store.search(ME, "semantic", probe.embedding, limit=1)
    assert hits[0][1] == pytest.approx(1.0, abs=1e-4)  # same answer from either backend
    if not await probe_vector_search(store.memories):
        assert store.search_backend.name == "exact-cosine"
        pytest.skip("this server has no $vectorSearch: the exact cosine scan answered")
    assert store.search_backend.name == "atlas-vector-search"
