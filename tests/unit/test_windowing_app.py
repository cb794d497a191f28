"""The faust engine's app keeps its data directory out of the working directory."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from mongomem.settings import KafkaSettings, load_settings
from mongomem.stages.windowing.app import build_app


async def test_the_faust_data_directory_is_under_the_temporary_directory() -> None:
    settings = load_settings(kafka=KafkaSettings(bootstrap="127.0.0.1:1", compression="lz4"))
    failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def make_windower(_store: Any) -> Any:
        return None

    app, _ = build_app(
        settings, app_id="t.windowing", partitions=1, make_windower=make_windower, failure=failure
    )
    assert app.conf.producer_compression_type == "lz4"
    outside_the_working_directory(app.conf.datadir)


def outside_the_working_directory(path: Path) -> None:
    datadir = Path(path).resolve()
    assert datadir.is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert not datadir.is_relative_to(Path.cwd().resolve())
