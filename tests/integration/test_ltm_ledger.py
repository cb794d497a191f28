"""The reconciler's ledger expires (MONGOMEM_RECONCILE_LEDGER_TTL_S), on the real server.

mongo-java-server need not delete TTL documents, and MongoDB deletes them only
about once a minute: these tests advance the store's clock past an entry's
``expires_at`` and rely on the store treating it as absent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, Document
from mongomem.deadlines import Deadline, within
from mongomem.errors import DeadlineExceeded, InputError
from mongomem.ltm import Decision, MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryCandidate, MemoryScope
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

ME = MemoryScope(project_id="p1", user_id="u1")
TTL = 3600.0
BOSTON = "The user's home airport is Boston."
DENVER = "The user's home airport is Denver."


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def db(mongo: AsyncMongoClient[Document], settings: Settings) -> AsyncDatabase[Document]:
    return mongo[settings.mongodb.database]


async def make_store(
    db: AsyncDatabase[Document], clock: Clock, ttl: float | None = TTL
) -> MemoryStore:
    store = MemoryStore(db, clock=clock, ledger_ttl_s=ttl)
    await store.setup(probe=False)
    return store


def airport(city: str, snapshot: str = "snap-a", **kw: Any) -> MemoryCandidate:
    return candidate(
        "semantic",
        label="home-airport",
        text=f"The user's home airport is {city}.",
        snapshot=snapshot,
        **kw,
    )


def keyed(city: str, cid: str = "cand_keyed") -> MemoryCandidate:
    """What a direct save with an idempotency key sends: a candidate id derived from the key."""
    return airport(city).model_copy(update={"candidate_id": cid})


async def test_settled_entries_carry_their_expiry_and_a_ttl_index_deletes_them(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    out = await store.reconcile(airport("Boston"))
    entry = await db[LEDGER].find_one({"_id": out.candidate_id})
    assert entry is not None
    assert entry["state"] == "done"
    assert entry["expires_at"] - entry["at"] == timedelta(seconds=TTL)
    indexes = await db[LEDGER].index_information()
    assert sorted(indexes) == ["_id_", "expires_at"]
    assert indexes["expires_at"]["key"] == [("expires_at", 1)]
    assert indexes["expires_at"]["expireAfterSeconds"] == 0


async def test_a_redelivered_candidate_is_replayed_until_its_entry_expires(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    cand = airport("Boston")
    first = await store.reconcile(cand)
    clock.advance(TTL - 1)
    assert (await store.reconcile(cand)).replayed
    assert (await store.reconcile_many([cand]))[0].replayed
    clock.advance(1)
    again = await store.reconcile(cand)
    assert not again.replayed  # planned afresh: it confirms what its first delivery added
    assert (again.action, again.version_id) == (Action.REINFORCE, first.version_id)
    current = await store.get(ME, "semantic", "home-airport")
    assert current is not None
    assert current.reinforcement_count == 1  # its id was already counted on the version
    entry = await db[LEDGER].find_one({"_id": cand.candidate_id})
    assert entry is not None
    assert entry["expires_at"] == clock.now + timedelta(seconds=TTL)  # a new lifetime
    assert (await store.reconcile(cand)).replayed
    # the decision log keeps both applications
    logged = await store.decisions_for(first.memory_id)
    assert [d["action"] for d in logged] == ["ADD", "REINFORCE"]


async def test_the_batched_path_treats_an_expired_entry_as_new(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    boston, denver = airport("Boston"), airport("Denver", "snap-b")
    await store.reconcile_many([boston, denver])
    clock.advance(TTL)
    outcomes = await store.reconcile_many([boston, boston])
    assert [o.replayed for o in outcomes] == [False, True]
    # Denver was said after Boston, so it stays current (SPEC L2); Boston again is only
    # more evidence for its own version in history, not a new version.
    assert (outcomes[0].action, outcomes[0].version) == (Action.REINFORCE, 1)
    assert (await store.reconcile_many([boston]))[0] == outcomes[0].model_copy(
        update={"replayed": True}
    )


async def test_an_entry_mongodb_already_deleted_is_new_and_the_log_keeps_both(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    cand = airport("Boston")
    first = await store.reconcile(cand)
    await store.reconcile(airport("Denver", "snap-b"))
    clock.advance(TTL)
    await db[LEDGER].delete_one({"_id": cand.candidate_id})  # what the TTL monitor does
    single = await store.reconcile(cand)
    # Boston was said before Denver: applied again it reinforces its own version in
    # history (idempotently) and Denver stays current (SPEC L2).
    assert (single.replayed, single.action, single.version) == (False, Action.REINFORCE, 1)
    clock.advance(TTL)
    await db[LEDGER].delete_one({"_id": cand.candidate_id})
    batched = (await store.reconcile_many([cand]))[0]
    assert (batched.replayed, batched.action, batched.version) == (False, Action.REINFORCE, 1)
    assert (await store.reconcile(cand)) == batched.model_copy(update={"replayed": True})
    logged = await db[DECISIONS].find({"candidate_id": cand.candidate_id}).sort("at").to_list()
    assert [d["outcome"]["version"] for d in logged] == [first.version, 1, 1]
    assert await db[MEMORIES].count_documents({}) == 2, "no version was added by the replays"
    assert sum(d["_id"] == cand.candidate_id for d in logged) == 1


async def test_a_keyed_save_is_replayed_before_the_ttl_and_new_after_it(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    first = await store.reconcile(keyed("Boston"), fingerprint="boston")
    clock.advance(TTL / 2)
    assert (await store.reconcile(keyed("Boston"), fingerprint="boston")).replayed
    with pytest.raises(InputError):  # the key still stands for the first request
        await store.reconcile(keyed("Denver"), fingerprint="denver")
    clock.advance(TTL / 2)
    # expired: the key is free, even for another request
    again = await store.reconcile(keyed("Denver"), fingerprint="denver")
    assert (again.replayed, again.action, again.version) == (False, Action.UPDATE, 2)
    assert again.memory_id == first.memory_id
    assert await store.reconcile(keyed("Denver"), fingerprint="denver") == again.model_copy(
        update={"replayed": True}
    )


async def test_concurrent_repeats_after_expiry_apply_once(db: AsyncDatabase[Document]) -> None:
    clock = Clock()
    stores = [await make_store(db, clock) for _ in range(2)]
    await stores[0].reconcile(airport("Boston", "snap-0", position=1))
    await stores[0].reconcile(keyed("Boston"), fingerprint="boston")
    clock.advance(TTL)
    outcomes = await asyncio.gather(
        *(stores[i % 2].reconcile(keyed("Denver"), fingerprint="denver") for i in range(6))
    )
    assert sum(not o.replayed for o in outcomes) == 1
    assert len({(o.action, o.version_id) for o in outcomes}) == 1
    assert outcomes[0].action is Action.UPDATE
    versions = await stores[0].history(outcomes[0].memory_id, [ME])
    assert [v.version for v in versions] == [1, 2]


async def test_with_no_ttl_entries_never_expire_and_there_is_no_ttl_index(
    db: AsyncDatabase[Document],
) -> None:
    clock = Clock()
    store = await make_store(db, clock, ttl=None)
    cand = airport("Boston")
    await store.reconcile(cand)
    entry = await db[LEDGER].find_one({"_id": cand.candidate_id})
    assert entry is not None
    assert "expires_at" not in entry
    assert list(await db[LEDGER].index_information()) == ["_id_"]
    clock.advance(100 * 365 * 24 * 3600)
    assert (await store.reconcile(cand)).replayed
    assert (await store.reconcile_many([cand]))[0].replayed


async def test_pending_entries_have_no_expiry(db: AsyncDatabase[Document]) -> None:
    clock = Clock()
    store = await make_store(db, clock)
    cand = airport("Boston")
    # what a crash right after marking the candidate pending leaves behind
    await db[LEDGER].insert_one({"_id": cand.candidate_id, "state": "pending", "at": clock()})
    clock.advance(10 * TTL)
    out = await store.reconcile(cand)
    assert (out.replayed, out.action) == (False, Action.ADD)


# -- the SDK's direct saves, wired from the settings ------------------------------------


@pytest.fixture
async def short_lived(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    reconcile = settings.reconcile.model_copy(update={"ledger_ttl_s": TTL})
    with_ttl = settings.model_copy(update={"reconcile": reconcile})
    embedder = HashingEmbedder(64)
    async with AsyncMemory(project_id="travel", settings=with_ttl, embedder=embedder) as m:
        yield m


async def test_a_keyed_sdk_save_is_new_once_its_key_expired(
    short_lived: AsyncMemory, db: AsyncDatabase[Document]
) -> None:
    chat = short_lived.bind(MemoryRequestContext(user_id="alice", session_id="s"))
    first = await chat.save_semantic("home-airport", BOSTON, idempotency_key="k")
    [entry] = await db[LEDGER].find({}).to_list()
    assert entry["expires_at"] - entry["at"] == timedelta(seconds=TTL)  # the setting is used
    assert await chat.save_semantic("home-airport", BOSTON, idempotency_key="k") == first
    # as if TTL seconds had passed (the server has not deleted the entry yet)
    await db[LEDGER].update_one({"_id": entry["_id"]}, {"$set": {"expires_at": entry["at"]}})
    again = await chat.save_semantic("home-airport", DENVER, idempotency_key="k")
    assert (again.action, again.version) == (Action.UPDATE, 2)
    assert await chat.save_semantic("home-airport", DENVER, idempotency_key="k") == again


async def test_a_claim_whose_deadline_ends_while_planning_is_given_back(
    db: AsyncDatabase[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save claimed, then cut off by its deadline while planning (a slow judge, say),
    wrote nothing: its pending entry goes, so the client's retry plans at once."""
    store = await make_store(db, Clock())
    deadline = Deadline(None)
    plan = store.plan

    async def judged_too_late(c: MemoryCandidate) -> Decision:
        decision = await plan(c)
        deadline.abandon()  # the client hung up while the judge was thinking
        return decision

    monkeypatch.setattr(store, "plan", judged_too_late)
    with within(deadline), pytest.raises(DeadlineExceeded):
        await store.reconcile(keyed("Boston"), fingerprint="request-1")
    assert await db[LEDGER].count_documents({}) == 0
    assert await db[MEMORIES].count_documents({}) == 0
    monkeypatch.setattr(store, "plan", plan)
    again = await store.reconcile(keyed("Boston"), fingerprint="request-1")
    assert again.action is Action.ADD
    assert not again.replayed
    entry = await db[LEDGER].find_one({"_id": "cand_keyed"})
    assert entry is not None
    assert entry["state"] == "done"
