"""Structured logs: one JSON object per line, tagged with the stage.

``mongomem run <stage>`` calls :func:`configure_logging` once per process;
library code only uses ``logging.getLogger(__name__)``. Fields: ``ts`` (UTC,
ISO 8601), ``level``, ``stage``, ``logger``, ``msg``, and ``exc`` when an
exception is attached.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["JsonFormatter", "configure_logging"]


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
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # aiokafka logs every failed reconnect at ERROR; one line per retry is enough.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
