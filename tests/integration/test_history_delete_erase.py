"""Deleting and erasing when older statements entered history (SPEC L2 with J1, J2).

An older statement processed after the current version enters history with
the *higher* version number. What becomes current afterwards must follow the
order of the world, not the numbers:

* deleting the memory closes it with the current version's text, and nothing is
  current after;
* erasing the session that evidenced the current version makes current the
  statement said last among what survives (not the highest-numbered version);
* erasing the session of a history version leaves the current one as it was.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import MEMORIES, connect
from mongomem.ltm import MemoryStore, deletes, scope_for
from mongomem.ltm.documents import from_document
from mongomem.ltm.plan import history_order
from mongomem.ltm.testing import candidate
from mongomem.models import Action, Evidence, MemoryCandidate, MemoryVersion, stable_id
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2023, 5, 1, 9, 0, tzinfo=UTC)
WINDOW, AISLE, EXIT = (
    "The user's seat is window.",
    "The user's seat is aisle.",
    "The user's seat is exit row.",
)


def said(project: str, i: int, text: str, day: int, session: str) -> MemoryCandidate:
    made = candidate("semantic", project_id=project, snapshot=f"snap-{i}", label="seat", text=text)
    evidence = Evidence(
        source="snapshot",
        ref=f"snap-{project}-{i}",
        session_id=session,
        user_id="u1",
        at=T0 + timedelta(days=day),
        seqs=(1,),
    )
    return made.model_copy(
        update={"evidence": evidence, "candidate_id": stable_id("cand", project, i)}
    )


async def reconcile(settings: Settings, statements: list[MemoryCandidate]) -> None:
    client = connect(settings.mongodb)
    try:
        store = MemoryStore(client[settings.mongodb.database])
        await store.setup(probe=False)
        for c in statements:
            await store.reconcile(c)
    finally:
        await client.close()


async def versions(settings: Settings, project: str) -> list[MemoryVersion]:
    client = connect(settings.mongodb)
    try:
        docs = (
            await client[settings.mongodb.database][MEMORIES]
            .find({"scope.project_id": project})
            .to_list()
        )
    finally:
        await client.close()
    return history_order([from_document(d) for d in docs])


def memory(settings: Settings, project: str) -> AsyncMemory:
    return AsyncMemory(project_id=project, settings=settings, embedder=HashingEmbedder(64))


@pytest.fixture
def project() -> str:
    return f"hist-{uuid.uuid4().hex[:8]}"


async def test_deleting_the_current_version_closes_it_with_the_current_text(
    settings: Settings, project: str
) -> None:
    # window (day 2) first, then the older aisle (day 1): aisle is v2, in history
    await reconcile(settings, [said(project, 0, WINDOW, 2, "s2"), said(project, 1, AISLE, 1, "s1")])
    before = await versions(settings, project)
    assert [(v.version, v.text, v.status) for v in before] == [
        (2, AISLE, "superseded"),
        (1, WINDOW, "current"),
    ]
    async with memory(settings, project) as m:
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        deleted = await chat.delete_memory(before[-1].memory_id, reason="asked to forget")
        assert deleted is not None
        assert deleted.version == 3
        assert await chat.get_semantic("seat") is None
        assert await chat.search_semantic("seat") == []
    after = await versions(settings, project)
    assert [v.status for v in after] == ["superseded", "superseded", "deleted"]
    assert after[-1].text == WINDOW, "the DELETE version closes the current version's value"
    assert not [v for v in after if v.status == "current"]


async def test_erasing_the_current_versions_session_makes_the_latest_survivor_current(
    settings: Settings, project: str
) -> None:
    # said: exit row (day 0, s1), aisle (day 1, s2), window (day 2, s3); processed backwards
    await reconcile(
        settings,
        [
            said(project, 2, WINDOW, 2, "s3"),
            said(project, 1, AISLE, 1, "s2"),
            said(project, 0, EXIT, 0, "s1"),
        ],
    )
    before = await versions(settings, project)
    assert [(v.version, v.text) for v in before] == [(3, EXIT), (2, AISLE), (1, WINDOW)]
    async with memory(settings, project) as m:
        await m.erase_session("u1", "s3", confirm=True)
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        now = await chat.get_semantic("seat")
        assert now is not None
        assert now.text == AISLE, "the statement said last among the survivors, not v3"
    after = await versions(settings, project)
    assert [(v.version, v.text, v.status) for v in after] == [
        (3, EXIT, "superseded"),
        (2, AISLE, "current"),
    ]


async def test_erasing_a_later_reinforcement_hands_current_to_the_statement_between(
    settings: Settings, project: str
) -> None:
    # said: window (day 0, s1), aisle (day 2, s3), window again (day 3, s4);
    # processed window, window, aisle: aisle arrives last and older than the current
    await reconcile(
        settings,
        [
            said(project, 0, WINDOW, 0, "s1"),
            said(project, 2, WINDOW, 3, "s4"),
            said(project, 1, AISLE, 2, "s3"),
        ],
    )
    async with memory(settings, project) as m:
        await m.erase_session("u1", "s4", confirm=True)
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        now = await chat.get_semantic("seat")
        assert now is not None
        assert now.text == AISLE, "after the erasure aisle (day 2) is the latest statement"
        assert [h.memory.text for h in await chat.search_semantic("seat")] == [AISLE]
    after = await versions(settings, project)
    assert [v.text for v in after] == [WINDOW, AISLE]
    assert [v.status for v in after] == ["superseded", "current"]


async def test_erasing_a_history_versions_session_keeps_the_current_one(
    settings: Settings, project: str
) -> None:
    await reconcile(settings, [said(project, 0, WINDOW, 2, "s2"), said(project, 1, AISLE, 1, "s1")])
    async with memory(settings, project) as m:
        await m.erase_session("u1", "s1", confirm=True)
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        now = await chat.get_semantic("seat")
        assert now is not None
        assert now.text == WINDOW
    after = await versions(settings, project)
    assert [(v.version, v.text, v.status) for v in after] == [(1, WINDOW, "current")]


async def test_an_older_statement_racing_a_deletion_becomes_a_new_memory_not_a_version_past_it(
    settings: Settings, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deletion between its DELETE version and its supersede (another process, paused
    there) while an older statement is planned on the still-current version: the old code
    numbered a history version past the DELETE, so the closed memory went on."""
    client = connect(settings.mongodb)
    try:
        store = MemoryStore(client[settings.mongodb.database])
        await store.setup(probe=False)
        first = await store.reconcile(said(project, 0, WINDOW, 2, "s2"))

        async def paused(*_: object) -> None:
            return None

        monkeypatch.setattr(deletes, "_complete", paused)
        scope = scope_for("semantic", project, "u1")
        gone = await store.delete(first.memory_id, [scope], actor="test", reason="forget")
        assert gone is not None
        assert gone.version.version == 2
        monkeypatch.undo()
        older = await store.reconcile(said(project, 1, AISLE, 1, "s1"))
    finally:
        await client.close()
    assert older.action is Action.ADD
    assert older.memory_id != first.memory_id
    closed = [v for v in await versions(settings, project) if v.memory_id == first.memory_id]
    assert max(v.version for v in closed) == 2, "nothing numbered past the DELETE version"
    assert [v.status for v in closed if v.version == 2] == ["deleted"]


