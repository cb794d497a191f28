"""Invariants of the space scoring (SPEC H2): weights, threshold, top-k, hybrid formula."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from mongomem.spaces.scoring import (
    Scored,
    combine,
    cosine_similarity,
    keyword_overlap,
    rank,
    score_item,
)

unit = st.floats(min_value=-1, max_value=1, allow_nan=False)
vector = st.lists(st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=4, max_size=4)
words = st.lists(
    st.sampled_from(["refund", "blender", "router", "gold", "late", "shoes"]), max_size=6
)


def scored(ident: str, score: float) -> Scored[str]:
    return Scored(ident, ident, score, score, 0.0, {})


@given(meaning=unit, keyword=st.floats(0, 1), alpha=st.floats(0, 1))
def test_hybrid_is_a_convex_mix_and_meaning_ignores_keywords(
    meaning: float, keyword: float, alpha: float
) -> None:
    mixed = combine(meaning, keyword, "hybrid", alpha)
    assert min(meaning, keyword) - 1e-9 <= mixed <= max(meaning, keyword) + 1e-9
    assert combine(meaning, keyword, "meaning", alpha) == meaning


@given(a=vector, b=vector)
def test_cosine_is_bounded_and_symmetric(a: list[float], b: list[float]) -> None:
    value = cosine_similarity(a, b)
    assert -1.0 <= value <= 1.0
    assert math.isclose(value, cosine_similarity(b, a), abs_tol=1e-12)


@given(q=words, d=words)
def test_keyword_overlap_is_a_share_of_the_query(q: list[str], d: list[str]) -> None:
    value = keyword_overlap(" ".join(q), " ".join(d))
    assert 0.0 <= value <= 1.0
    if q and set(q) <= set(d):
        assert value == 1.0
    if not set(q) & set(d):
        assert value == 0.0


@given(
    scores=st.lists(unit, max_size=30),
    threshold=unit,
    top_k=st.integers(min_value=1, max_value=10),
)
def test_rank_keeps_the_best_above_threshold(
    scores: list[float], threshold: float, top_k: int
) -> None:
    items = [scored(f"i{n:02d}", s) for n, s in enumerate(scores)]
    best = rank(items, threshold=threshold, top_k=top_k)
    passing = [s for s in items if s.score >= threshold]
    assert len(best) == min(top_k, len(passing))
    assert all(s.score >= threshold for s in best)
    assert [s.score for s in best] == sorted((s.score for s in best), reverse=True)
    if best:
        left_out = [s for s in passing if s not in best]
        assert all(s.score <= best[-1].score for s in left_out)


@given(
    cos_a=st.floats(-1, 1),
    cos_b=st.floats(-1, 1),
    w_a=st.floats(0.01, 100),
    w_b=st.floats(0.01, 100),
)
def test_meaning_is_the_weighted_mean_of_argument_cosines(
    cos_a: float, cos_b: float, w_a: float, w_b: float
) -> None:
    # 2-d unit vectors with the wanted cosine against (1, 0).
    def at(cos: float) -> list[float]:
        return [cos, math.sqrt(max(0.0, 1 - cos * cos))]

    result = score_item(
        "x",
        "x",
        weights={"a": w_a, "b": w_b},
        query_vectors={"a": [1.0, 0.0], "b": [1.0, 0.0]},
        query_texts={"a": "", "b": ""},
        item_vectors={"a": at(cos_a), "b": at(cos_b)},
        item_texts={},
        mode="meaning",
        alpha=0.5,
    )
    expected = (w_a * cos_a + w_b * cos_b) / (w_a + w_b)
    assert math.isclose(result.meaning, expected, abs_tol=1e-9)
    assert result.score == result.meaning
