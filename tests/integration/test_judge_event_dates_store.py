"""The store shows the judge the stored version's event dates beside its evidence dates
(SPEC L1, L2), read back from MongoDB, and the candidate's own."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document
from mongomem.ltm import MemoryStore, ScriptedJudge
from mongomem.ltm.testing import candidate
from mongomem.models import Action, EventTime, MemoryCandidate
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

CHRISTMAS = EventTime(
    valid_from=date(2025, 12, 20), valid_to=date(2025, 12, 27), phrase="at Christmas"
)
MAY = EventTime(valid_from=date(2024, 5, 1), valid_to=date(2024, 5, 31), phrase="in May 2024")


def trip(city: str, snapshot: str, at: datetime, event: EventTime | None) -> MemoryCandidate:
    c = candidate(
        "semantic",
        label="last-trip",
        text=f"The user travelled to {city}.",
        snapshot=snapshot,
        at=at,
    )
    return c.model_copy(update={"event": event})


async def test_the_judge_sees_the_stored_event_dates_and_the_candidate_s(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    judge = ScriptedJudge(lambda q: Action.REINFORCE)
    store = MemoryStore(mongo[settings.mongodb.database], judge=judge)
    await store.setup()
    learned, told = datetime(2026, 1, 2, 9, tzinfo=UTC), datetime(2026, 3, 1, 9, tzinfo=UTC)
    await store.reconcile(trip("Lisbon", "snap-a", learned, CHRISTMAS))
    out = await store.reconcile(trip("Rome", "snap-b", told, MAY))  # an older trip, told later
    assert (out.action, judge.calls) == (Action.REINFORCE, 1)
    question = judge.questions[0]
    assert question.existing_evidence_at == (learned,)
    assert question.existing_event == CHRISTMAS
    assert question.new_stated_at == told
    assert question.new_event == MAY
    rendered = question.render()
    assert '"phrase": "at Christmas"' in rendered
    assert '"valid_from": "2024-05-01"' in rendered
    # what the judge read is what the decision log accounts for
    logged = await store.decisions.find_one({"_id": out.candidate_id})
    assert logged is not None
    assert logged["judge_input_chars"] == len(rendered)


async def test_a_version_without_an_event_shows_none(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    judge = ScriptedJudge(lambda q: Action.UPDATE)
    store = MemoryStore(mongo[settings.mongodb.database], judge=judge)
    await store.setup()
    await store.reconcile(trip("Lisbon", "snap-a", datetime(2026, 1, 2, tzinfo=UTC), None))
    await store.reconcile(trip("Rome", "snap-b", datetime(2026, 3, 1, tzinfo=UTC), MAY))
    (question,) = judge.questions
    assert (question.existing_event, question.new_event) == (None, MAY)


async def test_a_batched_judge_call_shows_each_question_s_event_dates(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """Candidates of one snapshot go to the judge in one call (SPEC I6): each question of
    the batch carries its own stored and stated event dates."""
    judge = ScriptedJudge(lambda q: Action.UPDATE)
    store = MemoryStore(mongo[settings.mongodb.database], judge=judge)
    await store.setup()
    learned, told = datetime(2026, 1, 2, 9, tzinfo=UTC), datetime(2026, 3, 1, 9, tzinfo=UTC)
    await store.reconcile(trip("Lisbon", "snap-a", learned, CHRISTMAS))
    await store.reconcile(
        candidate(
            "semantic",
            label="home-city",
            text="The user lives in Porto.",
            snapshot="a2",
            at=learned,
        ).model_copy(update={"event": EventTime(valid_from=date(2020, 1, 1))})
    )
    rome = trip("Rome", "snap-b", told, MAY)
    moved = candidate(
        "semantic",
        label="home-city",
        text="The user lives in Braga.",
        snapshot="snap-b",
        position=1,
        at=told,
    ).model_copy(update={"event": EventTime(valid_from=date(2026, 2, 1), phrase="since February")})
    await store.reconcile_many([rome, moved])
    (batch,) = judge.batches
    events = {q.existing_key: (q.existing_event, q.new_event) for q in batch}
    assert events == {
        "last-trip": (CHRISTMAS, MAY),
        "home-city": (
            EventTime(valid_from=date(2020, 1, 1)),
            EventTime(valid_from=date(2026, 2, 1), phrase="since February"),
        ),
    }
