"""The per-user turn index: filters compose with the ranker, removal, bad queries (SPEC M2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from mongomem.errors import InputError
from mongomem.ranking import MAX_QUERY_CHARS
from mongomem.stm.search import TurnIndex, TurnQuery, speaker_of, turn_query, turn_words

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def _index() -> TurnIndex:
    index = TurnIndex()
    rows = [
        ("t1", "s1", "Ana", "We adopted a greyhound called Pixel."),
        ("t2", "s1", "Ben", "Pixel is a lovely name."),
        ("t3", "s2", "Ana", "I start the pottery class on Thursday."),
        ("t4", "s2", "Ben", "I booked the kiln workshop in Lisbon."),
    ]
    rng = np.random.default_rng(1)
    for i, (tid, session, speaker, text) in enumerate(rows):
        doc = {
            "_id": tid,
            "session_id": session,
            "content": text,
            "metadata": {"speaker": speaker},
            "created_at": T0 + timedelta(days=i),
        }
        index.add(doc, rng.standard_normal(8).astype(np.float32))
    return index


def _ids(index: TurnIndex, **q: Any) -> list[str]:
    query = TurnQuery(**q)
    return [t for t, _, _ in index.rank(query, np.ones(8, dtype=np.float32))]


def test_filters_narrow_the_candidates_before_fusion() -> None:
    index = _index()
    assert _ids(index, query="Pixel", limit=1) in (["t1"], ["t2"])
    assert set(_ids(index, query="Pixel", sessions=("s2",))) == {"t3", "t4"}
    assert set(_ids(index, query="Pixel", speaker="ben")) == {"t2", "t4"}
    assert set(_ids(index, query="x", since=T0 + timedelta(days=2))) == {"t3", "t4"}
    assert set(_ids(index, query="x", until=T0 + timedelta(days=1))) == {"t1", "t2"}
    index.remove("t2")
    assert "t2" not in _ids(index, query="Pixel lovely name")
    assert len(index) == 3


def test_bm25_reads_content_not_the_speaker() -> None:
    doc = {"content": "hello there", "metadata": {"speaker": "Ana"}}
    assert turn_words(doc) == "hello there"
    assert speaker_of(doc) == "Ana"
    assert speaker_of({"speaker": "Ben", "metadata": {"speaker": "x"}}) == "Ben"
    assert speaker_of({"content": "x"}) is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query"),
        ({"query": "  "}, "query"),
        ({"query": "x", "since": T0 + timedelta(days=1), "until": T0}, "since"),
        ({"query": "x", "limit": 101}, "limit"),
        ({"query": "x", "neighbours": 6}, "neighbours"),
        ({"query": "x", "since": datetime(2024, 1, 1)}, "since"),  # noqa: DTZ001 (naive: refused)
    ],
)
def test_bad_turn_queries_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        turn_query(**fields)
    assert err.value.field == field
