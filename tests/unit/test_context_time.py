"""``build_context`` is time-aware without ``as_of`` (SPEC M1): a time expression in the
query is resolved against the moment the context is built, boosting the memories of its
window and resolving the raw turns' window against the same moment."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from mongomem.errors import InputError
from mongomem.models import EventTime
from mongomem.ranking import HitRanks
from mongomem.sdk.context import compose_context
from mongomem.sdk.identity import Identity
from mongomem.sdk.models import MemoryRecord, SearchHit
from mongomem.stm.search import TurnHit, TurnQuery

NOW = datetime(2024, 6, 12, 10, 0, tzinfo=UTC)
WHO = Identity(project_id="p", user_id="u", session_id="s")


def record(key: str, *, observed: datetime, event: EventTime | None = None) -> MemoryRecord:
    return MemoryRecord(
        memory_id=f"m-{key}",
        version=1,
        version_id=f"v-{key}",
        memory_type="episodic",
        key=key,
        text=f"the trip to {key}",
        fields={"content": f"the trip to {key}"},
        reinforcement_count=1,
        created_at=observed,
        updated_at=observed,
        observed_at=observed,
        event=event,
    )


class Ranked:
    """A searcher whose episodic hits come in a fixed ranked order (cut at ``limit``), and
    which keeps what it was asked."""

    def __init__(self, records: list[MemoryRecord]) -> None:
        self.records = records
        self.asked: list[tuple[str, int]] = []
        self.turn_queries: list[TurnQuery] = []

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]:
        self.asked.append((query, limit))
        if memory_type != "episodic":
            return []
        return [
            SearchHit[MemoryRecord](
                memory=r,
                score=0.9 - i / 10,
                ranks=HitRanks(fused_rank=i + 1, fused_score=1 / (i + 6), dense_rank=i + 1),
            )
            for i, r in enumerate(self.records[:limit])
        ]

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]:
        self.turn_queries.append(q)
        return []


def trips() -> Ranked:
    may = EventTime(valid_from=date(2024, 5, 18), valid_to=date(2024, 5, 20))
    return Ranked(
        [
            record("Porto", observed=datetime(2024, 6, 10, tzinfo=UTC)),  # said this week
            record("Faro", observed=datetime(2024, 3, 1, tzinfo=UTC)),
            record("Braga", observed=datetime(2024, 6, 1, tzinfo=UTC), event=may),  # in May
        ]
    )


async def test_a_time_expression_boosts_the_memories_of_its_window_without_as_of() -> None:
    searcher = trips()
    context = await compose_context(
        searcher, WHO, "the trip last May", ["episodic"], limit_per_type=1, now=NOW
    )
    # the May trip (third by words and meaning) comes in; the one said this week does not
    assert [i.key for i in context.items] == ["Braga"]
    # the expression's words are not searched for, and more hits are asked for the boost
    assert searcher.asked == [("the trip", 4)]


async def test_without_now_the_expression_is_resolved_against_the_clock() -> None:
    searcher = trips()
    # "May 2024" is the same window from any moment after it: the clock's will do
    context = await compose_context(
        searcher, WHO, "the trip in May 2024", ["episodic"], limit_per_type=1
    )
    assert [i.key for i in context.items] == ["Braga"]


async def test_a_query_without_a_time_expression_is_searched_as_it_is() -> None:
    searcher = trips()
    context = await compose_context(
        searcher, WHO, "the trip", ["episodic"], limit_per_type=1, now=NOW
    )
    assert [i.key for i in context.items] == ["Porto"]
    assert searcher.asked == [("the trip", 1)]


async def test_time_aware_off_reads_the_whole_query_as_words() -> None:
    searcher = trips()
    context = await compose_context(
        searcher,
        WHO,
        "the trip last May",
        ["episodic"],
        limit_per_type=1,
        include_turns=2,
        now=NOW,
        time_aware=False,
    )
    assert [i.key for i in context.items] == ["Porto"]
    assert searcher.asked == [("the trip last May", 1)]
    [q] = searcher.turn_queries
    assert q.time_aware is False


async def test_the_turns_resolve_the_expression_against_the_same_moment() -> None:
    searcher = trips()
    await compose_context(
        searcher, WHO, "the trip last May", ["episodic"], include_turns=3, now=NOW
    )
    [q] = searcher.turn_queries
    assert (q.query, q.limit, q.as_of, q.time_aware) == ("the trip last May", 3, NOW, True)
    window = q.window(datetime(2030, 1, 1, tzinfo=UTC))  # as_of wins over the search's clock
    assert window is not None
    assert (window.start, window.end) == (
        datetime(2024, 5, 1, tzinfo=UTC),
        datetime(2024, 6, 1, tzinfo=UTC),
    )


async def test_a_naive_now_is_refused_before_any_search() -> None:
    searcher = trips()
    naive = NOW.replace(tzinfo=None)
    with pytest.raises(InputError):
        await compose_context(searcher, WHO, "the trip last May", ["episodic"], now=naive)
    assert searcher.asked == []
