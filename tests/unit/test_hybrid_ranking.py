"""BM25 index (checked against bm25s), reciprocal-rank fusion, and the memory index's
hybrid ranking kept in step with upserts, drops and compaction (SPEC M1)."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from mongomem.adapters.lexical import LexicalIndex, tokenize
from mongomem.ltm.index import Row, ScopeIndex
from mongomem.ranking import fuse

CORPUS = [
    "The user's home airport is Denver now.",
    "Flights from Boston to Denver are cheaper on Tuesdays.",
    "I prefer an aisle seat on long flights.",
    "My sister Anna moved to Lisbon last May.",
    "We adopted a dog called Pixel in March.",
    "The dog needs a walk every morning before work.",
    "Anna visited Porto and Lisbon with her friends.",
]


def test_tokenize_stems_and_drops_stop_words() -> None:
    assert tokenize("The Flights were MOVED to Lisbon!") == ["flight", "move", "lisbon"]
    assert tokenize("the and of") == []


def test_tokenize_drops_possessive_and_contraction_endings() -> None:
    # "Jonas's" once made a term "s" that matched every "it's" and "Rosalind's"
    assert tokenize("Jonas's car") == tokenize("Jonas car")
    assert "s" not in tokenize("Rosalind’s wedding, it's May")
    assert tokenize("I've moved, isn't it great? I can't wait") == ["move", "great", "wait"]
    assert tokenize("a b 7 x2") == ["7", "x2"]  # one letter is no term, one digit is


def test_fuse_weights_the_lexical_list_and_steepens_with_small_k() -> None:
    lexical = [("x", 9.0)]
    dense = [("b", 0.9), ("c", 0.8)]
    # textbook RRF: a first place by words alone beats a second by meaning
    assert [r.key for r in fuse(lexical, dense, 3, k=60, lexical_weight=1.0)] == ["b", "x", "c"]
    # the tuned fusion: it does not
    tuned = fuse(lexical, dense, 3)
    assert [r.key for r in tuned] == ["b", "c", "x"]
    assert tuned[2].fused == pytest.approx(0.35 / 6)
    # agreement still wins: words first and meaning third beat meaning first
    assert fuse(lexical, [*dense, ("x", 0.1)], 3)[0].key == "x"


@pytest.mark.parametrize("query", ["flights to denver", "anna lisbon", "dog walk morning"])
def test_scores_equal_bm25s_lucene(query: str) -> None:
    index = LexicalIndex()
    for i, text in enumerate(CORPUS):
        index.add(i, text)
    reference = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    reference.index([tokenize(t) for t in CORPUS], show_progress=False)
    expected = reference.get_scores(tokenize(query))
    assert np.allclose(index.scores(query, len(CORPUS)), expected, atol=1e-5)
    assert max(expected) > 0


def test_remove_is_as_if_never_added() -> None:
    index = LexicalIndex()
    for i, text in enumerate(CORPUS):
        index.add(i, text)
    index.remove(3)
    index.remove(3)  # twice: a no-op
    fresh = LexicalIndex()
    for i, text in enumerate(CORPUS):
        if i != 3:
            fresh.add(i, text)
    assert np.allclose(index.scores("anna lisbon", 7), fresh.scores("anna lisbon", 7))
    assert [p for p, _ in index.top("anna lisbon", 7, 10)] == [6]
    index.add(3, "Anna lives in Lisbon")  # replace at a position
    assert 3 in index
    assert len(index) == 7


def test_top_respects_mask_and_limit() -> None:
    index = LexicalIndex()
    for i, text in enumerate(CORPUS):
        index.add(i, text)
    mask = np.ones(7, dtype=bool)
    mask[1] = False
    found = index.top("flights denver", 7, 5, mask)
    assert 1 not in [p for p, _ in found]
    assert next(p for p, _ in found) == 0
    assert len(index.top("flights denver", 7, 1)) == 1


def test_fuse_prefers_agreement_and_explains_ranks() -> None:
    lexical = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
    dense = [("b", 0.9), ("d", 0.8), ("a", 0.1)]
    out = fuse(lexical, dense, 10)
    assert [r.key for r in out][:2] in (["b", "a"], ["a", "b"])
    assert out[0].key == "b"  # rank 2 + rank 1 beats rank 1 + rank 3
    b = out[0]
    assert (b.lexical_rank, b.dense_rank, b.rank) == (2, 1, 1)
    d = next(r for r in out if r.key == "d")
    assert d.lexical_rank is None
    assert d.dense_rank == 2
    assert [r.rank for r in out] == list(range(1, 5))
    assert len(fuse(lexical, dense, 2)) == 2
    assert fuse([], [], 5) == []


def _vec(seed: int, dims: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def _row(i: int, text: str, version: int = 1) -> Row:
    return Row(f"v{i}-{version}", f"m{i}", version, f"key-{i}", text)


def test_scope_index_hybrid_follows_writes_drops_and_compaction() -> None:
    index = ScopeIndex()
    for i, text in enumerate(CORPUS):
        index.upsert(_row(i, text), _vec(i))
    query = _vec(100)
    found = index.hybrid(query, "Pixel the dog", 7)
    by_words = {r.memory_id: rk.lexical_rank for r, _, rk in found}
    assert by_words["m4"] == 1  # first by words, whatever the cosine says
    # an update replaces the text: the old words no longer find it
    index.upsert(_row(4, "We adopted a cat.", version=2), _vec(4))
    assert all(r.memory_id != "m4" or r.version == 2 for r, _, _ in index.hybrid(query, "Pixel", 7))
    assert not any(rk.lexical_rank is not None for _, _, rk in index.hybrid(query, "Pixel", 7))
    # a delete is gone from both retrievers
    index.remove("v6-1", "m6")
    assert all(r.memory_id != "m6" for r, _, _ in index.hybrid(query, "Porto", 7))
    # compaction moves rows; the words still find the right ones
    for i in range(10, 2200):
        index.upsert(_row(i, f"filler {i}"), _vec(i))
    for i in range(10, 2200):
        index.remove(f"v{i}-1", f"m{i}")
    assert len(index.rows) < 100  # compacted
    top = [h for h in index.hybrid(query, "sister Lisbon", 7) if h[2].lexical_rank == 1]
    assert top[0][0].memory_id == "m3"
    assert top[0][1] == pytest.approx(index.similarity(top[0][0], query))


def test_scope_index_cosine_only_and_key_prefix() -> None:
    index = ScopeIndex()
    for i, text in enumerate(CORPUS):
        index.upsert(_row(i, text), _vec(i))
    found = index.hybrid(_vec(2), "nothing matches zebra", 2, lexical=False)
    assert found[0][0].memory_id == "m2"
    assert all(rk.lexical_rank is None for _, _, rk in found)
    only = index.hybrid(_vec(2), "Lisbon", 7, key_prefix="key-3")
    assert [r.memory_id for r, _, _ in only] == ["m3"]
