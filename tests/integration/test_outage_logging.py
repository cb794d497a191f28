"""A broker outage logs a few lines per stage, not one per reconnect attempt.

The reconciler runs as a process against a Kafka broker of this test's own
(free ports), which is stopped once the stage consumes; the stage's WARNING and
ERROR lines are counted from the stop over the next 12 seconds; at least the
"lost Kafka" line must be among them. Before the rate limiter
this counted about a thousand (aiokafka logs every reconnect and metadata
attempt at ERROR).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mongomem.local.servers import LocalKafka, free_port, jars_cached
from mongomem.settings import load_settings

pytestmark = pytest.mark.integration

WINDOW_S = 12.0


def _lines(log: Path, start: int = 0) -> list[dict[str, str]]:
    text = log.read_bytes()[start:].decode(errors="replace")
    entries = []
    for line in text.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a traceback of a library printed outside logging
    return entries


def test_a_stage_against_a_stopped_broker_logs_a_few_lines(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    cache = load_settings().infra.state_dir.resolve() / "cache"
    if not jars_cached(cache):
        pytest.skip("the server jars are not resolved here (the test servers resolve them)")
    kafka = LocalKafka(
        port=free_port(),
        state_dir=tmp_path / "kafka",
        cache_dir=cache,
        controller_port=0,
        die_with_parent=True,
    )
    (tmp_path / "kafka").mkdir()
    kafka.start()
    log = tmp_path / "reconciler.log"
    env = {
        **subprocess_env,
        "MONGOMEM_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
    }
    with log.open("wb") as sink:
        stage = subprocess.Popen(
            [sys.executable, "-m", "mongomem.cli", "run", "reconciler"], env=env, stderr=sink
        )
    try:
        for _ in range(600):  # until it consumes: polled every 0.1 s, at most 60 s
            if any("reconciler consuming" in e["msg"] for e in _lines(log)):
                break
            assert stage.poll() is None, log.read_text()
            time.sleep(0.1)
        else:
            raise AssertionError(f"the reconciler did not start:\n{log.read_text()}")
        start = log.stat().st_size  # before the stop: the broker drops its clients first
        kafka.stop()
        time.sleep(WINDOW_S)
        loud = [e for e in _lines(log, start) if e["level"] in ("WARNING", "ERROR")]
    finally:
        stage.terminate()
        stage.wait(30)
        kafka.stop()
    assert loud, "the outage was not logged at all"
    assert len(loud) <= 10, "\n".join(f"{e['logger']}: {e['msg']}" for e in loud)
