"""The synthetic recall set of ``bench.recall`` (``bench/recall_data.py``, ``tests/data/recall``).

What makes it a fair test of retrieval: varied small talk (no line said twice
by one user), the five kinds of question in a realistic mix, gold ids that
exist, and a held-out part fixed by a hash rule whose result was written down
before the set was first measured.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime

import pytest

from bench.recall_data import (
    ASKABLE,
    HELD_OUT_DIGEST,
    MAX_REPEATS,
    OUT,
    PAIRS,
    TOPICS,
    build,
    held_out,
    held_out_digest,
    time_questions,
)
from mongomem.adapters.lexical import tokenize

SESSIONS = json.loads((OUT / "sessions.json").read_text())
QUESTIONS = json.loads((OUT / "questions.json").read_text())
TIMED = json.loads((OUT / "time_questions.json").read_text())
TURNS = {t["id"]: (s, t) for s in SESSIONS for t in s["turns"]}
NAMES = {w for pair in PAIRS for name in pair for w in tokenize(name)}


def test_the_files_are_what_the_generator_writes() -> None:
    sessions, questions = build()
    assert sessions == SESSIONS
    assert questions == QUESTIONS
    assert time_questions(sessions) == TIMED


def test_no_line_is_said_twice_by_one_user() -> None:
    said = Counter((s["user"], t["text"]) for s in SESSIONS for t in s["turns"])
    assert max(said.values()) <= MAX_REPEATS == 1
    sentences = Counter(
        (s["user"], sentence)
        for s in SESSIONS
        for t in s["turns"]
        for sentence in re.split(r"(?<=[.!?]) ", t["text"])
    )
    assert max(sentences.values()) <= MAX_REPEATS, sentences.most_common(3)
    # and the small talk is not a handful of sentences with one word swapped
    for user in {s["user"] for s in SESSIONS}:
        lines = [t["text"] for s in SESSIONS if s["user"] == user for t in s["turns"]]
        openings = Counter(" ".join(text.split()[:4]) for text in lines)
        assert max(openings.values()) <= 12, openings.most_common(3)


def test_size_and_mix_of_kinds() -> None:
    assert len(SESSIONS) >= 40
    assert len(QUESTIONS) >= 150
    kinds = Counter(q["kind"] for q in QUESTIONS)
    assert set(kinds) == {"lexical", "paraphrase", "multi-hop", "temporal", "two-speaker"}
    assert all(n >= 0.08 * len(QUESTIONS) for n in kinds.values()), kinds
    assert len({q["id"] for q in QUESTIONS + TIMED}) == len(QUESTIONS) + len(TIMED)


def test_gold_ids_exist_and_fit_their_kind() -> None:
    for q in QUESTIONS:
        assert q["gold"]
        assert all(g in TURNS and TURNS[g][0]["user"] == q["user"] for g in q["gold"])
        words = set(tokenize(q["question"])) - NAMES
        shared = [words & (set(tokenize(TURNS[g][1]["text"])) - NAMES) for g in q["gold"]]
        if q["kind"] == "lexical":
            assert any(shared), q
        if q["kind"] == "multi-hop":
            assert len({TURNS[g][0]["session"] for g in q["gold"]}) == 2, q
        if q["kind"] == "two-speaker":
            [g] = q["gold"]
            session, turn = TURNS[g]
            others = {t["speaker"] for t in session["turns"]} - {turn["speaker"]}
            assert turn["speaker"] in q["question"], q
            assert others, q


def test_time_questions_gold_is_the_subject_inside_the_window_and_was_said_before() -> None:
    assert len(TIMED) >= 30
    for q in TIMED:
        asked = datetime.fromisoformat(q["as_of"])
        [subject] = [t for t in ASKABLE if f"about {TOPICS[t][0]} " in q["question"]]
        assert all(subject in TURNS[g][1]["topics"] for g in q["gold"])
        dates = {datetime.fromisoformat(TURNS[g][0]["date"]) for g in q["gold"]}
        assert max(dates) <= asked
        earlier = [
            t
            for s in SESSIONS
            if s["user"] == q["user"] and datetime.fromisoformat(s["date"]) < min(dates)
            for t in s["turns"]
            if subject in t.get("topics", ())
        ]
        assert earlier, q


def test_held_out_part_is_fixed_by_the_hash_rule_written_down_before_measuring() -> None:
    items = QUESTIONS + TIMED
    assert all(q["held_out"] == held_out(q["id"]) for q in items)
    ids = [q["id"] for q in items if q["held_out"]]
    assert held_out_digest(ids) == HELD_OUT_DIGEST
    assert 0.1 * len(items) <= len(ids) <= 0.3 * len(items)


@pytest.mark.parametrize("qid", ["user-1/q01", "user-3/time07"])
def test_held_out_is_a_salted_hash_of_the_id(qid: str) -> None:
    import hashlib

    assert held_out(qid) == (hashlib.sha256(("recall-v2/" + qid).encode()).digest()[0] < 52)
