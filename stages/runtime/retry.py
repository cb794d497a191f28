"""The one retry policy of the stages: what a failure means, and how long to wait.

Decisions come from the error itself (:attr:`MongomemError.retriable`,
``retry_after``), never from lists of classes in a stage:

* **fatal** — :class:`~mongomem.errors.ConfigError` and
  :class:`~mongomem.errors.NotReady`: every record would fail the same way,
  so the stage stops (without committing) and the process ends.
* **outage** — a retriable :class:`~mongomem.errors.StorageError` or
  :class:`~mongomem.errors.BrokerError`: a dependency is away, the record is
  fine. Retried with back-off for as long as it takes (or until stop).
* **retry** — any other retriable error, and an error that is not ours (a
  bug, or a library error nobody translated: it may pass), while attempts
  remain (``max_attempts``, the first try included).
* **dead letter** — a permanent error of ours (``retriable`` false: bad
  input, a document MongoDB refuses for good) at once; any other once out of
  attempts. Never retried forever.

Back-off: ``base_s · 2^(attempt-1)``, capped at ``cap_s`` (30 s by default),
with "equal jitter" (a uniform draw in the upper half, so concurrent
retries spread out), and never shorter than an error's ``retry_after``
(which the server chose, so it is honoured even above the cap).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from mongomem.errors import BrokerError, ConfigError, MongomemError, NotReady, StorageError

__all__ = ["DEFAULT_CAP_S", "Decision", "RetryPolicy"]

#: The longest back-off between two attempts unless an error's ``retry_after`` says more.
DEFAULT_CAP_S = 30.0


class Decision(Enum):
    FATAL = "fatal"
    OUTAGE = "outage"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential back-off with jitter, driven by the error (see the module doc)."""

    base_s: float = 0.2
    cap_s: float = DEFAULT_CAP_S
    max_attempts: int = 5
    random: Callable[[], float] = random.random

    def decide(self, error: BaseException, attempt: int) -> Decision:
        """What to do after ``attempt`` (1 = the first try) failed with ``error``."""
        if isinstance(error, ConfigError | NotReady):
            return Decision.FATAL
        ours = isinstance(error, MongomemError)
        retriable = error.retriable if isinstance(error, MongomemError) else True
        if ours and retriable and isinstance(error, StorageError | BrokerError):
            return Decision.OUTAGE
        if retriable and attempt < self.max_attempts:
            return Decision.RETRY
        return Decision.DEAD_LETTER

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds to wait after ``attempt`` failed: in ``[d/2, d]`` for the capped ``d``,
        at least the error's ``retry_after``."""
        capped = min(self.cap_s, self.base_s * 2.0 ** max(0, attempt - 1))
        delay = capped / 2 + self.random() * capped / 2
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > delay:
            delay = float(retry_after)
        return delay
