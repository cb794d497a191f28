"""The `make run` demo against a running pipeline: first run, then a rerun on the same data."""

from __future__ import annotations

import asyncio

import pytest

from mongomem.local.demo import run_demo
from mongomem.local.runner import DEMO_WINDOWING
from mongomem.local.supervisor import StageProcess
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.e2e


async def test_demo_shows_update_and_reinforcement_and_reruns(
    settings: Settings, subprocess_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("demo")
    with stand_in_llm() as llm:
        overrides = {
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": "stand-in",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            **DEMO_WINDOWING,
        }
        stage = StageProcess(
            name="all",
            stage="all",
            state_dir=root,
            cache_dir=root,
            env={**subprocess_env, **overrides},
        )
        await asyncio.to_thread(stage.start)
        demo_settings = settings.model_copy(
            update={"embedding": EmbeddingSettings(provider="stand-in")}
        )
        lines: list[str] = []
        try:
            first = await run_demo(demo_settings, env_overrides=overrides, say=lines.append)
            assert first == 0, "\n".join(lines) + stage.log_file.read_text()[-3000:]
            text = "\n".join(lines)
            assert "v1 ADD       superseded The user's home airport is Boston." in text
            assert "v2 UPDATE    current    The user's home airport is Denver now." in text
            assert "seat-preference          1      2" in text

            lines.clear()
            again = await run_demo(demo_settings, env_overrides=overrides, say=lines.append)
            assert again == 0, "\n".join(lines)
            assert "seat-preference          1      4" in "\n".join(lines)
        finally:
            await asyncio.to_thread(stage.stop)
