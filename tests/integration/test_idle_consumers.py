"""An idle stage consumer wakes rarely and still gets a record at once (issue 28).

The stages' consumers (:func:`mongomem.stages.runtime.kafka.kafka_source`) hold
an idle fetch on the broker for ``FETCH_MAX_WAIT_MS`` and let aiokafka's fetch
routine tick every ``CONSUMER_TIMEOUT_MS`` instead of every 200 ms; neither may
delay a record that arrives. The local broker runs with the idle JVM options.
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
from mongomem.stages.runtime.kafka import CONSUMER_TIMEOUT_MS, FETCH_MAX_WAIT_MS, kafka_source

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
        # assigned and positioned: the first polls come back empty
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and all(source.highwater(p) is None for p in range(3)):
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


def test_the_local_broker_runs_with_the_idle_jvm_options(servers: Servers) -> None:
    """The broker the tests started runs C1 only and without the perf-data sampler."""
    kafka = getattr(servers, "kafka", None)
    process = getattr(kafka, "process", None)
    if process is None:
        pytest.skip("the tests run against a broker they did not start")
    command = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
    for flag in (*IDLE_JVM_FLAGS, *KAFKA_JVM_FLAGS):
        assert flag.encode() in command
