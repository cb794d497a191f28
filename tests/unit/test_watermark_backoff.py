"""Idle back-off (issue 28). An idle watcher backs its watermarks off: each one issued
with no turn read since the one before doubles the wait, up to the idle interval; a turn
read resets it. Idle consumers hold their fetches on the broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from mongomem.stages.watcher_logic import WatermarkClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _issued_at(clock: WatermarkClock, until_s: float, step_s: float = 0.125) -> list[float]:
    out = []
    for k in range(int(until_s / step_s) + 1):
        now = k * step_s
        if clock.due(now, T0 + timedelta(seconds=now)) is not None:
            out.append(now)
    return out


def test_idle_watermarks_back_off_to_the_idle_interval() -> None:
    clock = WatermarkClock(lateness=timedelta(seconds=0), interval_s=1.0, idle_interval_s=8.0)
    times = _issued_at(clock, 40.0)
    gaps = [round(b - a, 1) for a, b in pairwise(times)]
    assert gaps[:4] == [1.0, 2.0, 4.0, 8.0]
    assert set(gaps[4:]) == {8.0}


def test_a_turn_read_brings_the_interval_back() -> None:
    clock = WatermarkClock(lateness=timedelta(seconds=0), interval_s=1.0, idle_interval_s=8.0)
    _issued_at(clock, 20.0)
    assert clock.wait_s() == 8.0
    clock.read(T0 + timedelta(seconds=20))
    assert clock.wait_s() == 1.0


def test_without_an_idle_interval_nothing_backs_off() -> None:
    clock = WatermarkClock(lateness=timedelta(seconds=0), interval_s=1.0)
    times = _issued_at(clock, 10.0)
    gaps = {round(b - a, 1) for a, b in pairwise(times)}
    assert gaps == {1.0}


def test_idle_consumers_hold_their_fetches_on_the_broker() -> None:
    """Issue 28: a consumer with nothing to read asks the broker every 5 s, not every
    500 ms (aiokafka's default); a fetch is answered as soon as a record arrives."""
    from mongomem.settings import KafkaSettings
    from mongomem.stages.runtime.kafka import FETCH_MAX_WAIT_MS, consumer_options

    options = consumer_options(KafkaSettings(), "windowing")
    assert options["fetch_max_wait_ms"] == FETCH_MAX_WAIT_MS == 5000
    assert options["request_timeout_ms"] > FETCH_MAX_WAIT_MS
