"""Stage log lines are JSON carrying the stage's name."""

from __future__ import annotations

import json
import logging

from mongomem.logs import JsonFormatter


def test_log_lines_are_json_with_the_stage() -> None:
    record = logging.LogRecord(
        "mongomem.x", logging.WARNING, __file__, 1, "hi %s", ("there",), None
    )
    entry = json.loads(JsonFormatter("watcher").format(record))
    assert entry["stage"] == "watcher"
    assert entry["msg"] == "hi there"
    assert entry["level"] == "WARNING"
    assert entry["ts"].endswith("+00:00")
