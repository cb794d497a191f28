"""An idle change-stream reader on a server that answers every getMore at once (issue 28).

mongo-java-server ignores ``max_await_time_ms`` and scans its whole oplog per
getMore; the reader then probes the oplog's size instead of reading again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

import pytest
from pymongo.errors import PyMongoError

from mongomem.stages import watcher_reader
from mongomem.stages.watcher_reader import ChangeReader, Idle, Stream

PROBE_S = 0.01  # IDLE_PROBE_S for these tests
READ_S = 0.15  # IDLE_READ_S for these tests
POLL_S = 0.005


class AtOnceStream:
    """A change stream whose every read answers at once (counts the reads)."""

    def __init__(self) -> None:
        self.waiting: deque[dict[str, Any]] = deque()
        self.resume_token: dict[str, Any] | None = {"_data": "00"}
        self.reads = 0

    async def try_next(self) -> dict[str, Any] | None:
        self.reads += 1
        await asyncio.sleep(0)  # the round trip
        if not self.waiting:
            return None
        change = self.waiting.popleft()
        self.resume_token = change["_id"]
        return change


class Log:
    """The server's oplog as the probe sees it: its size grows with every write."""

    def __init__(self, stream: AtOnceStream) -> None:
        self.stream = stream
        self.entries = 7
        self.watched = 3
        self.asked = 0
        self.fail = False

    def write(self, n: int) -> dict[str, Any]:
        change = {"_id": {"_data": f"{n:02d}"}, "fullDocument": {"n": n}}
        self.entries += 1
        self.watched += 1
        self.stream.waiting.append(change)
        return change

    def write_elsewhere(self) -> None:
        self.entries += 1

    async def probe(self) -> tuple[int, int] | None:
        self.asked += 1
        if self.fail:
            raise PyMongoError("the probe failed")
        return self.entries, self.watched


@pytest.fixture(autouse=True)
def _fast_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watcher_reader, "IDLE_PROBE_S", PROBE_S)
    monkeypatch.setattr(watcher_reader, "IDLE_READ_S", READ_S)


