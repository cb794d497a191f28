"""``mongomem status`` shows the restarts the stage runtime counted in MongoDB (issue 25).

A stage restarts inside its process after a retriable failure
(:func:`mongomem.stages.runtime.supervise`); each restart is counted in
``stage_restarts``. The inspector showed them; ``status`` did not.
"""

from __future__ import annotations

import pytest

from mongomem.cli.operate import print_status, stage_restart_lines
from mongomem.errors import StorageError
from mongomem.operations.restarts import record_restart
from mongomem.settings import KafkaSettings, MongoSettings, Settings, load_settings

pytestmark = pytest.mark.integration


async def test_status_lists_each_stage_s_restarts(settings: Settings) -> None:
    assert await stage_restart_lines(settings) == ["stage restarts (from stage_restarts): none"]
    await record_restart(settings, "reconciler", StorageError("MongoDB at x did not answer"))
    await record_restart(settings, "reconciler", StorageError("MongoDB at x did not answer"))
    await record_restart(settings, "windowing", StorageError("once"))
    lines: list[str] = []
    given = load_settings(mongodb=settings.mongodb, kafka=KafkaSettings(bootstrap="127.0.0.1:9"))
    await print_status(given, say=lines.append)
    start = lines.index("stage restarts (from stage_restarts):")
    reconciler, windowing = lines[start + 1], lines[start + 2]
    assert reconciler.split()[:2] == ["reconciler", "2x,"]
    assert "StorageError: MongoDB at x did not answer" in reconciler
    assert windowing.split()[:2] == ["windowing", "1x,"]


async def test_restarts_unavailable_is_one_line() -> None:
    down = MongoSettings(
        uri="mongodb://127.0.0.1:9/?directConnection=true", server_selection_timeout_s=0.3
    )
    (line,) = await stage_restart_lines(load_settings(mongodb=down))
    assert line.startswith("stage restarts (from stage_restarts): unavailable (")
    assert "127.0.0.1:9" in line
