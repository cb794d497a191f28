"""bench.windowing's drain clock: a drain is timed from the stage's first records handed
to it, not from its first batch applied (that left the first batch's work out of the time
and kept its turns in the count)."""

from __future__ import annotations

import pytest

from bench.windowing import DrainClock


class Ticks:
    """A clock the test sets by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_first_batch_planned_starts_the_clock_and_the_last_turn_applied_stops_it():
    ticks = Ticks()
    clock = DrainClock(20_000, {}, now=ticks)
    clock.handed()  # the first batch is planned at 0 s
    ticks.t = 0.5
    clock.handed()  # a later batch: the start stays
    assert not clock.applied(0)
    ticks.t = 1.0
    assert not clock.applied(6_000)  # the first batch applied: the count jumps
    ticks.t = 4.0
    assert clock.applied(20_000)
    ticks.t = 9.0
    assert clock.applied(20_000)  # the end stays
    assert clock.elapsed() == pytest.approx(4.0)
    assert clock.rate() == pytest.approx(5_000.0)
    assert set(clock.used()) == {"stage"}
    assert clock.used()["stage"] >= 0


def test_without_batches_the_first_turn_applied_starts_it():
    ticks = Ticks()
    clock = DrainClock(10, {}, now=ticks)
    ticks.t = 2.0
    clock.applied(1)  # the faust engine: one record at a time, no batch planned
    ticks.t = 3.0
    clock.handed()  # too late to move the start
    ticks.t = 7.0
    assert clock.applied(10)
    assert clock.rate() == pytest.approx(2.0)


def test_a_drain_not_over_has_no_rate():
    clock = DrainClock(10, {})
    clock.handed()
    with pytest.raises(RuntimeError, match="not over"):
        clock.rate()


def test_with_no_server_the_drain_has_no_housekeeping():
    ticks = Ticks()
    clock = DrainClock(10, {}, now=ticks)
    clock.handed()
    ticks.t = 1.0
    assert clock.applied(10)
    assert clock.housekeeping() == {}
