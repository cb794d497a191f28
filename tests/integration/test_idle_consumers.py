"""An idle stage consumer wakes rarely and still gets a record at once (issue 28).

The stages' consumers (:func:`mongomem.stages.runtime.kafka.kafka_source`) hold
an idle fetch on the broker for ``FETCH_MAX_WAIT_MS`` and let aiokafka's fetch
routine tick every ``CONSUMER_TIMEOUT_MS`` instead of every 200 ms; neither may
delay a record that arrives, nor a partition the consumer is behind on. The local
broker runs with the idle JVM options.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from mongomem.adapters.kafka import ensure_topics, make_producer
from mongomem.local.infra import Servers
from mongomem.local.servers import IDLE_JVM_FLAGS, KAFKA_JVM_FLAGS
from mongomem.settings import Settings
from mongomem.stages.runtime.kafka import (
    BEHIND_FETCH_MAX_WAIT_MS,
    CONSUMER_TIMEOUT_MS,
    FETCH_MAX_WAIT_MS,
    kafka_source,
)

pytestmark = pytest.mark.integration

IDLE_S = 3.0


class LoopTurns:
    """Counts the running loop's turns (each is a wake-up of the process)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.turns = 0
        self._loop = loop
        self._inner = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            self.turns += 1
            self._inner()

        loop._run_once = counted  # type: ignore[attr-defined]

    def close(self) -> None:
        self._loop._run_once = self._inner  # type: ignore[attr-defined]


async def test_an_idle_stage_consumer_wakes_rarely_and_a_record_arrives_at_once(
    settings: Settings,
) -> None:
    topic = settings.kafka.topic("idle")
    await ensure_topics(settings.kafka, [topic], partitions=3)
    async with kafka_source(settings.kafka, topic, "windowing") as source:
        # assigned and positioned: the first polls come back empty; until every partition's
        # end is known its fetches are held briefly (BEHIND_FETCH_MAX_WAIT_MS), then one more
        # poll lets the last brief fetch come back
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(source.highwater(p) is None for p in range(3)):
            await source.poll(10, 0.5)
        await source.poll(10, 0.5)
        turns = LoopTurns(asyncio.get_running_loop())
        try:
            started = time.monotonic()
            assert await source.poll(10, IDLE_S) == {}
            idle = time.monotonic() - started
        finally:
            turns.close()
        # aiokafka's defaults (a 200 ms fetch routine tick, fetches back every 500 ms)
        # woke this loop about 30 times in 3 s; now the tick is 1 s and a fetch comes back
        # every 5 s (plus a heartbeat every 3 s and the poll's own timer).
        assert idle >= IDLE_S * 0.9
        assert turns.turns <= 16, turns.turns
        assert CONSUMER_TIMEOUT_MS >= 1000
        assert FETCH_MAX_WAIT_MS >= 5000

        producer = make_producer(settings.kafka)
        await producer.start()
        try:
            await asyncio.sleep(0.5)  # the consumer's fetch is held on the broker now
            sent = time.monotonic()
            await producer.send_and_wait(topic, b"v", key=b"k")
            got: list[bytes | None] = []
            while not got and time.monotonic() - sent < 10:
                for records in (await source.poll(10, 5.0)).values():
                    got.extend(r.value for r in records)
            latency = time.monotonic() - sent
        finally:
            await producer.stop()
        assert got == [b"v"]
        # answered by the held fetch, not after it or after the routine's next tick
        assert latency < 0.8, latency


async def test_a_partition_behind_is_not_held_up_by_the_fetch_of_caught_up_ones(
    settings: Settings,
) -> None:
    """Partitions 1 and 2 caught up, partition 0 behind, each of its fetches a few records, and
    the stage slower than aiokafka's 100 ms prefetch backoff: the fetch of 1 and 2 goes out
    alone and is held on the broker, and 0 cannot be fetched again until it is back. Held
    ``FETCH_MAX_WAIT_MS`` (5 s) every time, these 12 records took about a minute."""
    topic = settings.kafka.topic("behind")
    await ensure_topics(settings.kafka, [topic], partitions=3)
    producer = make_producer(settings.kafka, compression_type=None, linger_ms=0)
    await producer.start()
    try:
        for partition in (1, 2):
            await producer.send_and_wait(topic, b"caught up", key=b"k", partition=partition)
        for i in range(12):  # a record batch each: a fetch of 600 bytes takes one
            await producer.send_and_wait(topic, b"%03d" % i + b"x" * 400, partition=0)
    finally:
        await producer.stop()
    async with kafka_source(
        settings.kafka, topic, "windowing", max_partition_fetch_bytes=600
    ) as source:
        read: dict[int, int] = {}
        started = time.monotonic()
        # two holds of FETCH_MAX_WAIT_MS: the old code had read 3 of the 12 after one
        while sum(read.values()) < 14 and time.monotonic() - started < 2 * FETCH_MAX_WAIT_MS / 1000:
            batch = await source.poll(100, 1.0)
            for partition, records in batch.items():
                read[partition] = read.get(partition, 0) + len(records)
            if batch:
                await asyncio.sleep(0.12)  # the stage's work on them
        elapsed = time.monotonic() - started
    assert read == {0: 12, 1: 1, 2: 1}, (read, elapsed)
    assert BEHIND_FETCH_MAX_WAIT_MS <= 100


def test_the_local_broker_runs_with_the_idle_jvm_options(servers: Servers) -> None:
    """The broker the tests started runs C1 only and without the perf-data sampler."""
    kafka = getattr(servers, "kafka", None)
    process = getattr(kafka, "process", None)
    if process is None:
        pytest.skip("the tests run against a broker they did not start")
    command = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
    for flag in (*IDLE_JVM_FLAGS, *KAFKA_JVM_FLAGS):
        assert flag.encode() in command
