"""Time expressions in search queries (SPEC M1, time-aware recall), without a model.

:func:`find_time_window` reads the first expression of time in a query and
resolves it against a reference moment (the query's ``as_of``, else now) to a
half-open window ``[start, end)`` in the reference's time zone. It is a small
deterministic parser: the same query and moment always give the same window,
and a query without an expression it knows gives ``None`` (nothing changes).

What it understands (case-insensitive; numbers as digits or words up to
nineteen, "a"/"an"/"a couple of"/"a few" for 1/1/2/3):

==============================  =============================================
expression                      window
==============================  =============================================
today / yesterday               that calendar day
the day before yesterday        the calendar day two days back
N days ago                      the calendar day N days back
N weeks ago                     seven days centred on the moment N weeks back
N months ago / N years ago      the calendar month / year N back
this|last week                  the calendar week (Monday first) / the one before
this|last month|year            the calendar month / year, or the one before
last weekend                    the latest Saturday and Sunday before today
last Monday … last Sunday       the latest such day before today
last May                        the latest May before the current month
in May / May 2023 / in May 2023 the latest May not after now / that May
in 2023                         that calendar year
==============================  =============================================

Windows never reach past the reference moment's day: "this week" ends
tomorrow at midnight. :attr:`TimeWindow.phrase` is the matched text, so a
caller can take it out of the words it ranks by (:meth:`TimeWindow.without`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from mongomem.number_words import CARDINALS

__all__ = ["TimeWindow", "find_time_window"]

_NUMBERS = {
    "a": 1,
    "an": 1,
    "a couple of": 2,
    "a few": 3,
    **{word: n for word, n in CARDINALS.items() if n},
}
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

_NUMBER = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_MONTH = r"(?P<month>" + "|".join(_MONTHS) + r")"
_YEAR = r"(?P<year>(?:19|20)\d\d)"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (kind, re.compile(rf"\b(?:{pattern})\b", re.IGNORECASE))
    for kind, pattern in [
        ("day_before_yesterday", r"the day before yesterday"),
        ("ago", _NUMBER + r"\s+(?P<unit>day|week|month|year)s?\s+ago"),
        ("yesterday", r"yesterday"),
        ("today", r"today"),
        ("weekend", r"last\s+weekend"),
        ("weekday", r"last\s+(?P<day>" + "|".join(_DAYS) + ")"),
        ("relative", r"(?P<which>this|last)\s+(?P<unit>week|month|year)"),
        ("last_month_name", r"last\s+" + _MONTH),
        ("month_year", r"(?:in\s+)?" + _MONTH + r",?\s+" + _YEAR),
        ("in_month", r"in\s+" + _MONTH),
        ("in_year", r"in\s+" + _YEAR),
    ]
]


@dataclass(frozen=True)
class TimeWindow:
    """``[start, end)``: when the query's expression of time points to."""

    start: datetime
    end: datetime
    #: The words of the query that said it ("two weeks ago").
    phrase: str

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def without(self, query: str) -> str:
        """``query`` without :attr:`phrase` (once), or ``query`` itself if nothing remains."""
        rest = re.sub(r"\s+", " ", query.replace(self.phrase, " ", 1)).strip()
        rest = re.sub(r"\s+([?.!,;:])", r"\1", rest)
        return rest if rest.strip(" ?.!,") else query


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month(year: int, month: int, like: datetime) -> tuple[datetime, datetime]:
    start = like.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=year + (month == 12), month=month % 12 + 1)
    return start, end


def _months_back(now: datetime, n: int) -> tuple[datetime, datetime]:
    index = now.year * 12 + now.month - 1 - n
    return _month(index // 12, index % 12 + 1, now)


def _year(year: int, like: datetime) -> tuple[datetime, datetime]:
    start = like.replace(year=year, month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, start.replace(year=year + 1)


def _number(text: str) -> int:
    text = re.sub(r"\s+", " ", text.lower())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _resolve(kind: str, m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    today = _day(now)
    day = timedelta(days=1)
    if kind == "today":
        return today, today + day
    if kind == "yesterday":
        return today - day, today
    if kind == "day_before_yesterday":
        return today - 2 * day, today - day
    if kind == "ago":
        n, unit = _number(m["n"]), m["unit"].lower()
        if unit == "day":
            return today - n * day, today - (n - 1) * day
        if unit == "week":
            centre = now - timedelta(weeks=n)
            return centre - 3.5 * day, centre + 3.5 * day
        if unit == "month":
            return _months_back(now, n)
        return _year(now.year - n, now)
    if kind == "weekend":
        saturday = today - ((today.weekday() - 5) % 7 or 7) * day
        return saturday, saturday + 2 * day
    if kind == "weekday":
        target = _DAYS.index(m["day"].lower())
        back = (today.weekday() - target) % 7 or 7
        return today - back * day, today - (back - 1) * day
    if kind == "relative":
        last = m["which"].lower() == "last"
        unit = m["unit"].lower()
        if unit == "week":
            monday = today - today.weekday() * day - (7 * day if last else timedelta())
            return monday, monday + 7 * day if last else today + day
        if unit == "month":
            start, end = _months_back(now, 1 if last else 0)
            return start, end if last else today + day
        start, end = _year(now.year - last, now)
        return start, end if last else today + day
    month = _MONTHS.index(m["month"].lower()) + 1 if "month" in m.groupdict() else 0
    if kind == "last_month_name":
        year = now.year if month < now.month else now.year - 1
        return _month(year, month, now)
    if kind == "month_year":
        return _month(int(m["year"]), month, now)
    if kind == "in_month":
        year = now.year if month <= now.month else now.year - 1
        return _month(year, month, now)
    return _year(int(m["year"]), now)


def find_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The window the first time expression of ``query`` points to, resolved against
    ``now`` (an aware datetime), or ``None`` when the query has none it knows."""
    if now.tzinfo is None:
        raise ValueError("the reference time must be timezone-aware")
    best: tuple[int, int, str, re.Match[str]] | None = None
    for order, (kind, pattern) in enumerate(_PATTERNS):
        found = pattern.search(query)
        if found is not None and (best is None or (found.start(), order) < best[:2]):
            best = (found.start(), order, kind, found)
    if best is None:
        return None
    _, _, kind, found = best
    start, end = _resolve(kind, found, now)
    return TimeWindow(start=start, end=end, phrase=found.group(0))
