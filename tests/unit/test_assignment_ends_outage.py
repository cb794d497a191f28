"""An assignment of the stage's partitions ends a Kafka outage with its "back" line.

An idle stage handles no records, so without this an outage opened by a transient
error at its start (a fresh broker's GroupCoordinatorNotAvailable) stayed open and
swallowed every line of the next, real one.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("aiokafka")

from aiokafka import TopicPartition

from mongomem import logs
from mongomem.logs import OutageLog
from mongomem.stages.runtime.kafka import _Listener


def test_an_assignment_ends_an_open_kafka_outage(caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog()
    lost = logging.LogRecord(
        "aiokafka.consumer.group_coordinator",
        logging.ERROR,
        "",
        1,
        "GroupCoordinatorNotAvailableError",
        None,
        None,
    )
    assert outage.filter(lost)  # the outage opens: "lost Kafka: …"
    assigned: list[list[int]] = []

    async def on_assigned(partitions: list[int]) -> None:
        assigned.append(partitions)

    async def nothing(partitions: list[int]) -> None:
        return None

    listener = _Listener("t.candidates", on_assigned, nothing)
    logs._outages[:] = [outage]
    try:
        with caplog.at_level(logging.INFO, logger="mongomem.outage"):
            asyncio.run(
                listener.on_partitions_assigned(
                    [TopicPartition("t.candidates", 1), TopicPartition("other", 0)]
                )
            )
    finally:
        logs._outages.clear()
    assert assigned == [[1]]
    assert [r.getMessage() for r in caplog.records] == [
        "Kafka is back after 0 s (0 messages suppressed since the last line)"
    ]
    again = logging.LogRecord("aiokafka.conn", logging.ERROR, "", 1, "down", None, None)
    assert outage.filter(again)  # the next outage is told: it has its own "lost" line
    assert again.getMessage() == "lost Kafka: down"
