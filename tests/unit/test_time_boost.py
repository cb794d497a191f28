"""Time-aware memory search (SPEC M1): a time expression boosts the memories whose
event range, else whose observed time, meets its window."""

from __future__ import annotations

from datetime import UTC, date, datetime

from mongomem.models import EventTime
from mongomem.ranking import HitRanks
from mongomem.sdk.models import MemoryRecord, SearchHit
from mongomem.sdk.time_boost import boost_by_time, in_window
from mongomem.time_expressions import find_time_window

NOW = datetime(2024, 6, 12, 10, 0, tzinfo=UTC)
LAST_MAY = find_time_window("the trip last May", NOW)


def record(
    key: str, *, observed: datetime | None = None, event: EventTime | None = None
) -> MemoryRecord:
    return MemoryRecord(
        memory_id=f"m-{key}",
        version=1,
        version_id=f"v-{key}",
        memory_type="episodic",
        key=key,
        text=key,
        fields={},
        reinforcement_count=1,
        created_at=NOW,
        updated_at=NOW,
        observed_at=observed,
        event=event,
    )


def hit(r: MemoryRecord, rank: int) -> SearchHit[MemoryRecord]:
    ranks = HitRanks(fused_rank=rank, fused_score=1 / rank, dense_rank=rank)
    return SearchHit[MemoryRecord](memory=r, score=1 - rank / 10, ranks=ranks)


def test_the_event_range_comes_first_then_the_observed_time() -> None:
    assert LAST_MAY is not None
    in_may = EventTime(valid_from=date(2024, 5, 20), valid_to=date(2024, 5, 20))
    # said in June about May: the event counts, not when it was said
    assert in_window(record("a", observed=NOW, event=in_may), LAST_MAY)
    # open ranges and the last day of a range count whole days
    assert in_window(record("b", event=EventTime(valid_to=date(2024, 5, 1))), LAST_MAY)
    assert not in_window(record("c", event=EventTime(valid_from=date(2024, 6, 1))), LAST_MAY)
    # no event: when it was said
    assert in_window(record("d", observed=datetime(2024, 5, 31, 23, tzinfo=UTC)), LAST_MAY)
    assert not in_window(record("e", observed=NOW), LAST_MAY)
    assert not in_window(record("f"), LAST_MAY)  # no time at all: never boosted
    # a phrase only (no dates): not placed in time
    assert not in_window(record("g", event=EventTime(phrase="some day")), LAST_MAY)


def test_boost_moves_the_window_up_and_explains_it() -> None:
    assert LAST_MAY is not None
    may = EventTime(valid_from=date(2024, 5, 3), valid_to=date(2024, 5, 3))
    hits = [
        hit(record("june"), 1),
        hit(record("none"), 2),
        hit(record("may", event=may), 3),
    ]
    out = boost_by_time(hits, LAST_MAY)
    assert [h.memory.key for h in out] == ["may", "june", "none"]
    top = out[0].ranks
    assert top is not None
    assert (top.fused_rank, top.time_rank, top.dense_rank) == (1, 1, 3)
    assert out[1].ranks is not None
    assert out[1].ranks.time_rank is None
    assert out[1].score == hits[0].score  # the cosine is kept
