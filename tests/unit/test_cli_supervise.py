"""A stage that fails on a retriable error is restarted in-process; a final error ends it."""

from __future__ import annotations

import json
import logging

import pytest

from mongomem.cli import supervise
from mongomem.errors import BrokerError, ConfigError
from mongomem.logs import JsonFormatter


async def test_retriable_failures_restart_the_stage() -> None:
    calls = 0

    async def stage() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise BrokerError("broker down")

    await supervise("demo", stage, first_delay_s=0.01)
    assert calls == 3


async def test_final_failures_end_the_process() -> None:
    calls = 0

    async def stage() -> None:
        nonlocal calls
        calls += 1
        raise ConfigError("bad key")

    with pytest.raises(ConfigError):
        await supervise("demo", stage, first_delay_s=0.01)
    assert calls == 1


def test_log_lines_are_json_with_the_stage() -> None:
    record = logging.LogRecord(
        "mongomem.x", logging.WARNING, __file__, 1, "hi %s", ("there",), None
    )
    entry = json.loads(JsonFormatter("watcher").format(record))
    assert entry["stage"] == "watcher"
    assert entry["msg"] == "hi there"
    assert entry["level"] == "WARNING"
    assert entry["ts"].endswith("+00:00")


async def test_each_restart_is_handed_to_on_restart() -> None:
    calls = 0
    seen: list[tuple[str, str]] = []

    async def stage() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise BrokerError(f"broker down {calls}")

    async def counted(name: str, error: Exception) -> None:
        seen.append((name, str(error)))

    await supervise("demo", stage, first_delay_s=0.01, on_restart=counted)
    assert seen == [("demo", "broker down 1"), ("demo", "broker down 2")]
