"""Speakers' names in a turn-search query are a field, not words (SPEC M1).

A name the query mentions is left out of what the query embedding reads, and
the turns said by that speaker form a boost list in the fusion (its place is
``speaker_rank``); a query that names nobody ranks as before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from mongomem.ranking import fuse, hit_ranks
from mongomem.stm.search import TurnIndex, TurnQuery, named_speakers, without_names

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def test_named_speakers_are_whole_words_case_ignored() -> None:
    speakers = ["Maya", "Theo", "Jo"]
    assert named_speakers("What is maya's job?", speakers) == {"Maya"}
    assert named_speakers("Did Theo and Maya meet?", speakers) == {"Maya", "Theo"}
    assert named_speakers("What did Jonas say about Theodore?", speakers) == frozenset()
    assert named_speakers("anything", []) == frozenset()


def test_without_names_drops_names_and_possessives_but_never_everything() -> None:
    assert without_names("What is Maya's occupation?", {"Maya"}) == "What is occupation?"
    assert without_names("Which car does theo drive?", {"Theo"}) == "Which car does drive?"
    assert without_names("Maya", {"Maya"}) == "Maya"
    assert without_names("What is Maya's job?", set()) == "What is Maya's job?"


def test_fuse_boosts_the_speaker_list_and_explains_it() -> None:
    dense = [("theo", 0.9), ("maya", 0.8)]
    plain = fuse([], dense, 2)
    assert [r.key for r in plain] == ["theo", "maya"]
    assert all(r.speaker_rank is None for r in plain)
    boosted = fuse([], dense, 2, speaker=[("maya", 0.8)], speaker_weight=1.0)
    assert [r.key for r in boosted] == ["maya", "theo"]
    assert (boosted[0].speaker_rank, boosted[1].speaker_rank) == (1, None)
    assert hit_ranks(boosted[0]).speaker_rank == 1
    assert boosted[0].rekey("m").speaker_rank == 1


def _doc(i: int, speaker: str, content: str) -> dict[str, object]:
    return {
        "_id": f"t{i}",
        "session_id": "s1",
        "content": content,
        "metadata": {"speaker": speaker},
        "created_at": T0 + timedelta(minutes=i),
    }


def _index() -> TurnIndex:
    index = TurnIndex()
    # the query vector is closest to Theo's turn, next to Maya's
    index.add(_doc(1, "Theo", "Mine is a rusty Land Rover."), np.array([1.0, 0.0, 0.0], "f4"))
    index.add(_doc(2, "Maya", "My car is an old Volvo."), np.array([0.8, 0.6, 0.0], "f4"))
    index.add(_doc(3, "Theo", "The train was late."), np.array([0.0, 0.0, 1.0], "f4"))
    return index


def test_index_rank_boosts_turns_of_the_named_speaker() -> None:
    index = _index()
    q = TurnQuery(query="Which vehicle does Maya own?", limit=3)
    vector = np.array([1.0, 0.2, 0.0], "f4")
    before = [t for t, _, _ in index.rank(q, vector)]
    assert before[0] == "t1"
    named = named_speakers(q.query, index.names)
    assert named == {"Maya"}
    after = index.rank(q, vector, named=named)
    assert after[0][0] == "t2"
    assert after[0][2].speaker_rank == 1
    assert all(r.speaker_rank is None for t, _, r in after if t != "t2")
    # an explicit speaker filter needs no boost
    only = q.model_copy(update={"speaker": "Maya"})
    assert [(t, r.speaker_rank) for t, _, r in index.rank(only, vector, named=named)] == [
        ("t2", None)
    ]


def test_index_names_follow_adds_and_removes() -> None:
    index = _index()
    assert dict(index.names) == {"Theo": 2, "Maya": 1}
    index.remove("t2")
    assert named_speakers("What does Maya drive?", index.names) == frozenset()
    index.remove("t1")
    assert dict(index.names) == {"Theo": 1}
