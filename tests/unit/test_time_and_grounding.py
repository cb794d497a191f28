"""Extraction knows when and from which turns (SPEC L1, L3, L4): dates resolved and kept
with their phrase, evidence at the turns' own time, items grounded in the window's turns.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from pydantic import ValidationError
from test_extractor_handler import FACT, Known, run

from mongomem import metrics
from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.codec import decode
from mongomem.models import EventTime, MemoryCandidate, Snapshot, SnapshotTurn, Turn
from mongomem.stages.extractor.core import (
    MERGED,
    NOT_IN_WINDOW,
    UNCITED,
    ground,
    render_messages,
    to_candidates,
)
from mongomem.stages.extractor.core import (
    Known as KnownMemory,
)
from mongomem.stages.extractor.types import builtin_spec, event_time, parse_model_date
from mongomem.stm.recall import mark_recalled
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply, make_snapshot

SEMANTIC = builtin_spec("semantic")
EPISODIC = builtin_spec("episodic")
MAY_8 = datetime(2023, 5, 8, 18, 30, tzinfo=UTC)


def answer(spec: object, items: list[dict[str, object]]) -> object:
    return spec.output_model.model_validate({"items": items})  # type: ignore[attr-defined]


# -- dates ---------------------------------------------------------------------------


def test_model_dates_parse_to_days_and_partial_dates_to_their_range() -> None:
    assert parse_model_date("2023-05-07", end=False) == date(2023, 5, 7)
    assert parse_model_date("2023-05-07T15:00:00Z", end=True) == date(2023, 5, 7)
    assert parse_model_date("2023-02", end=True) == date(2023, 2, 28)
    assert parse_model_date("2023-12", end=True) == date(2023, 12, 31)
    assert parse_model_date("2023", end=False) == date(2023, 1, 1)
    may = event_time({"valid_from": "2023-05", "time_phrase": " last  May "})
    assert may == EventTime(
        valid_from=date(2023, 5, 1), valid_to=date(2023, 5, 31), phrase="last May"
    )
    assert event_time({"valid_from": None, "valid_to": None, "time_phrase": None}) is None
    at_three = event_time({"valid_from": "2023-05-09T15:00:00+00:00"})
    assert at_three == EventTime(valid_from=date(2023, 5, 9), valid_to=date(2023, 5, 9))
    since = event_time({"valid_from": "2019", "time_phrase": "since 2019"}, event=False)
    assert since == EventTime(valid_from=date(2019, 1, 1), phrase="since 2019"), "open-ended"


@pytest.mark.parametrize("bad", ["yesterday", "07/05/2023", "2023-13-01", "2023-02-30", ""])
def test_an_unparseable_model_date_makes_the_item_invalid(bad: str) -> None:
    item = {"label": "x", "fact": "y", "seqs": [1], "valid_from": bad or " "}
    with pytest.raises(ValidationError, match="not an ISO date"):
        SEMANTIC.item_model.model_validate(item)


def test_a_range_that_ends_before_it_starts_is_invalid() -> None:
    item = {"label": "x", "fact": "y", "seqs": [1], "valid_from": "2023-05-09"}
    with pytest.raises(ValidationError, match="before valid_from"):
        SEMANTIC.item_model.model_validate({**item, "valid_to": "2023-05-01"})
    with pytest.raises(ValidationError, match="before valid_from"):
        EventTime(valid_from=date(2023, 5, 9), valid_to=date(2023, 5, 1))


def test_a_relative_date_is_stored_resolved_beside_its_phrase_at_the_turns_time() -> None:
    """The scripted model resolves "yesterday" against the turn's own date (2023-05-08):
    what is stored is that date and the phrase, and the evidence time is the turn's."""
    snapshot = make_snapshot(
        [("user", "Hi"), ("user", "I ran a charity race yesterday!")], start=MAY_8
    )
    _, user = render_messages(EPISODIC, snapshot)
    said = [json.loads(line) for line in user["content"].splitlines() if line.startswith("{")]
    assert said[1]["at"].startswith("2023-05-08"), "each turn carries its own date"
    items = answer(
        EPISODIC,
        [
            {
                "title": "Charity race",
                "account": "The user ran a charity race.",
                "participants": ["user"],
                "valid_from": "2023-05-07",
                "time_phrase": "yesterday",
                "seqs": [2],
            }
        ],
    )
    grounded = ground(EPISODIC, items, snapshot)  # type: ignore[arg-type]
    (cand,) = to_candidates(EPISODIC, snapshot, grounded.items, [[1.0]], model="m", now=MAY_8)
    assert cand.event == EventTime(
        valid_from=date(2023, 5, 7), valid_to=date(2023, 5, 7), phrase="yesterday"
    )
    assert cand.fields["when"] == '2023-05-07 ("yesterday")'
    assert cand.evidence.at == snapshot.turns[1].created_at == MAY_8 + timedelta(seconds=1)
    assert cand.evidence.at != snapshot.closed_at, "never the stream time of the close"
    assert cand.evidence.seqs == (2,)