async def _idle_for(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def test_an_idle_reader_with_a_probe_stops_reading_the_stream() -> None:
    stream = AtOnceStream()
    log = Log(stream)
    reader = ChangeReader(
        cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S, probe=log.probe
    )
    try:
        await _idle_for(0.3)
        # Two empty reads, then only probes: the server is not asked for a getMore again.
        assert stream.reads == 2
        assert log.asked >= 10
        assert reader.probes >= 10
    finally:
        await reader.close()


async def test_without_a_probe_an_idle_reader_polls_every_poll_s() -> None:
    stream = AtOnceStream()
    reader = ChangeReader(cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S)
    try:
        await _idle_for(0.3)
        assert stream.reads > 10  # what an idle watcher cost mongo-java-server before
    finally:
        await reader.close()


async def test_an_unchanged_probe_stands_for_an_empty_read_and_moves_read_at() -> None:
    stream = AtOnceStream()
    log = Log(stream)
    reader = ChangeReader(
        cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S, probe=log.probe
    )
    try:
        await _idle_for(0.05)
        first = reader.take(10)
        assert len(first) == 1
        assert isinstance(first[0], Idle)
        await _idle_for(0.05)
        second = reader.take(10)
        assert len(second) == 1
        assert isinstance(second[0], Idle)
        assert second[0].read_at > first[0].read_at  # the caught-up watermark moves on
        assert second[0].token == {"_data": "00"}
        assert stream.reads == 2
    finally:
        await reader.close()


async def test_a_write_makes_the_probing_reader_read_the_stream_again() -> None:
    stream = AtOnceStream()
    log = Log(stream)
    reader = ChangeReader(
        cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S, probe=log.probe
    )
    try:
        await _idle_for(0.05)
        reader.take(10)
        change = log.write(1)
        await _idle_for(PROBE_S * 10)
        taken = reader.take(10)
        assert change in taken
        assert stream.reads > 2
    finally:
        await reader.close()


async def test_a_failing_probe_falls_back_to_polling() -> None:
    stream = AtOnceStream()
    log = Log(stream)
    log.fail = True
    reader = ChangeReader(
        cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S, probe=log.probe
    )
    try:
        await _idle_for(0.3)
        assert log.asked == 1  # asked once, then never again
        assert stream.reads > 10
        change = log.write(2)
        await _idle_for(0.05)
        assert change in reader.take(10)
    finally:
        await reader.close()


async def test_writes_elsewhere_are_read_after_idle_read_s_and_stand_for_no_read() -> None:
    stream = AtOnceStream()
    log = Log(stream)
    reader = ChangeReader(
        cast(Stream, stream), asyncio.Event(), limit=10, poll_s=POLL_S, probe=log.probe
    )
    try:
        await _idle_for(0.05)
        reader.take(10)
        log.write_elsewhere()  # the oplog moved, turns did not
        await _idle_for(READ_S / 3)
        assert stream.reads == 2  # not read at once …
        assert reader.take(10) == []  # … and no probe stood for a read meanwhile
        await _idle_for(READ_S * 2)
        assert stream.reads > 2  # read again after IDLE_READ_S
    finally:
        await reader.close()


class SizedLog(Log):
    """The probe's two parts apart: how many commands each answer cost."""

    def __init__(self, stream: AtOnceStream) -> None:
        super().__init__(stream)
        self.sized = 0

    async def size(self) -> int | None:
        self.sized += 1
        if self.fail:
            raise PyMongoError("the probe failed")
        return self.entries


async def test_an_idle_reader_with_a_log_size_asks_one_count_per_probe() -> None:
    stream = AtOnceStream()
    log = SizedLog(stream)
    reader = ChangeReader(
        cast(Stream, stream),
        asyncio.Event(),
        limit=10,
        poll_s=POLL_S,
        probe=log.probe,
        log_size=log.size,
    )
    try:
        await _idle_for(0.3)
        assert stream.reads == 2
        assert log.asked == 1  # the mark before the second empty read, then …
        assert log.sized >= 10  # … only the log's size, once per probe
        assert reader.probes >= 10
        taken = reader.take(10)
        assert len(taken) == 1
        assert isinstance(taken[0], Idle)
    finally:
        await reader.close()


async def test_a_write_is_read_when_only_the_log_size_is_asked() -> None:
    stream = AtOnceStream()
    log = SizedLog(stream)
    reader = ChangeReader(
        cast(Stream, stream),
        asyncio.Event(),
        limit=10,
        poll_s=POLL_S,
        probe=log.probe,
        log_size=log.size,
    )
    try:
        await _idle_for(0.05)
        reader.take(10)
        change = log.write(1)
        await _idle_for(PROBE_S * 10)
        assert change in reader.take(10)
    finally:
        await reader.close()


async def test_writes_elsewhere_with_a_log_size_wait_idle_read_s_asking_two_counts() -> None:
    stream = AtOnceStream()
    log = SizedLog(stream)
    reader = ChangeReader(
        cast(Stream, stream),
        asyncio.Event(),
        limit=10,
        poll_s=POLL_S,
        probe=log.probe,
        log_size=log.size,
    )
    try:
        await _idle_for(0.05)
        reader.take(10)
        sized, asked = log.sized, log.asked
        log.write_elsewhere()  # the oplog moved, turns did not
        await _idle_for(READ_S / 3)
        assert stream.reads == 2  # not read at once …
        assert reader.take(10) == []  # … and no probe stood for a read meanwhile
        assert log.sized == sized + 1  # the size once (it moved), then the full probe
        assert log.asked > asked + 1
        await _idle_for(READ_S * 2)
        assert stream.reads > 2  # read again after IDLE_READ_S
    finally:
        await reader.close()


async def test_a_failing_log_size_falls_back_to_polling() -> None:
    stream = AtOnceStream()
    log = SizedLog(stream)
    reader = ChangeReader(
        cast(Stream, stream),
        asyncio.Event(),
        limit=10,
        poll_s=POLL_S,
        probe=log.probe,
        log_size=log.size,
    )
    try:
        await _idle_for(0.05)
        log.fail = True
        await _idle_for(0.3)
        assert stream.reads > 10
        change = log.write(2)
        await _idle_for(0.05)
        assert change in reader.take(10)
    finally:
        await reader.close()
