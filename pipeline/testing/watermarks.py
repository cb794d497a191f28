"""Watermarks published by hand, for tests and benchmarks that write turns onto Kafka themselves.

The watcher publishes :class:`~mongomem.models.Watermark` records into every
partition of the turns topic (:mod:`mongomem.stages.watcher`). Code that
writes turns straight onto the topic in its place — the windowing tests and
``bench.windowing`` — stands in for a caught-up watcher with these: a
watermark promises that every turn created before its ``at`` is already on
the topic, which holds when the turns were sent (and acknowledged) first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

from aiokafka import AIOKafkaProducer

from mongomem.codec import encode
from mongomem.models import Watermark, utcnow

__all__ = ["publish_watermark", "watermarks_every"]


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
    producer: AIOKafkaProducer,
    topic: str,
    interval_s: float,
    *,
    lock: asyncio.Lock | None = None,
    lateness_s: float = 0.0,
) -> AsyncIterator[None]:
    """Publish a watermark (now less ``lateness_s``) every ``interval_s`` while the block runs.

    Sound when every turn created before it has been acknowledged first: a
    writer that creates and sends each turn while holding ``lock`` gets that.
    """

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            async with lock or contextlib.nullcontext():
                at = utcnow() - timedelta(seconds=lateness_s)
                await publish_watermark(producer, topic, at)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
