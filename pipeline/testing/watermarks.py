"""Watermarks published by hand, for tests and benchmarks that write turns onto Kafka themselves.

The watcher publishes :class:`~mongomem.models.Watermark` records into every
partition of the turns topic (:mod:`mongomem.stages.watcher`). Code that
writes turns straight onto the topic in its place — the windowing tests and
``bench.windowing`` — stands in for a caught-up watcher with these. A
watermark promises that every turn created before its ``at`` is already on
the topic; :class:`InFlight` keeps that promise: a writer creates and sends
each turn inside :meth:`InFlight.sending`, and a watermark never passes the
start of a send that Kafka has not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from aiokafka import AIOKafkaProducer

from mongomem.codec import encode
from mongomem.models import Watermark, utcnow

__all__ = ["InFlight", "publish_watermark", "watermarks_every"]


class InFlight:
    """The sends a writer has begun and Kafka has not acknowledged yet."""

    def __init__(self) -> None:
        self._began: dict[int, datetime] = {}
        self._count = 0

    @contextlib.contextmanager
    def sending(self, created_at: datetime | None = None) -> Iterator[None]:
        """Send a turn (acknowledged) inside this block: created in it, or at ``created_at``."""
        self._count += 1
        token = self._count
        now = utcnow()  # no later than the created_at of a turn created in the block
        self._began[token] = now if created_at is None else min(now, created_at)
        try:
            yield
        finally:
            del self._began[token]

    def watermark(self) -> datetime:
        """Now, or when the oldest send in flight began: every turn created before is on Kafka."""
        now = utcnow()
        return min(self._began.values(), default=now)


async def publish_watermark(
    producer: AIOKafkaProducer, topic: str, at: datetime | None = None
) -> datetime:
    """One caught-up watermark (``at``, default now) into every partition, acknowledged."""
    at = at or utcnow()
    payload = encode(Watermark(at=at, caught_up=True))
    partitions = sorted(await producer.partitions_for(topic))
    sent = [await producer.send(topic, payload, partition=p) for p in partitions]
    await asyncio.gather(*sent)
    return at


@contextlib.asynccontextmanager
async def watermarks_every(
    producer: AIOKafkaProducer, topic: str, interval_s: float, in_flight: InFlight
) -> AsyncIterator[None]:
    """Publish ``in_flight``'s watermark every ``interval_s`` while the block runs."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            await publish_watermark(producer, topic, in_flight.watermark())

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
