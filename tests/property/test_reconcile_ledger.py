"""Invariants of the ledger's expiry decision (pure functions of mongomem.ltm.writes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from mongomem.ltm.writes import (
    EXPIRES,
    archived_decision_id,
    done_update,
    ledger_expired,
    outlived,
    pending_entry,
)

# BSON dates have millisecond precision: draw what the server gives back.
times = st.datetimes(
    # Hypothesis takes naive bounds; ``timezones`` makes the values aware.
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
ttls = st.one_of(st.none(), st.floats(min_value=0.001, max_value=10 * 365 * 24 * 3600.0))
offsets = st.floats(min_value=-1e9, max_value=1e9)


def settled(at: datetime, ttl_s: float | None) -> dict[str, object]:
    return {**pending_entry("c", at), **done_update(at, ttl_s)["$set"]}


@given(times, ttls, offsets)
def test_a_settled_entry_counts_as_absent_exactly_from_its_ttl_on(
    at: datetime, ttl_s: float | None, offset: float
) -> None:
    now = at + timedelta(seconds=offset)
    expected = ttl_s is not None and now >= at + timedelta(seconds=ttl_s)
    assert ledger_expired(settled(at, ttl_s), now) is expected
    assert outlived(at, now, ttl_s) is expected


@given(times, ttls)
def test_no_entry_has_expired_when_it_settles_and_none_without_a_ttl_ever(
    at: datetime, ttl_s: float | None
) -> None:
    assert not ledger_expired(settled(at, ttl_s), at)
    if ttl_s is None:
        assert EXPIRES not in settled(at, ttl_s)
        assert not ledger_expired(settled(at, None), datetime.max.replace(tzinfo=UTC))


@given(times, offsets)
def test_pending_entries_never_expire(at: datetime, offset: float) -> None:
    assert not ledger_expired(pending_entry("c", at, "fp"), at + timedelta(seconds=abs(offset)))


@given(times, ttls, offsets)
def test_naive_dates_read_back_as_utc_decide_alike(
    at: datetime, ttl_s: float | None, offset: float
) -> None:
    now = at + timedelta(seconds=offset)
    entry = settled(at, ttl_s)
    naive = {k: v.replace(tzinfo=None) if isinstance(v, datetime) else v for k, v in entry.items()}
    assert ledger_expired(naive, now) is ledger_expired(entry, now)
    assert outlived(at.replace(tzinfo=None), now, ttl_s) is outlived(at, now, ttl_s)
    assert archived_decision_id("c", at.replace(tzinfo=None)) == archived_decision_id("c", at)


@given(times, times)
def test_archived_decisions_of_different_applications_have_different_ids(
    a: datetime, b: datetime
) -> None:
    assert (archived_decision_id("c", a) == archived_decision_id("c", b)) is (a == b)
    assert archived_decision_id("c", a) != "c"
