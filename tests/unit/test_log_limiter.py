"""RepeatLimiter: an outage logs one line per kind per window, with the suppressed count."""

from __future__ import annotations

import logging

from mongomem.logs import RepeatLimiter


def _record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_repeats_are_suppressed_per_kind_and_counted() -> None:
    now = [0.0]
    limiter = RepeatLimiter(window_s=5.0, clock=lambda: now[0])
    passed = []
    for i in range(1000):  # 1000 reconnect errors, each worded differently, over 10 s
        now[0] = i / 100
        record = _record("aiokafka.conn", logging.ERROR, "Unable connect to %s", i)
        if limiter.filter(record):
            passed.append(record.getMessage())
    assert len(passed) == 2
    assert passed[1] == "Unable connect to 500 (499 similar suppressed before this)"


def test_our_templates_are_separate_kinds_and_info_always_passes() -> None:
    limiter = RepeatLimiter(window_s=5.0, clock=lambda: 0.0)
    a = _record("mongomem.x", logging.WARNING, "retrying %s", 1)
    b = _record("mongomem.x", logging.WARNING, "giving up on %s", 1)
    assert limiter.filter(a)
    assert limiter.filter(b)
    assert not limiter.filter(_record("mongomem.x", logging.WARNING, "retrying %s", 2))
    assert all(limiter.filter(_record("aiokafka", logging.INFO, "hello")) for _ in range(5))
