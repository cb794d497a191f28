"""An outage's "back" line comes when the dependency is back, with no traffic (issue 25).

Each test starts a server of its own (free port), opens an outage in the log the
way a stage's failure does, kills the server (SIGKILL), checks that the real probe
keeps the outage open while it is down, starts it again on the same port, and
waits for the one "… is back after …" line. Nothing is consumed, produced or
written: before the probes, nothing ended such an outage until the next record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mongomem import logs
from mongomem.local.servers import LocalKafka, LocalMongo, LocalServer, free_port, jars_cached
from mongomem.logs import OutageLog
from mongomem.settings import KafkaSettings, MongoSettings, load_settings
from mongomem.stages.runtime.kafka import probe_kafka
from mongomem.stages.runtime.outages import Probe, probe_mongodb, watch_outages

pytestmark = pytest.mark.integration


@pytest.fixture
def cache() -> Path:
    cache = load_settings().infra.state_dir.resolve() / "cache"
    if not jars_cached(cache):
        pytest.skip("the server jars are not resolved here (the test servers resolve them)")
    return cache


@pytest.fixture
def outage() -> Iterator[OutageLog]:
    outage = OutageLog()
    logs._outages[:] = [outage]
    try:
        yield outage
    finally:
        logs._outages.clear()


def _lose(outage: OutageLog, dependency: str) -> None:
    """What a stage's failure does: a WARNING naming the dependency passes the outage log."""
    record = logging.LogRecord(
        "mongomem.stages.runtime",
        logging.WARNING,
        "",
        1,
        f"reconciler stopped on a retriable error ({dependency} unreachable); restarting in 1s",
        None,
        None,
    )
    assert outage.filter(record)
    assert record.getMessage().startswith(f"lost {dependency}: ")
    assert logs.open_outages() == {dependency}


async def _kill_then_restart(
    server: LocalServer, probe: Probe, dependency: str, caplog: pytest.LogCaptureFixture
) -> float:
    """Kill ``server``, see the outage stay open, restart it; seconds until "back"."""
    stop = asyncio.Event()
    watching = asyncio.create_task(watch_outages({dependency: probe}, stop, interval_s=0.5))
    try:
        server.kill()
        await asyncio.sleep(3.0)  # several probes, each failing
        assert logs.open_outages() == {dependency}
        assert not [r for r in caplog.records if r.name == "mongomem.outage"]
        await asyncio.to_thread(server.start)
        began = time.monotonic()
        for _ in range(300):  # polled every 0.1 s, at most 30 s
            if not logs.open_outages():
                break
            await asyncio.sleep(0.1)
        return time.monotonic() - began
    finally:
        stop.set()
        await watching


async def test_mongodb_back_is_told_without_traffic(
    tmp_path: Path, cache: Path, outage: OutageLog, caplog: pytest.LogCaptureFixture
) -> None:
    server = LocalMongo(port=free_port(), state_dir=tmp_path, cache_dir=cache)
    await asyncio.to_thread(server.start)
    settings = MongoSettings(uri=server.uri)
    try:
        assert await probe_mongodb(settings)
        _lose(outage, "MongoDB")
        with caplog.at_level(logging.INFO, logger="mongomem.outage"):
            took = await _kill_then_restart(
                server, lambda: probe_mongodb(settings, timeout_s=1.0), "MongoDB", caplog
            )
    finally:
        server.stop()
    assert not logs.open_outages(), "the outage stayed open with MongoDB back"
    back = [r.getMessage() for r in caplog.records if r.name == "mongomem.outage"]
    assert len(back) == 1, back
    assert back[0].startswith("MongoDB is back after "), back
    assert took < 30.0


async def test_kafka_back_is_told_without_traffic(
    tmp_path: Path, cache: Path, outage: OutageLog, caplog: pytest.LogCaptureFixture
) -> None:
    server = LocalKafka(port=free_port(), state_dir=tmp_path, cache_dir=cache, controller_port=0)
    await asyncio.to_thread(server.start)
    settings = KafkaSettings(bootstrap=server.bootstrap)
    try:
        assert await probe_kafka(settings)
        _lose(outage, "Kafka")
        with caplog.at_level(logging.INFO, logger="mongomem.outage"):
            took = await _kill_then_restart(
                server, lambda: probe_kafka(settings, timeout_s=1.0), "Kafka", caplog
            )
    finally:
        server.stop()
    assert not logs.open_outages(), "the outage stayed open with Kafka back"
    back = [r.getMessage() for r in caplog.records if r.name == "mongomem.outage"]
    assert len(back) == 1, back
    assert back[0].startswith("Kafka is back after "), back
    assert took < 30.0


async def test_a_probe_of_a_closed_port_says_no_within_its_timeout() -> None:
    port = free_port()
    began = time.monotonic()
    assert not await probe_mongodb(
        MongoSettings(uri=f"mongodb://127.0.0.1:{port}/?directConnection=true"), timeout_s=0.5
    )
    assert not await probe_kafka(KafkaSettings(bootstrap=f"127.0.0.1:{port}"), timeout_s=0.5)
    assert time.monotonic() - began < 10.0
