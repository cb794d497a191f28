"""Time-aware memory search (SPEC M1): a time expression in the query boosts the
memories that hold or were said inside its window.

A memory's time is its event range when the conversation gave one
(``event.valid_from``..``event.valid_to``, whole days), else when its value
was last said (``observed_at``); a memory with neither is never boosted. The
ranked hits (asked for wide, as ``as_of`` searches are) are fused again, with
the ranker's weighted RRF (:func:`~mongomem.ranking.fuse`): their order as the
"dense" list and the ones inside the window, in that order, as the boost
list. A hit's :attr:`~mongomem.ranking.HitRanks.fused_rank` becomes its place
after the boost and :attr:`~mongomem.ranking.HitRanks.time_rank` its place
among the hits inside the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, time, timedelta

from mongomem.ranking import HitRanks, fuse
from mongomem.sdk.models import MemoryRecord, SearchHit
from mongomem.time_expressions import TimeWindow

__all__ = ["TIME_WEIGHT", "boost_by_time", "in_window"]

#: The weight of the "inside the window" list, as turn search has it.
TIME_WEIGHT = 1.0


def in_window(record: MemoryRecord, window: TimeWindow) -> bool:
    """Whether the memory's event range (else its ``observed_at``) meets ``window``."""
    zone = window.start.tzinfo
    event = record.event
    if event is not None and (event.valid_from is not None or event.valid_to is not None):
        lo = (
            datetime.combine(event.valid_from, time(), zone)
            if event.valid_from is not None
            else datetime.min.replace(tzinfo=zone)
        )
        hi = (
            datetime.combine(event.valid_to, time(), zone) + timedelta(days=1)
            if event.valid_to is not None
            else datetime.max.replace(tzinfo=zone)
        )
        return lo < window.end and window.start < hi
    return record.observed_at is not None and window.contains(record.observed_at)


def boost_by_time(
    hits: Sequence[SearchHit[MemoryRecord]], window: TimeWindow
) -> list[SearchHit[MemoryRecord]]:
    """``hits`` re-ranked with the ones inside ``window`` boosted (see the module docstring)."""
    order = [(i, h.score) for i, h in enumerate(hits)]
    inside = [(i, h.score) for i, h in enumerate(hits) if in_window(h.memory, window)]
    out = []
    for ranked in fuse([], order, len(hits), boost=inside, boost_weight=TIME_WEIGHT):
        hit = hits[ranked.key]
        base = hit.ranks or HitRanks(fused_rank=ranked.rank, fused_score=ranked.fused)
        ranks = base.model_copy(update={"fused_rank": ranked.rank, "time_rank": ranked.time_rank})
        out.append(SearchHit[MemoryRecord](memory=hit.memory, score=hit.score, ranks=ranks))
    return out
