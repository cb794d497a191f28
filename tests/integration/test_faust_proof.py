"""Proof that faust-streaming works against the suite's broker (issue 2).

A minimal faust app consumes a topic with one agent and keeps a table of
counts per key; a second instance of the same app recovers the table from its
changelog topic before it processes anything.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import faust
import pytest

from mongomem.adapters.kafka import ensure_topics, make_producer
from mongomem.operations.status import group_lag
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


def counting_app(settings: Settings, app_id: str, topic: str, datadir: Path) -> tuple[Any, Any]:
    app = faust.App(
        app_id,
        broker=f"kafka://{settings.kafka.bootstrap}",
        store="memory://",
        datadir=datadir / app_id,
        web_enabled=False,
        topic_partitions=settings.kafka.partitions,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        key_serializer="raw",
        value_serializer="raw",
        broker_commit_interval=0.5,
    )
    source = app.topic(topic, key_type=bytes, value_type=bytes)
    counts = app.Table("counts", default=int, partitions=settings.kafka.partitions)

    async def count(stream: Any) -> None:
        async for event in stream.events():
            counts[event.key.decode()] += 1

    app.agent(source, name="count", concurrency=1)(count)
    return app, counts


async def eventually(predicate: Any, within: float) -> None:
    for _ in range(int(within / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not true within {within} s")


async def test_a_faust_app_consumes_a_topic_and_keeps_a_recoverable_table(
    settings: Settings, tmp_path: Path
) -> None:
    topic = settings.kafka.topic("faust-proof")
    await ensure_topics(settings.kafka, [topic])
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for i in range(30):
            await producer.send_and_wait(topic, b"x", key=f"k{i % 5}".encode())
    finally:
        await producer.stop()

    app_id = f"{settings.kafka.topic_prefix}.faust-proof-{uuid.uuid4().hex[:6]}"
    expected = {f"k{i}": 6 for i in range(5)}
    app, counts = counting_app(settings, app_id, topic, tmp_path)
    await app.start()
    try:
        await eventually(lambda: dict(counts.items()) == expected, 60)
    finally:
        await app.stop()

    changelog = f"{app_id}-counts-changelog"
    written = await group_lag(settings.kafka, f"{app_id}-nobody", changelog)
    assert written.end >= 5, "the table writes went to its changelog"
    position = await group_lag(settings.kafka, app_id, topic)
    assert position.committed == 30, "the group committed what it read"

    again, recovered = counting_app(settings, app_id, topic, tmp_path)
    await again.start()
    try:
        await eventually(lambda: dict(recovered.items()) == expected, 60)
        await asyncio.sleep(0.5)
        assert dict(recovered.items()) == expected, "recovered, and nothing counted twice"
    finally:
        await again.stop()
