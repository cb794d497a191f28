"""One ranker for memories and turns: reciprocal-rank fusion of two candidate lists.

:func:`fuse` takes what a lexical retriever (BM25) and a dense one (cosine)
each ranked for one query, best first, and orders the union by

    fused(d) = Σ_r w_r / (k + rank_r(d))

over the retrievers ``r`` that returned ``d`` (ranks start at 1), with the
dense weight 1 and the lexical weight :data:`LEXICAL_WEIGHT`. A document
found by both beats one found by either alone at the same ranks; ties go to
the better dense rank, then the key. It is a function over candidate sets, so
callers narrow the candidates (scope, session, speaker, time range, ``as_of``)
before fusing, and every backend (in-process indexes, Atlas ``$rankFusion``)
gives the same explanation: each :class:`Ranked` carries both ranks and scores.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mongomem.models import Frozen

__all__ = ["LEXICAL_WEIGHT", "MAX_QUERY_CHARS", "RRF_K", "HitRanks", "Ranked", "fuse", "hit_ranks"]

K = TypeVar("K", bound=Hashable)
J = TypeVar("J", bound=Hashable)

#: The longest search query (memories or turns) accepted, in characters: longer is bad input.
MAX_QUERY_CHARS = 2000

#: The RRF constant: larger flattens the difference between ranks. 60 is the textbook
#: choice; 5 (with :data:`LEXICAL_WEIGHT`) was chosen on the tuning part of the recall
#: set (``bench.recall``), where it gave recall@10 80.3 against 78.7 for (60, 1.0): a
#: steep curve lets a first place by either retriever count, the weight keeps a weak
#: BM25 match from pushing a good dense hit out of the top ten.
RRF_K = 5

#: The weight of the lexical (BM25) list against the dense one (1.0). See :data:`RRF_K`.
LEXICAL_WEIGHT = 0.35


@dataclass(frozen=True)
class Ranked(Generic[K]):
    """One fused result: the key, its fused score and where each retriever put it."""

    key: K
    fused: float
    rank: int
    lexical_rank: int | None
    dense_rank: int | None
    lexical_score: float | None
    dense_score: float | None
    #: Its place in the boost list (turns said in the query's time window), if any.
    time_rank: int | None = None
    #: Its place in the speaker list (turns said by a speaker the query names), if any.
    speaker_rank: int | None = None

    def rekey(self, key: J) -> Ranked[J]:
        """The same ranking under another key (a row number becomes a document id)."""
        return Ranked(
            key=key,
            fused=self.fused,
            rank=self.rank,
            lexical_rank=self.lexical_rank,
            dense_rank=self.dense_rank,
            lexical_score=self.lexical_score,
            dense_score=self.dense_score,
            time_rank=self.time_rank,
            speaker_rank=self.speaker_rank,
        )


def fuse(
    lexical: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    limit: int,
    *,
    k: int = RRF_K,
    lexical_weight: float = LEXICAL_WEIGHT,
    boost: Sequence[tuple[K, float]] = (),
    boost_weight: float = 1.0,
    speaker: Sequence[tuple[K, float]] = (),
    speaker_weight: float = 1.0,
) -> list[Ranked[K]]:
    """The ``limit`` best of both lists by weighted reciprocal-rank fusion (see the module
    docstring); ``k`` and ``lexical_weight`` default to the tuned values. ``boost`` is an
    optional third list fused the same way with ``boost_weight`` (turn search's "said
    inside the query's time window"); its ranks are :attr:`Ranked.time_rank`. ``speaker``
    is an optional fourth, with ``speaker_weight`` (turn search's "said by a speaker the
    query names"); its ranks are :attr:`Ranked.speaker_rank`."""
    lex = {key: (i + 1, s) for i, (key, s) in enumerate(lexical)}
    den = {key: (i + 1, s) for i, (key, s) in enumerate(dense)}
    extra = {key: (i + 1, s) for i, (key, s) in enumerate(boost)}
    said = {key: (i + 1, s) for i, (key, s) in enumerate(speaker)}
    keys = list(
        dict.fromkeys(
            [
                *(key for key, _ in dense),
                *(key for key, _ in lexical),
                *(key for key, _ in boost),
                *(key for key, _ in speaker),
            ]
        )
    )

    def fused(key: K) -> float:
        total = 0.0
        lists = (
            (lex.get(key), lexical_weight),
            (den.get(key), 1.0),
            (extra.get(key), boost_weight),
            (said.get(key), speaker_weight),
        )
        for found, weight in lists:
            if found is not None:
                total += weight / (k + found[0])
        return total

    missing = len(dense) + len(lexical) + len(boost) + len(speaker) + 1
    scored = sorted(
        ((fused(key), key) for key in keys),
        key=lambda p: (-p[0], den.get(p[1], (missing, 0.0))[0], str(p[1])),
    )
    out = []
    for rank, (score, key) in enumerate(scored[:limit], start=1):
        lr, dr = lex.get(key), den.get(key)
        out.append(
            Ranked(
                key=key,
                fused=score,
                rank=rank,
                lexical_rank=None if lr is None else lr[0],
                dense_rank=None if dr is None else dr[0],
                lexical_score=None if lr is None else lr[1],
                dense_score=None if dr is None else dr[1],
                time_rank=extra[key][0] if key in extra else None,
                speaker_rank=said[key][0] if key in said else None,
            )
        )
    return out


class HitRanks(Frozen):
    """Why a hit is where it is (SPEC M1): its place by BM25, by cosine and fused
    (ranks start at 1; ``None``: that retriever did not return it in its pool)."""

    fused_rank: int
    fused_score: float
    lexical_rank: int | None = None
    lexical_score: float | None = None
    dense_rank: int | None = None
    #: Turn search: its place among the turns said inside the query's time window.
    time_rank: int | None = None
    #: Turn search: its place among the turns said by a speaker the query names.
    speaker_rank: int | None = None
    #: The optional reranker's score (:mod:`mongomem.adapters.rerank`); when set, the
    #: hits are in the reranker's order and ``fused_rank`` is the place before it.
    rerank_score: float | None = None


def hit_ranks(ranked: Ranked[Any]) -> HitRanks:
    """The explanation of a fused hit, as surfaces show it."""
    return HitRanks(
        fused_rank=ranked.rank,
        fused_score=ranked.fused,
        lexical_rank=ranked.lexical_rank,
        lexical_score=ranked.lexical_score,
        dense_rank=ranked.dense_rank,
        time_rank=ranked.time_rank,
        speaker_rank=ranked.speaker_rank,
    )
