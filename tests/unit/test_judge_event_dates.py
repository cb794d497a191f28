"""The judge sees both clocks (SPEC L1, L2): when each statement was said and when its
fact holds or its event happened, labelled apart, so an older event told later can be
told from a change."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from mongomem.ltm import Neighbour, ScriptedJudge
from mongomem.ltm.judge import (
    BATCH_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    JudgeQuestion,
    StatedTimes,
    decide,
    question_for,
)
from mongomem.ltm.plan import Thresholds
from mongomem.ltm.testing import candidate
from mongomem.models import Action, EventTime, MemoryCandidate, MemoryScope

ME = MemoryScope(project_id="p1", user_id="u1")
LEARNED = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
STATED = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)  # said later …
TRIP = EventTime(valid_from=date(2025, 12, 20), valid_to=date(2025, 12, 27), phrase="at Christmas")
OLD_TRIP = EventTime(valid_from=date(2024, 5, 1), valid_to=date(2024, 5, 31), phrase="in May 2024")


def existing() -> Neighbour:
    return Neighbour(
        memory_id="mem_1",
        version=1,
        memory_type="semantic",
        scope=ME,
        key="last-trip",
        text="The user travelled to Lisbon at Christmas.",
        similarity=0.9,
    )


def told_later(event: EventTime | None = OLD_TRIP) -> MemoryCandidate:
    """… about an event before the existing one's."""
    c = candidate(
        "semantic", label="last-trip", text="The user travelled to Rome in May 2024.", at=STATED
    )
    return c.model_copy(update={"event": event})


async def stored_trip(_: Neighbour) -> StatedTimes:
    return StatedTimes(evidence_at=(LEARNED,), event=TRIP)


async def test_the_prompt_shows_each_side_s_event_dates_beside_its_evidence_time() -> None:
    question = await question_for(told_later(), [existing()], Thresholds(), stored_trip)
    assert question is not None
    assert (question.existing_event, question.new_event) == (TRIP, OLD_TRIP)
    shown = json.loads(question.render())
    assert shown["existing"]["evidence_dates"] == [LEARNED.isoformat()]
    assert shown["existing"]["event_dates"] == {
        "valid_from": "2025-12-20",
        "valid_to": "2025-12-27",
        "phrase": "at Christmas",
    }
    assert shown["new"]["stated_at"] == STATED.isoformat()
    assert shown["new"]["event_dates"] == {
        "valid_from": "2024-05-01",
        "valid_to": "2024-05-31",
        "phrase": "in May 2024",
    }


async def test_an_open_range_and_no_date_are_shown_as_such() -> None:
    since = EventTime(valid_from=date(2020, 1, 1))
    question = await question_for(told_later(since), [existing()], Thresholds())
    assert question is not None
    shown = json.loads(question.render())
    assert shown["new"]["event_dates"] == {
        "valid_from": "2020-01-01",
        "valid_to": None,
        "phrase": None,
    }
    assert shown["existing"]["event_dates"] is None  # the store knew no date
    # an event that says nothing is no event: the question equals one without it
    blank = await question_for(told_later(EventTime()), [existing()], Thresholds())
    none = await question_for(told_later(None), [existing()], Thresholds())
    assert blank is not None
    assert blank == none
    assert blank.new_event is None


def test_the_judge_is_told_what_each_clock_means() -> None:
    for label in ("evidence_dates", "stated_at", "event_dates", "older event told later"):
        assert label in SYSTEM_PROMPT
        assert label in BATCH_SYSTEM_PROMPT


async def test_a_judge_deciding_by_the_event_dates_gets_them() -> None:
    """A scripted judge that answers REINFORCE for an older event told later (the memory
    stays as it is) and UPDATE otherwise can only do so when it is shown both dates."""

    def by_event(q: JudgeQuestion) -> Action:
        older = (
            q.new_event is not None
            and q.existing_event is not None
            and q.new_event.valid_to is not None
            and q.existing_event.valid_from is not None
            and q.new_event.valid_to < q.existing_event.valid_from
        )
        return Action.REINFORCE if older else Action.UPDATE

    judge = ScriptedJudge(by_event)
    decision = await decide(told_later(), [existing()], Thresholds(), judge, stored_trip)
    assert judge.calls == 1
    assert decision.action is Action.REINFORCE  # the judge could see the older event
    changed = await decide(
        told_later(EventTime(valid_from=date(2026, 2, 1))),
        [existing()],
        Thresholds(),
        judge,
        stored_trip,
    )
    assert changed.action is Action.UPDATE