# -- grounding -----------------------------------------------------------------------


def test_items_citing_no_turn_of_the_window_or_only_recalled_context_are_dropped() -> None:
    recalled_only = mark_recalled("- home-airport: The user's home airport is Boston.")
    snapshot = make_snapshot(
        [("user", "My seat preference is aisle."), ("user", recalled_only)], first_seq=5
    )
    fact = {"label": "seat", "fact": "The user prefers the aisle."}
    items = answer(
        SEMANTIC,
        [
            {**fact, "seqs": [5]},
            {"label": "a", "fact": "uncited"},
            {"label": "b", "fact": "another window", "seqs": [1]},
            {"label": "c", "fact": "partly absent", "seqs": [5, 9]},
            {"label": "home-airport", "fact": "recalled, not said", "seqs": [6]},
        ],
    )
    grounded = ground(SEMANTIC, items, snapshot)  # type: ignore[arg-type]
    assert [i.key for i in grounded.items] == ["seat"]
    assert grounded.dropped == {UNCITED: 1, NOT_IN_WINDOW: 3}


@pytest.mark.parametrize("correction_first", [False, True])
def test_one_key_twice_keeps_the_item_citing_the_latest_turn(correction_first: bool) -> None:
    snapshot = make_snapshot([("user", "My home airport is Boston."), ("user", "No: Denver.")])
    old = {"label": "home-airport", "fact": "The user's home airport is Boston.", "seqs": [1]}
    new = {"label": "home-airport", "fact": "The user's home airport is Denver.", "seqs": [2]}
    listed = [new, old] if correction_first else [old, new]
    grounded = ground(SEMANTIC, answer(SEMANTIC, listed), snapshot)  # type: ignore[arg-type]
    (item,) = grounded.items
    assert item.text == "The user's home airport is Denver."
    assert grounded.dropped == {MERGED: 1}


def _known_echo(request: ChatRequest) -> Reply:
    """An endpoint that copies the KNOWN block back as items (citing what it can)."""
    text = request.text("user")
    block = text.split("<<<KNOWN ", 1)[1].split("\n", 1)[1].split("\nKNOWN ", 1)[0]
    items = []
    for line in block.splitlines():
        known = json.loads(line)
        items.append({"label": known["key"], "fact": known["text"]})  # cites nothing
        items.append({"label": known["key"], "fact": known["text"], "seqs": [2]})  # recalled
    return Answer({"items": items})


async def test_an_endpoint_echoing_the_known_block_stores_nothing() -> None:
    """K2 shows the scope's known memories to the model; an endpoint that copies them back
    gets no candidate, so nothing can be REINFORCEd (reinforcement stays 1)."""
    boston = KnownMemory("home-airport", "The user's home airport is Boston.")
    before = metrics.EXTRACTION_DROPPED.labels("semantic", UNCITED)._value.get()
    with FakeOpenAIServer() as server:
        server.responder = _known_echo
        turns = (
            ("user", "What do you know about me?"),
            ("user", mark_recalled("- home-airport: The user's home airport is Boston.")),
        )
        outcome, sent, _, _ = await run(
            server, HashingEmbedder(16), turns=turns, known=Known([boston])
        )
        (request,) = server.chat_requests
    assert "<<<KNOWN" in request.text("user")
    assert not outcome.dead_lettered
    assert outcome.candidate_ids == ()
    assert [t for t, _ in sent if t.endswith("candidates")] == []
    assert metrics.EXTRACTION_DROPPED.labels("semantic", UNCITED)._value.get() == before + 1


