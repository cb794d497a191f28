"""What the broker refuses reaches the stage (the CI failure of stop 30).

A broker restarted while the windowing stage started left its changelog topic
uncreated: the admin client's answer carried the refusal, nobody read it, and
the stage's partition assignment then failed on the missing topic over and over
(aiokafka logs a rebalance callback's error and carries on). Both now surface:
a refused creation is a :class:`BrokerError`, and a failed assignment ends the
source's next poll, so the stage's supervisor restarts the attempt (which
creates the topic again).
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from mongomem.adapters.kafka import ensure_topics
from mongomem.errors import BrokerError
from mongomem.operations.status import consumer_group
from mongomem.settings import Settings
from mongomem.stages.runtime.kafka import KafkaPartitionReader, kafka_publisher, kafka_source

pytestmark = pytest.mark.integration


async def _topics(settings: Settings) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def committed(settings: Settings, topic: str, group: str) -> int | None:
    """The group's committed offset of partition 0 (``None``: none)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap, group_id=group)
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(TopicPartition(topic, 0))
        return offset
    finally:
        await consumer.stop()


async def test_a_topic_the_broker_refuses_to_create_is_an_error(settings: Settings) -> None:
    topic = settings.kafka.topic(f"refused-{uuid.uuid4().hex[:6]}")
    # one broker cannot hold three replicas: the broker answers InvalidReplicationFactor
    three = settings.kafka.model_copy(update={"replication_factor": 3})
    refused = rf"did not create {re.escape(topic)}: InvalidReplicationFactor"
    with pytest.raises(BrokerError, match=refused):
        await ensure_topics(three, [topic], partitions=1)
    assert topic not in await _topics(settings)
    with pytest.raises(BrokerError, match=r"InvalidConfig"):
        await ensure_topics(
            settings.kafka, [topic], partitions=1, configs={"cleanup.policy": "sometimes"}
        )
    # an existing topic is no refusal: creating it twice is idempotent
    await ensure_topics(settings.kafka, [topic], partitions=1)
    await ensure_topics(settings.kafka, [topic], partitions=1)
    assert topic in await _topics(settings)


async def test_a_failed_assignment_ends_the_next_poll(settings: Settings) -> None:
    topic = settings.kafka.topic(f"assign-{uuid.uuid4().hex[:6]}")
    await ensure_topics(settings.kafka, [topic], partitions=2)
    calls: list[list[int]] = []

    async def assigned(partitions: list[int]) -> None:
        calls.append(partitions)
        raise BrokerError("the changelog of these partitions could not be read")

    async with kafka_publisher(settings.kafka) as publisher:
        await (await publisher.send(topic, b"a turn", key=b"s", partition=0))
    suffix = uuid.uuid4().hex[:6]
    group = consumer_group(settings.kafka, "refusals", suffix)
    async with kafka_source(
        settings.kafka, topic, "refusals", suffix, on_assigned=assigned
    ) as source:

        async def poll_until_it_raises() -> None:
            while True:
                batch = await source.poll(10, 0.2)
                assert not batch, "records were handed out after the assignment failed"

        with pytest.raises(BrokerError, match="could not be read"):
            await asyncio.wait_for(poll_until_it_raises(), 60)
        # records fetched while the assignment ran were never applied: nothing is
        # committed past them (a stage handed them on and committed, and lost them)
        with pytest.raises(BrokerError, match="could not be read"):
            await source.commit({0: 1})
    assert calls == [[0, 1]]
    assert await committed(settings, topic, group) is None


async def test_reading_a_missing_changelog_fails_at_once(settings: Settings) -> None:
    """A restore of a topic that does not exist is an error in seconds (aiokafka's
    offset lookup retried for twice its request timeout, 80 s, inside the rebalance)."""
    missing = settings.kafka.topic(f"missing-{uuid.uuid4().hex[:6]}-changelog")
    reader = KafkaPartitionReader(settings.kafka)

    async def restore() -> list[object]:
        return [record async for record in reader.read(missing, [0, 1])]

    with pytest.raises(BrokerError, match="the topic does not exist"):
        await asyncio.wait_for(restore(), 20)
    assert missing not in await _topics(settings)  # and reading it created nothing
