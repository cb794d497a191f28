"""Per-API-key rate limits of the memory service: a token bucket per key.

A key's bucket holds up to ``burst`` tokens and refills at ``rate_per_s``;
every request takes one, and a request that finds less than one is refused
with the time until a token is back (the service answers 429 with
``Retry-After``). A refused request takes nothing, so a client that waits as
told gets in.

:func:`take` is the whole decision, a pure function of a :class:`Bucket` and
the time. :class:`RateLimiter` keeps one bucket per key on an injectable
monotonic clock. A bucket that has refilled to ``burst`` is the same as no
bucket, so the limiter forgets such keys whenever its table has doubled
since the last sweep: it holds about twice the keys used within the last
``burst / rate_per_s`` seconds at most (or 1024), and the cost per request
stays constant on average. The service limits only keys it has recognised, so unknown keys
never take room.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Bucket", "RateLimiter", "take"]

# A client that waits exactly the time it was told is let in, rounding aside.
_EPSILON = 1e-9
_MIN_SWEEP = 1024


@dataclass(frozen=True, slots=True)
class Bucket:
    """``tokens`` as of ``at`` (seconds on the limiter's monotonic clock)."""

    tokens: float
    at: float


def take(bucket: Bucket | None, now: float, rate_per_s: float, burst: int) -> tuple[Bucket, float]:
    """One request at ``now``: the bucket after it, and ``0.0`` or the seconds to wait.

    ``None`` is a key not seen (or forgotten): a full bucket. The clock never
    goes back; if it seems to, no time has passed.
    """
    if bucket is None:
        tokens = float(burst)
    else:
        tokens = min(float(burst), bucket.tokens + max(0.0, now - bucket.at) * rate_per_s)
        now = max(now, bucket.at)
    if tokens + _EPSILON >= 1.0:
        return Bucket(max(0.0, tokens - 1.0), now), 0.0
    return Bucket(tokens, now), (1.0 - tokens) / rate_per_s


class RateLimiter:
    """A token bucket per key (``rate_per_s`` refill, ``burst`` capacity)."""

    def __init__(
        self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate_per_s > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, Bucket] = {}
        self._sweep_at = _MIN_SWEEP

    def __len__(self) -> int:
        """Keys remembered (those whose buckets may not be full)."""
        return len(self._buckets)

    def acquire(self, key: str) -> float:
        """Take a token for ``key``: ``0.0`` if the request may go on, else seconds to wait."""
        now = self._clock()
        bucket, wait = take(self._buckets.get(key), now, self.rate_per_s, self.burst)
        self._buckets[key] = bucket
        if len(self._buckets) >= self._sweep_at:
            self.sweep(now)
        return wait

    def sweep(self, now: float | None = None) -> int:
        """Forget every key whose bucket is full again; how many were forgotten."""
        at = self._clock() if now is None else now
        full = [
            key
            for key, b in self._buckets.items()
            if b.tokens + max(0.0, at - b.at) * self.rate_per_s >= self.burst
        ]
        for key in full:
            del self._buckets[key]
        self._sweep_at = max(_MIN_SWEEP, 2 * len(self._buckets))
        return len(full)
