"""Structured logs: one JSON object per line, tagged with the stage.

``mongomem run <stage>`` calls :func:`configure_logging` once per process;
library code only uses ``logging.getLogger(__name__)``. Fields: ``ts`` (UTC,
ISO 8601), ``level``, ``stage``, ``logger``, ``msg``, and ``exc`` when an
exception is attached. Warnings and errors that repeat (a broker or database
outage) are rate-limited by :class:`RepeatLimiter`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["REPEAT_WINDOW_S", "JsonFormatter", "RepeatLimiter", "configure_logging"]

#: At most one WARNING-or-worse line per kind of message per this many seconds.
REPEAT_WINDOW_S = 5.0


class RepeatLimiter(logging.Filter):
    """Lets through one WARNING-or-worse record per kind per ``window_s``; counts the rest.

    A *kind* is one message template of one of our loggers, or any message at
    all from a library (aiokafka logs every reconnect attempt of an outage,
    hundreds a second, each worded differently). The next record of a kind
    let through says how many were suppressed before it. INFO and DEBUG pass.
    """

    def __init__(
        self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._last: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        top = record.name.partition(".")[0]
        kind: object = top if top != "mongomem" else (record.name, record.msg)
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.window_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._last[kind] = now
        skipped = self._suppressed.pop(kind, 0)
        if skipped:
            record.msg = f"{record.getMessage()} ({skipped} similar suppressed before this)"
            record.args = None
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, stage: str) -> None:
        super().__init__()
        self.stage = stage

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "stage": self.stage,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(stage: str, level: str = "INFO") -> None:
    """Send every log record to stderr as one JSON line (replaces earlier handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(stage))
    handler.addFilter(RepeatLimiter())  # an outage: one line per kind per few seconds
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # aiokafka logs every failed reconnect at ERROR; the limiter thins what is left.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
