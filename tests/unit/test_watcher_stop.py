"""The watcher stops on SIGTERM while the broker is away (it used to ignore it: each
restart made a new stop event, and the SIGTERM between them was lost)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket

import pytest

from mongomem.operations import restarts
from mongomem.settings import KafkaSettings, MongoSettings, Settings
from mongomem.stages import watcher


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there now: the broker is "down"


class _Restarted(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "stopped on a retriable error" in record.getMessage():
            self.seen.set()


async def test_sigterm_during_a_broker_outage_stops_the_watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[str] = []

    async def record_restart(settings: Settings, stage: str, error: BaseException) -> None:
        counted.append(stage)  # (MongoDB is away too: the real one would only warn)

    monkeypatch.setattr(restarts, "record_restart", record_restart)
    settings = Settings(
        kafka=KafkaSettings(bootstrap=f"127.0.0.1:{_closed_port()}", request_timeout_s=1),
        mongodb=MongoSettings(
            uri=f"mongodb://127.0.0.1:{_closed_port()}", server_selection_timeout_s=0.2
        ),
    )
    restarted = _Restarted()
    logging.getLogger("mongomem").addHandler(restarted)
    try:
        task = asyncio.create_task(watcher.main(settings, argparse.Namespace()))
        seen = asyncio.create_task(restarted.seen.wait())
        await asyncio.wait([task, seen], return_when=asyncio.FIRST_COMPLETED)
        assert not task.done(), task.exception()  # the outage restarts it, it does not end
        os.kill(os.getpid(), signal.SIGTERM)
        await task  # returns (exit 0), the SIGTERM is honoured
        assert set(counted) == {"watcher"}  # restarted by the one restart loop, counted
    finally:
        logging.getLogger("mongomem").removeHandler(restarted)
