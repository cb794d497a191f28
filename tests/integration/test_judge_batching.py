"""The reconciler's batch path asks the judge once per snapshot and type (SPEC I6), and
decides exactly as a judge asked one question at a time would."""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document
from mongomem.ltm import MemoryStore, ScriptedJudge
from mongomem.ltm.judge import JudgeQuestion
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryCandidate
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

FACTS = {
    "home-airport": ("User's home airport is Boston", "User flies out of Boston now"),
    "seat": ("User prefers the aisle seat", "User wants a window seat from now on"),
    "meal": ("User eats vegetarian meals", "User's meals are vegetarian"),
    "lounge": ("User has lounge access", "User has no lounge access anymore"),
}


def verdict(question: JudgeQuestion) -> Action:
    changed = any(w in question.new_text for w in ("window", "no lounge"))
    return Action.UPDATE if changed else Action.REINFORCE


def wave(snapshot: str, which: int) -> list[MemoryCandidate]:
    return [
        candidate("semantic", label=label, text=texts[which], snapshot=snapshot, position=n)
        for n, (label, texts) in enumerate(FACTS.items())
    ]


async def test_one_judge_call_per_snapshot_and_the_same_decisions_as_one_at_a_time(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    batched_judge = ScriptedJudge(verdict)
    single_judge = ScriptedJudge(verdict)
    batched = MemoryStore(mongo[settings.mongodb.database], judge=batched_judge)
    single = MemoryStore(mongo[f"{settings.mongodb.database}-single"], judge=single_judge)
    for store in (batched, single):
        await store.setup()
        await store.reconcile_many(wave("snap-a", 0))
    assert batched_judge.round_trips == single_judge.round_trips == 0  # nothing to judge yet

    together = await batched.reconcile_many(wave("snap-b", 1))
    alone = [await single.reconcile(c) for c in wave("snap-b", 1)]

    assert [o.action for o in together] == [o.action for o in alone]
    assert [o.action for o in together] == [
        Action.REINFORCE,
        Action.UPDATE,
        Action.REINFORCE,
        Action.UPDATE,
    ]
    asked = len(single_judge.questions)
    assert asked == 4  # every candidate needed the judge ...
    assert batched_judge.round_trips == 1  # ... and one call settled them all
    assert [len(b) for b in batched_judge.batches] == [4]
    assert sorted(q.candidate_id for q in batched_judge.batches[0]) == sorted(
        q.candidate_id for q in single_judge.questions
    )
