"""The deterministic time-expression parser of time-aware recall (SPEC M1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from mongomem.time_expressions import find_time_window

#: A Wednesday afternoon.
NOW = datetime(2024, 3, 13, 15, 0, tzinfo=UTC)


def d(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end", "phrase"),
    [
        ("what did I say yesterday?", d(2024, 3, 12), d(2024, 3, 13), "yesterday"),
        ("and today", d(2024, 3, 13), d(2024, 3, 14), "today"),
        ("the day before yesterday", d(2024, 3, 11), d(2024, 3, 12), "the day before yesterday"),
        ("3 days ago", d(2024, 3, 10), d(2024, 3, 11), "3 days ago"),
        ("two weeks ago", d(2024, 2, 25, 3), d(2024, 3, 3, 3), "two weeks ago"),
        # the shared number words (mongomem.number_words) reach nineteen
        ("fifteen days ago", d(2024, 2, 27), d(2024, 2, 28), "fifteen days ago"),
        ("seventeen days ago", d(2024, 2, 25), d(2024, 2, 26), "seventeen days ago"),
        ("a couple of months ago", d(2024, 1, 1), d(2024, 2, 1), "a couple of months ago"),
        ("a year ago", d(2023, 1, 1), d(2024, 1, 1), "a year ago"),
        ("last week", d(2024, 3, 4), d(2024, 3, 11), "last week"),
        ("this week", d(2024, 3, 11), d(2024, 3, 14), "this week"),
        ("last month", d(2024, 2, 1), d(2024, 3, 1), "last month"),
        ("this year", d(2024, 1, 1), d(2024, 3, 14), "this year"),
        ("last weekend", d(2024, 3, 9), d(2024, 3, 11), "last weekend"),
        ("last Monday", d(2024, 3, 11), d(2024, 3, 12), "last Monday"),
        ("last wednesday", d(2024, 3, 6), d(2024, 3, 7), "last wednesday"),
        # a month name: the latest one before this month ("last"), or not after now ("in")
        ("trip last May", d(2023, 5, 1), d(2023, 6, 1), "last May"),
        ("in March", d(2024, 3, 1), d(2024, 4, 1), "in March"),
        ("in May", d(2023, 5, 1), d(2023, 6, 1), "in May"),
        ("the May 2022 trip", d(2022, 5, 1), d(2022, 6, 1), "May 2022"),
        ("in 2021", d(2021, 1, 1), d(2022, 1, 1), "in 2021"),
    ],
)
def test_expressions_resolve_against_the_reference(
    query: str, start: datetime, end: datetime, phrase: str
) -> None:
    window = find_time_window(query, NOW)
    assert window is not None
    assert (window.start, window.end, window.phrase) == (start, end, phrase)


@pytest.mark.parametrize("query", ["where does Ana work?", "May I ask?", "a week in Lisbon"])
def test_no_expression_no_window(query: str) -> None:
    assert find_time_window(query, NOW) is None


def test_the_first_expression_wins_and_the_reference_zone_is_kept() -> None:
    lisbon = timezone(timedelta(hours=1))
    window = find_time_window("last week, not yesterday", NOW.astimezone(lisbon))
    assert window is not None
    assert window.phrase == "last week"
    assert window.start == datetime(2024, 3, 4, tzinfo=lisbon)
    assert window.contains(datetime(2024, 3, 10, 23, 0, tzinfo=lisbon))
    assert not window.contains(datetime(2024, 3, 11, 0, 0, tzinfo=lisbon))


def test_strip_leaves_the_topic() -> None:
    window = find_time_window("What did Ana say about the weather two weeks ago?", NOW)
    assert window is not None
    assert window.without("What did Ana say about the weather two weeks ago?") == (
        "What did Ana say about the weather?"
    )
    only = find_time_window("yesterday?", NOW)
    assert only is not None
    assert only.without("yesterday?") == "yesterday?"  # nothing else: the query stays


def test_a_naive_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        find_time_window("yesterday", datetime(2024, 3, 13))  # noqa: DTZ001