async def test_a_history_version_left_past_a_delete_does_not_reopen_the_memory(
    settings: Settings, project: str
) -> None:
    """Data the old race left (a history version numbered past the DELETE): a new
    statement of the key is a fresh ADD; the old code re-used the deleted memory's id and
    conflicted with its own version 1 until it gave up (WriteConflict)."""
    client = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        store = MemoryStore(db, max_attempts=3)
        await store.setup(probe=False)
        first = await store.reconcile(said(project, 0, WINDOW, 2, "s2"))
        scope = scope_for("semantic", project, "u1")
        assert await store.delete(first.memory_id, [scope], actor="test", reason="r") is not None
        v1 = await db[MEMORIES].find_one({"_id": first.version_id})
        assert v1 is not None
        straggler = {
            **v1,
            "_id": MemoryVersion.make_version_id(first.memory_id, 3),
            "version": 3,
            "status": "superseded",
            "superseded_by": first.version_id,
            "candidate_id": "cand_straggler",
            "candidate_ids": ["cand_straggler"],
        }
        await db[MEMORIES].insert_one(straggler)
        again = await MemoryStore(db, max_attempts=3).reconcile(said(project, 2, EXIT, 3, "s3"))
    finally:
        await client.close()
    assert again.action is Action.ADD
    assert again.memory_id != first.memory_id
