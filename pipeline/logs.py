"""Structured logs: one JSON object per line, tagged with the stage.

``mongomem run <stage>`` calls :func:`configure_logging` once per process;
library code only uses ``logging.getLogger(__name__)``. Fields: ``ts`` (UTC,
ISO 8601), ``level``, ``stage``, ``logger``, ``msg``, and ``exc`` when an
exception is attached. Warnings and errors that repeat are rate-limited by
:class:`RepeatLimiter`.

An outage of a dependency (Kafka, MongoDB) is told by :class:`OutageLog` in
three kinds of line: one when the stage loses it (``lost Kafka: …``), a
summary at most once per :data:`OUTAGE_SUMMARY_S` while it lasts (``Kafka still
unreachable after 65 s …``), and one when it is back (``Kafka is back after …``,
from :func:`dependency_ok`, which the stage runtime calls when work that needed
it succeeded, and when its probe of an open outage (:func:`open_outages`) finds
the dependency answering again, with no traffic at all). Everything else the
outage makes the stage or its libraries say is counted, not written.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = [
    "OUTAGE_SUMMARY_S",
    "REPEAT_WINDOW_S",
    "JsonFormatter",
    "OutageLog",
    "RepeatLimiter",
    "configure_logging",
    "dependency_of",
    "dependency_ok",
    "open_outages",
]

#: At most one WARNING-or-worse line per kind of message per this many seconds.
REPEAT_WINDOW_S = 5.0
#: During an outage, at most one summary line per this many seconds.
OUTAGE_SUMMARY_S = 60.0

#: Words of a failure that name the dependency it is an outage of (checked in order).
_DEPENDENCY_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Kafka", ("BrokerError", "KafkaConnectionError", "KafkaTimeoutError", "Kafka", "broker")),
    (
        "MongoDB",
        (
            "StorageError",
            "ServerSelectionTimeoutError",
            "AutoReconnect",
            "MongoDB",
            "NetworkTimeout",
        ),
    ),
)


def dependency_of(record: logging.LogRecord) -> str | None:
    """The dependency a WARNING-or-worse record reports the loss of (``None``: not an outage)."""
    if record.levelno < logging.WARNING:
        return None
    top = record.name.partition(".")[0]
    if top == "aiokafka":
        return "Kafka"
    if top == "pymongo":
        return "MongoDB"
    if top != "mongomem":
        return None
    text = record.getMessage()
    if "retrying" not in text and "restarting" not in text and "unreachable" not in text:
        return None
    for name, words in _DEPENDENCY_WORDS:
        if any(word in text for word in words):
            return name
    return None


class OutageLog(logging.Filter):
    """Tells an outage in three kinds of line (see the module doc); counts the rest.

    The first failure record of a dependency passes as ``lost <dependency>: …``;
    the following ones are suppressed, but one in :data:`OUTAGE_SUMMARY_S` passes as
    a summary. :meth:`ok` ends the outage with one line (it is logged through
    the logger ``mongomem.outage`` at INFO).
    """

    def __init__(
        self, summary_s: float = OUTAGE_SUMMARY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.summary_s = summary_s
        self._clock = clock
        #: dependency → [since, last summary, suppressed]
        self._down: dict[str, list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        dependency = dependency_of(record)
        if dependency is None:
            return True
        now = self._clock()
        state = self._down.get(dependency)
        text = record.getMessage()
        if state is None:
            self._down[dependency] = [now, now, 0]
            record.msg, record.args = f"lost {dependency}: {text}", None
            record.outage_line = True  # told: a RepeatLimiter after this one lets it pass
            return True
        since, last, suppressed = state
        if now - last < self.summary_s:
            state[2] = suppressed + 1
            return False
        state[1], state[2] = now, 0
        record.msg = (
            f"{dependency} still unreachable after {now - since:.0f} s "
            f"({int(suppressed)} messages suppressed); last: {text}"
        )
        record.args = None
        record.outage_line = True
        return True

    def ok(self, dependency: str) -> None:
        """``dependency`` answered again: end its outage with one line (if it had one)."""
        state = self._down.pop(dependency, None)
        if state is None:
            return
        since, _, suppressed = state
        logging.getLogger("mongomem.outage").info(
            "%s is back after %.0f s (%d messages suppressed since the last line)",
            dependency,
            self._clock() - since,
            int(suppressed),
        )


_outages: list[OutageLog] = []


def open_outages() -> set[str]:
    """The dependencies whose outage is open (told as lost, not yet back)."""
    return {dependency for outage in _outages for dependency in outage._down}


def dependency_ok(*dependencies: str) -> None:
    """Work that needed ``dependencies`` (``"Kafka"``, ``"MongoDB"``) succeeded: end their
    outages, each with one line. Cheap when there is none (the stages call it often)."""
    for outage in _outages:
        if outage._down:
            for dependency in dependencies:
                outage.ok(dependency)


class RepeatLimiter(logging.Filter):
    """Lets through one WARNING-or-worse record per kind per ``window_s``; counts the rest.

    A *kind* is one message template of one of our loggers, or any message at
    all from a library (aiokafka logs every reconnect attempt of an outage,
    hundreds a second, each worded differently). The next record of a kind
    let through says how many were suppressed before it. INFO and DEBUG pass,
    and so do the lines an :class:`OutageLog` before it let through (its "lost" line
    follows a library's line of a few seconds before, as a transient error at start).
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
        if record.levelno < logging.WARNING or getattr(record, "outage_line", False):
            return True  # an outage's lines are OutageLog's to thin (dropped, it would not tell)
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
    outage = OutageLog()  # an outage: lost, a summary a minute, back
    _outages[:] = [outage]
    handler.addFilter(outage)
    handler.addFilter(RepeatLimiter())  # the rest: one line per kind per few seconds
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # aiokafka logs every failed reconnect at ERROR; the limiter thins what is left.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
