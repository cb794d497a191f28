"""One ranker for memories and turns: reciprocal-rank fusion of two candidate lists.

:func:`fuse` takes what a lexical retriever (BM25) and a dense one (cosine)
each ranked for one query, best first, and orders the union by

    fused(d) = Σ_r 1 / (k + rank_r(d))

over the retrievers ``r`` that returned ``d`` (ranks start at 1). A document
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

__all__ = ["MAX_QUERY_CHARS", "RRF_K", "HitRanks", "Ranked", "fuse", "hit_ranks"]

K = TypeVar("K", bound=Hashable)
J = TypeVar("J", bound=Hashable)

#: The longest search query (memories or turns) accepted, in characters: longer is bad input.
MAX_QUERY_CHARS = 2000

#: The RRF constant: larger flattens the difference between ranks (60 is the usual choice).
RRF_K = 60


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
        )


def fuse(
    lexical: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    limit: int,
    *,
    k: int = RRF_K,
) -> list[Ranked[K]]:
    """The ``limit`` best of both lists by reciprocal-rank fusion (see the module docstring)."""
    lex = {key: (i + 1, s) for i, (key, s) in enumerate(lexical)}
    den = {key: (i + 1, s) for i, (key, s) in enumerate(dense)}
    keys = list(dict.fromkeys([*(key for key, _ in dense), *(key for key, _ in lexical)]))

    def fused(key: K) -> float:
        total = 0.0
        for found in (lex.get(key), den.get(key)):
            if found is not None:
                total += 1.0 / (k + found[0])
        return total

    missing = len(dense) + len(lexical) + 1
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


def hit_ranks(ranked: Ranked[Any]) -> HitRanks:
    """The explanation of a fused hit, as surfaces show it."""
    return HitRanks(
        fused_rank=ranked.rank,
        fused_score=ranked.fused,
        lexical_rank=ranked.lexical_rank,
        lexical_score=ranked.lexical_score,
        dense_rank=ranked.dense_rank,
    )
