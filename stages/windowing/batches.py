"""``BatchPipeline``: one partition's batches, the next planned while the last is delivered.

Applying a batch has two halves (:class:`~mongomem.stages.windowing.windower.SnapshotWindower`):
planning it — decoding the records and running the window logic, CPU only —
and finishing it — delivering its snapshots to MongoDB and Kafka, then writing
its states, mostly waiting. The pipeline plans batch *N+1* while batch *N* is
being delivered, so the two overlap:

* at most two batches of the partition are in flight: one delivering, and the
  one planned after it, which waits for it; :meth:`BatchPipeline.submit` waits
  for the oldest when a third comes;
* batch *N+1* is planned on the windows that batch *N* left, and its delivery
  starts only when *N* is delivered and written, so snapshots still reach the
  sinks, and states the store, in record order;
* if batch *N* did not go as planned (a delivery failed and it was applied
  record by record, which may dead-letter a record the plan had applied),
  batch *N+1* is planned again from the store before it is delivered;
* ``on_done`` hears of each batch once it is applied — the caller records the
  batch's position then, and only then may it be committed; the awaitable that
  :meth:`~BatchPipeline.submit` returns completes at the same moment (the
  runtime's acknowledgement of the batch). Once a batch failed, every later
  submit plans nothing and returns that batch's failure as its
  acknowledgement; :meth:`~BatchPipeline.raise_failure` and
  :meth:`~BatchPipeline.drain` raise it.

So the pipeline leaves exactly what :meth:`~SnapshotWindower.process_batch`
called batch after batch leaves (``tests/property/test_windowing_batches.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from mongomem.stages.windowing.windower import PlannedBatch, Record, SnapshotWindower

__all__ = ["BatchPipeline"]


class BatchPipeline:
    """Plans and finishes one partition's batches, overlapping planning with delivery."""

    def __init__(
        self,
        windower: SnapshotWindower,
        partition: int,
        on_done: Callable[[Sequence[Record]], None] | None = None,
    ) -> None:
        self._windower = windower
        self._partition = partition
        self._on_done = on_done
        self._flight: deque[tuple[asyncio.Task[bool], PlannedBatch]] = deque()

    @property
    def in_flight(self) -> int:
        return len(self._flight)

    async def submit(self, records: Sequence[Record]) -> asyncio.Future[Any]:
        """Plan ``records`` now; they are delivered when the batch before is applied.

        Returns what completes once they are applied (and raises if they are
        not). Raises only if planning failed (nothing of ``records`` is then
        in flight)."""
        if not records:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(True)
            return done
        while self._flight and (len(self._flight) >= 2 or self._flight[0][0].done()):
            task, _ = self._flight[0]
            await asyncio.wait([task])
            if task.cancelled() or task.exception() is not None:
                return task  # failed: nothing more is planned (kept for drain to raise)
            self._flight.popleft()
        previous, after = self._flight[-1] if self._flight else (None, None)
        planned = await self._windower.plan_batch(self._partition, records, after)
        task = asyncio.create_task(self._finish(planned, previous))
        self._flight.append((task, planned))
        return task

    def raise_failure(self) -> None:
        """Raise the failure of a batch that has finished with one, if any."""
        for task, _ in self._flight:
            failure = task.exception() if task.done() and not task.cancelled() else None
            if failure is not None:
                raise failure

    async def drain(self) -> None:
        """Wait until every batch submitted is applied (raises the first failure)."""
        while self._flight:
            task, _ = self._flight.popleft()
            await task

    async def cancel(self) -> None:
        """Stop the batches in flight; their positions are not reported (read them again)."""
        flight, self._flight = self._flight, deque()
        for task, _ in flight:
            task.cancel()
        for task, _ in flight:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _finish(self, planned: PlannedBatch, previous: asyncio.Task[bool] | None) -> bool:
        """Apply ``planned`` after ``previous``; ``True`` when it went exactly as planned."""
        as_planned = True
        if previous is not None and not await previous:
            planned = await self._windower.plan_batch(self._partition, planned.records)
            as_planned = False
        as_planned = await self._windower.finish_batch(planned) and as_planned
        if self._on_done is not None:
            self._on_done(planned.records)
        return as_planned
