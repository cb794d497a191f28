"""``mongomem status`` with Kafka down reports every other section (issue 25).

It printed a raw ``Unable connect to "127.0.0.1:9092"`` and stopped after
"consumer lag: unavailable": the local processes (and their restarts) were
never shown.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mongomem.cli.operate import print_status
from mongomem.settings import KafkaSettings, Settings, load_settings

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_status_goes_on_past_an_unreachable_broker(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (state / "stages").mkdir(parents=True)
    (state / "stages" / "windowing.pid").write_text(str(os.getpid()))
    monkeypatch.setenv("MONGOMEM_INFRA_STATE_DIR", str(state))
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic")
    down = f"127.0.0.1:{_free_port()}"
    given = load_settings(mongodb=settings.mongodb, kafka=KafkaSettings(bootstrap=down))
    lines: list[str] = []
    await print_status(given, say=lines.append)
    kafka = [line for line in lines if "UNREACHABLE" in line]
    assert len(kafka) == 1
    assert down in kafka[0]
    text = "\n".join(lines)
    assert "LLM usage, last 1 hour" in text  # MongoDB's sections are still there
    assert "local stage processes:" in text  # and what comes after Kafka's
    assert "windowing" in text.split("local stage processes:")[1]
