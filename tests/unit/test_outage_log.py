"""An outage is told in three kinds of line (issue 25): lost, a summary at most once a
minute, back; everything else it makes the stage and its libraries say is counted."""

from __future__ import annotations

import logging

import pytest

from mongomem import logs
from mongomem.logs import OutageLog, dependency_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(name: str, msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_the_dependency_is_told_by_logger_or_by_the_error_named() -> None:
    assert dependency_of(_record("aiokafka.conn", 'Unable connect to "127.0.0.1:9092"')) == "Kafka"
    retrying = "windowing: BrokerError (could not publish); retrying"
    assert dependency_of(_record("mongomem.stages.runtime.consume", retrying)) == "Kafka"
    storage = "reconciler: StorageError (no answer); retrying"
    assert dependency_of(_record("mongomem.stages.runtime.consume", storage)) == "MongoDB"
    assert dependency_of(_record("mongomem.x", "a dead letter", logging.WARNING)) is None
    assert dependency_of(_record("aiokafka", "reconnect", logging.INFO)) is None


def test_an_outage_is_one_line_lost_a_summary_a_minute_and_one_line_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = OutageLog(clock=clock)
    shown = []
    for second in range(0, 150):  # 2.5 minutes of an error every 0.5 s, from two sources
        clock.now = float(second)
        for name in ("aiokafka.conn", "mongomem.stages.runtime.consume"):
            record = _record(name, "windowing: BrokerError (down); retrying")
            if outage.filter(record):
                shown.append(record.getMessage())
    assert len(shown) == 3  # lost, and a summary at 60 s and 120 s
    assert shown[0].startswith("lost Kafka: ")
    assert shown[1].startswith("Kafka still unreachable after 60 s (119 messages suppressed)")
    assert shown[2].startswith("Kafka still unreachable after 120 s")
    assert outage.filter(_record("mongomem.x", "something else entirely"))  # not an outage
    clock.now = 200.0
    logs._outages[:] = [outage]
    try:
        with caplog.at_level(logging.INFO, logger="mongomem.outage"):
            logs.dependency_ok("Kafka")
            logs.dependency_ok("Kafka")  # once only
    finally:
        logs._outages.clear()
    assert [r.getMessage() for r in caplog.records] == [
        "Kafka is back after 200 s (59 messages suppressed since the last line)"
    ]
    first = _record("aiokafka.conn", "down again")
    assert outage.filter(first)  # a new outage starts with its own "lost" line
    assert first.getMessage() == "lost Kafka: down again"


def test_the_lost_line_passes_the_repeat_limiter_after_a_library_line_of_just_before() -> None:
    """The outage's "lost" line is never rate-limited away: dropped there, the outage
    was open yet untold, and every line of it was suppressed (a fresh broker's transient
    GroupCoordinatorNotAvailable at start, then the broker stopped within 5 s)."""
    clock = Clock()
    outage, limiter = OutageLog(clock=clock), logs.RepeatLimiter(clock=clock)

    def shown(record: logging.LogRecord) -> bool:
        return outage.filter(record) and limiter.filter(record)

    logs._outages[:] = [outage]
    try:
        assert shown(_record("aiokafka.consumer.group_coordinator", "GroupCoordinatorNotAvailable"))
        clock.now = 0.5
        logs.dependency_ok("Kafka")  # the group was joined: that outage is over
    finally:
        logs._outages.clear()
    clock.now = 1.0  # the broker stops: within the limiter's window of the line above
    first = _record("aiokafka.consumer.fetcher", "Failed fetch messages from 1")
    assert shown(first)
    assert first.getMessage() == "lost Kafka: Failed fetch messages from 1"
    clock.now = 2.0
    assert not shown(_record("aiokafka", "Unable connect to node with id 1"))  # counted
    assert limiter.filter(_record("mongomem.x", "a dead letter", logging.WARNING))
    assert not limiter.filter(_record("mongomem.x", "a dead letter", logging.WARNING))
