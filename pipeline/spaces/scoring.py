"""How an item of a space is scored against new inputs: pure functions, no I/O.

Let ``K`` be the space's (or the agent's) search keys whose argument appears in
the query inputs, ``w_k`` their weights and ``W = Σ_{k∈K} w_k``. For one item:

* **meaning** ``M = Σ_{k∈K} w_k · cos(q_k, d_k) / W`` — the weighted mean of the
  per-argument cosine similarities of the embedded key texts. An argument the
  item does not have counts as ``cos = 0``.
* **keyword** ``Kw = Σ_{k∈K} w_k · |T(q_k) ∩ T(d_k)| / |T(q_k)| / W`` — the
  weighted share of each query text's distinct word tokens (lower-cased, with
  a few stop words removed) that also occur in the item's text. 0 when a query
  text has no tokens.
* **score** ``S = M`` in ``meaning`` mode; ``S = (1 − α) · M + α · Kw`` in
  ``hybrid`` mode, with ``α`` the space's ``keyword_weight``.

An item matches when ``S ≥ threshold``; recall returns the ``top_k`` best,
ties broken by item id so the order is deterministic. Keys absent from the
query are left out of ``W`` (one cannot match on what one did not give); a
query with none of the keys is refused by the caller.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = [
    "STOP_WORDS",
    "Scored",
    "active_keys",
    "combine",
    "cosine_similarity",
    "keyword_overlap",
    "rank",
    "score_item",
    "tokens",
]

T = TypeVar("T")

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
        "my",
        "me",
        "you",
        "your",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> frozenset[str]:
    """Distinct lower-cased word tokens of ``text``, stop words removed."""
    return frozenset(w for w in (m.lower() for m in _WORD.findall(text)) if w not in STOP_WORDS)


def keyword_overlap(query: str, document: str) -> float:
    """Share of the query's distinct tokens found in the document, in [0, 1]."""
    wanted = tokens(query)
    if not wanted:
        return 0.0
    return len(wanted & tokens(document)) / len(wanted)


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity in [-1, 1] (0.0 when either vector is zero or sizes differ)."""
    if len(a) != len(b):
        return 0.0
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / (na * nb)))


def combine(
    meaning: float, keyword: float, mode: Literal["hybrid", "meaning"], alpha: float
) -> float:
    """The final score from its two parts (see the module docstring)."""
    if mode == "meaning":
        return meaning
    return (1.0 - alpha) * meaning + alpha * keyword


def active_keys(weights: Mapping[str, float], query_arguments: Iterable[str]) -> dict[str, float]:
    """The keys (argument → weight) that the query gives a value for."""
    present = set(query_arguments)
    return {arg: w for arg, w in weights.items() if arg in present}


@dataclass(frozen=True)
class Scored(Generic[T]):
    """One candidate with its final score, its two parts and per-argument cosines."""

    candidate: T
    candidate_id: str
    score: float
    meaning: float
    keyword: float
    per_argument: dict[str, float]


def score_item(
    candidate: T,
    candidate_id: str,
    *,
    weights: Mapping[str, float],
    query_vectors: Mapping[str, Sequence[float]],
    query_texts: Mapping[str, str],
    item_vectors: Mapping[str, Sequence[float]],
    item_texts: Mapping[str, str],
    mode: Literal["hybrid", "meaning"],
    alpha: float,
) -> Scored[T]:
    """Score one item against the query with ``weights`` (already the active keys)."""
    total = math.fsum(weights.values())
    if total <= 0.0:
        raise ValueError("no active search key")
    meaning = 0.0
    keyword = 0.0
    per_argument: dict[str, float] = {}
    for arg, weight in weights.items():
        stored = item_vectors.get(arg)
        cos = 0.0 if stored is None else cosine_similarity(query_vectors[arg], stored)
        per_argument[arg] = cos
        meaning += weight * cos
        if mode == "hybrid":
            keyword += weight * keyword_overlap(query_texts[arg], item_texts.get(arg, ""))
    meaning /= total
    keyword /= total
    return Scored(
        candidate=candidate,
        candidate_id=candidate_id,
        score=combine(meaning, keyword, mode, alpha),
        meaning=meaning,
        keyword=keyword,
        per_argument=per_argument,
    )


def rank(scored: Iterable[Scored[T]], *, threshold: float, top_k: int) -> list[Scored[T]]:
    """Those at or above ``threshold``, best first (ties by id), at most ``top_k``."""
    passing = [s for s in scored if s.score >= threshold]
    passing.sort(key=lambda s: (-s.score, s.candidate_id))
    return passing[:top_k]
