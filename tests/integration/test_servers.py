"""Proof that the real drivers work against the servers the suite runs on (issue 2)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import ensure_topics, make_producer
from mongomem.adapters.mongo import Document, capabilities
from mongomem.local.infra import Servers
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


async def test_change_stream_sees_insert_and_resumes_after_token(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """The suite's MongoDB is a real server: change streams and resume tokens (SPEC I4)."""
    coll = mongo[settings.mongodb.database]["events"]
    async with await coll.watch([{"$match": {"operationType": "insert"}}]) as stream:
        await coll.insert_one({"n": 1})
        change = await asyncio.wait_for(stream.next(), 10)
        assert change["fullDocument"]["n"] == 1
        token = stream.resume_token
    await coll.insert_many([{"n": 2}, {"n": 3}])
    async with await coll.watch(resume_after=token) as resumed:
        seen = [(await asyncio.wait_for(resumed.next(), 10))["fullDocument"]["n"] for _ in range(2)]
    assert seen == [2, 3]


async def test_kafka_committed_offsets_are_resumed_by_a_new_consumer(settings: Settings) -> None:
    """The suite's Kafka is a real broker: committed offsets resume (SPEC I4)."""
    topic = settings.kafka.topic("proof")
    await ensure_topics(settings.kafka, [topic], partitions=1)
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for i in range(6):
            await producer.send_and_wait(topic, str(i).encode(), key=b"k")
    finally:
        await producer.stop()

    group = f"g-{uuid.uuid4().hex[:6]}"

    async def consume(count: int, commit: bool) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=settings.kafka.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        values: list[bytes] = []
        try:
            while len(values) < count:
                batch = await consumer.getmany(timeout_ms=1000, max_records=count - len(values))
                for records in batch.values():
                    values.extend(r.value for r in records if r.value is not None)
            if commit:
                last = await consumer.position(TopicPartition(topic, 0))
                await consumer.commit({TopicPartition(topic, 0): last})
        finally:
            await consumer.stop()
        return values

    first = await asyncio.wait_for(consume(4, commit=True), 60)
    rest = await asyncio.wait_for(consume(2, commit=False), 60)
    assert first == [b"0", b"1", b"2", b"3"]
    assert rest == [b"4", b"5"]


async def test_capabilities_probe_answers_on_this_server(
    mongo: AsyncMongoClient[Document], servers: Servers
) -> None:
    caps = await capabilities(mongo)
    assert caps.server
    # mongo-java-server has no transactions; a replica set (containers, a given URI) has.
    if servers.mongo is not None:
        assert caps.transactions is False
