"""Operations helpers against the real broker: lag, dead-letter counts, replay positions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer

from mongomem.adapters.kafka import (
    DeadLetter,
    dead_letter_topic,
    ensure_topics,
    make_producer,
)
from mongomem.codec import encode
from mongomem.models import Watermark, utcnow
from mongomem.operations.status import (
    consumer_group,
    dead_letter_counts,
    group_lag,
    set_group_position,
)
from mongomem.settings import Settings
from mongomem.stages.runtime import PublishedDeadLetters
from mongomem.stages.runtime.kafka import KafkaPublisher

pytestmark = pytest.mark.integration


async def _produce(settings: Settings, topic: str, values: list[bytes]) -> None:
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def test_replay_position_lag_and_dead_letters(settings: Settings) -> None:
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, [topic, dead_letter_topic(settings.kafka, "x")])
    await _produce(settings, topic, [b"a", b"b", b"c"])
    await asyncio.sleep(1.1)
    middle = datetime.now(UTC)
    await asyncio.sleep(0.1)
    await _produce(settings, topic, [b"d", b"e"])

    group = consumer_group(settings.kafka, "windowing", "-replay1")
    assert group == f"{settings.kafka.topic_prefix}.windowing-replay1"
    positions = await set_group_position(settings.kafka, group, topic, since=middle)
    assert sum(positions.values()) == 3  # all in one partition: starts after a, b, c
    lag = await group_lag(settings.kafka, group, topic)
    assert (lag.committed, lag.end, lag.lag) == (3, 5, 2)

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.kafka.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        got = await consumer.getmany(timeout_ms=5000)
        assert sorted(r.value for rs in got.values() for r in rs if r.value) == [b"d", b"e"]
    finally:
        await consumer.stop()

    from_start = await set_group_position(settings.kafka, group + "b", topic)
    assert sum(from_start.values()) == 0

    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        letter = DeadLetter.of(
            stage="x",
            topic=topic,
            partition=0,
            offset=1,
            key=b"k",
            value=b"\xff",
            error=ValueError("bad"),
            attempts=3,
        )
        await PublishedDeadLetters(KafkaPublisher(producer), settings.kafka).send(letter, b"k")
    finally:
        await producer.stop()
    assert await dead_letter_counts(settings.kafka, ["x"]) == {"x": 1}
    assert letter.original_value() == b"\xff"


async def test_lag_leaves_out_watermarks_when_asked(settings: Settings) -> None:
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, [topic], partitions=1)
    mark = encode(Watermark(at=utcnow(), caught_up=True))
    await _produce(settings, topic, [mark, b"a turn", mark, mark])
    group = consumer_group(settings.kafka, "windowing", "-idle")
    await set_group_position(settings.kafka, group, topic)
    plain = await group_lag(settings.kafka, group, topic)
    assert (plain.lag, plain.markers, plain.data_lag) == (4, 0, 4)
    idle = await group_lag(settings.kafka, group, topic, markers=frozenset({"watermark"}))
    assert (idle.lag, idle.markers, idle.data_lag) == (4, 3, 1)