@pytest.mark.parametrize(
    ("dates", "reason"),
    [
        ({"valid_from": "last Tuesday"}, "not an ISO date"),
        ({"valid_from": "2023-05-09", "valid_to": "2023-05-01"}, "before valid_from"),
    ],
)
async def test_a_model_date_that_does_not_parse_is_a_dead_letter_with_the_reason(
    dates: dict[str, str], reason: str
) -> None:
    good = {**FACT["items"][0], "label": "other-fact", "fact": "Another fact."}
    bad = {"items": [good, {**FACT["items"][0], **dates}]}  # one good item beside it
    with FakeOpenAIServer() as server:
        server.script(Answer(bad), Answer(bad), Answer(bad))
        outcome, sent, _, _ = await run(server, HashingEmbedder(16))
    assert outcome.dead_lettered
    assert reason in (outcome.error or "")
    letters = [v for t, v in sent if "dlq" in t]
    assert len(letters) == 1
    assert not [t for t, _ in sent if t.endswith("candidates")], "nothing partial"


async def test_a_valid_answer_publishes_candidates_with_the_turns_time() -> None:
    with FakeOpenAIServer() as server:
        server.script(Answer(FACT))
        outcome, sent, _, _ = await run(server, HashingEmbedder(16))
    (value,) = [v for t, v in sent if t.endswith("candidates")]
    cand = decode(value, MemoryCandidate)
    assert outcome.candidate_ids == (cand.candidate_id,)
    assert cand.evidence.seqs == (1,)
    assert cand.evidence.at == make_snapshot([("user", "x")]).turns[0].created_at


# -- speakers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["Mel\nanie", "Mel\x00", "\x1b[31mred", "Bo\u0085", "Ana\u202e", "   ", "x" * 129]
)
def test_a_speaker_with_control_characters_or_blank_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="speaker"):
        Turn(
            turn_id=Turn.make_id("p", "u", "s", 1),
            project_id="p",
            user_id="u",
            session_id="s",
            seq=1,
            role="user",
            content="hi",
            speaker=bad,
            created_at=MAY_8,
        )


def test_speakers_reach_the_prompt_and_the_prompt_assumes_no_assistant() -> None:
    base = make_snapshot([("user", "I painted a sunrise."), ("user", "Lovely!")])
    turns = (
        base.turns[0].model_copy(update={"speaker": "Melanie"}),
        base.turns[1].model_copy(update={"speaker": "Caroline"}),
    )
    snapshot = Snapshot.model_validate({**base.model_dump(), "turns": turns})
    system, user = render_messages(SEMANTIC, snapshot)
    lines = [json.loads(line) for line in user["content"].splitlines() if line.startswith("{")]
    assert [t["speaker"] for t in lines] == ["Melanie", "Caroline"]
    assert "or between two or more people" in system["content"]
    assert "names whom it is about" in system["content"]
    plain = SnapshotTurn.model_validate(base.turns[0].model_dump())
    assert "speaker" not in plain.model_dump(), "no speaker: nothing added to the encoding"


def test_subject_is_kept_and_the_user_is_no_subject() -> None:
    snapshot = make_snapshot([("user", "Melanie painted a sunrise in 2022.")])
    items = answer(
        SEMANTIC,
        [
            {"label": "melanie-art", "fact": "Melanie paints.", "subject": "Melanie", "seqs": [1]},
            {"label": "diet", "fact": "The user is vegan.", "subject": "the user", "seqs": [1]},
        ],
    )
    grounded = ground(SEMANTIC, items, snapshot)  # type: ignore[arg-type]
    assert [i.subject for i in grounded.items] == ["Melanie", None]
