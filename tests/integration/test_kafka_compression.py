"""Producers compress as ``MONGOMEM_KAFKA_COMPRESSION`` says; consumers read every codec."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer

from mongomem.adapters.kafka import ensure_topics, make_producer
from mongomem.local.infra import Servers
from mongomem.settings import KafkaSettings, Settings

pytestmark = pytest.mark.integration

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Compressible like conversation text: the same words, in other orders.
WORDS = (
    "please",
    "compare",
    "the",
    "flights",
    "to",
    "lisbon",
    "by",
    "price",
    "stops",
    "and",
    "travel",
    "time",
)


def records(n: int) -> list[bytes]:
    return [
        " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)).encode() + b" %d" % i
        for i in range(n)
    ]


async def produce(kafka: KafkaSettings, topic: str, values: list[bytes]) -> None:
    await ensure_topics(kafka, [topic], partitions=1)
    producer = make_producer(kafka)
    await producer.start()
    try:
        acks = [await producer.send(topic, value, key=b"k") for value in values]
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


async def consume(kafka: KafkaSettings, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        while len(values) < count:
            batch = await consumer.getmany(timeout_ms=1000)
            for got in batch.values():
                values.extend(r.value for r in got if r.value is not None)
    finally:
        await consumer.stop()
    return values


async def test_every_codec_round_trips_through_the_broker(settings: Settings) -> None:
    values = records(300)
    for codec in CODECS:
        kafka = settings.kafka.model_copy(update={"compression": codec})
        topic = kafka.topic(f"codec-{codec}")
        await produce(kafka, topic, values)
        assert await asyncio.wait_for(consume(kafka, topic, len(values)), 60) == values, codec


async def test_the_default_codec_shrinks_what_the_broker_stores(
    settings: Settings, servers: Servers
) -> None:
    if servers.kafka is None:
        pytest.skip("the broker's log directory is readable only for the local broker")
    assert settings.kafka.compression == "zstd"  # the default
    values = records(2000)
    sizes = {}
    for codec in ("none", settings.kafka.compression):
        kafka = settings.kafka.model_copy(update={"compression": codec})
        topic = kafka.topic(f"size-{codec}")
        await produce(kafka, topic, values)
        logs = servers.kafka.state_dir / "kafka-data" / f"{topic}-0"
        sizes[codec] = sum(f.stat().st_size for f in logs.glob("*.log"))
    assert sizes["none"] > sum(len(v) for v in values)
    assert sizes["zstd"] * 3 < sizes["none"], sizes
