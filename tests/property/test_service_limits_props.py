"""Hypothesis invariants of the per-key token bucket (:mod:`mongomem.service.limits`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mongomem.service import Bucket, RateLimiter, take

RATES = st.floats(min_value=0.01, max_value=100.0)
BURSTS = st.integers(min_value=1, max_value=50)
STEPS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3), st.floats(min_value=0.0, max_value=5.0)),
    max_size=200,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(RATES, BURSTS, STEPS)
def test_forgetting_full_buckets_changes_no_decision(
    rate: float, burst: int, steps: list[tuple[int, float]]
) -> None:
    clock = Clock()
    limits = RateLimiter(rate, burst, clock=clock)
    kept: dict[str, Bucket] = {}  # the reference remembers every key forever
    for key, dt in steps:
        clock.now += dt
        name = f"k{key}"
        kept[name], expected = take(kept.get(name), clock.now, rate, burst)
        assert limits.acquire(name) == expected
        limits.sweep()


@given(RATES, BURSTS, st.lists(st.floats(min_value=0.0, max_value=2.0), max_size=300))
def test_no_window_admits_more_than_burst_plus_refill(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = Clock()
    limits = RateLimiter(rate, burst, clock=clock)
    admitted: list[float] = []
    for gap in gaps:
        clock.now += gap
        if limits.acquire("k") == 0.0:
            admitted.append(clock.now)
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            assert j - i + 1 <= burst + (admitted[j] - start) * rate + 1e-6


@given(RATES, BURSTS, st.lists(st.floats(min_value=0.0, max_value=2.0), max_size=100))
def test_the_advised_wait_is_enough_and_not_too_much(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = Clock()
    limits = RateLimiter(rate, burst, clock=clock)
    for gap in gaps:
        clock.now += gap
        wait = limits.acquire("k")
        if wait:
            assert 0 < wait <= 1 / rate + 1e-9
            clock.now += wait
            assert limits.acquire("k") == 0.0
