"""`mongomem run all`: one process runs every stage, learns a fact, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.supervisor import StageProcess
from mongomem.testing.harness import stand_in_llm, wait_until

pytestmark = pytest.mark.integration


async def test_run_all_in_one_process(
    settings: Settings, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    with stand_in_llm() as llm:
        env = {
            **subprocess_env,
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": "stand-in",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_WINDOW_MAX_MESSAGES": "2",
            "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
        }
        stage = StageProcess(
            name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env
        )
        await asyncio.to_thread(stage.start)
        process = stage.process
        assert process is not None
        with_embedder = settings.model_copy(
            update={"embedding": EmbeddingSettings(provider="stand-in")}
        )
        memory = AsyncMemory(project_id="p", settings=with_embedder)
        try:
            chat = memory.bind(MemoryRequestContext(user_id="u", session_id="s"))
            await chat.record_turn("user", "My home airport is Boston.")
            await chat.record_turn("assistant", "Noted.")

            async def learned() -> bool | str:
                if process.poll() is not None:
                    return f"exited {process.returncode}: {stage.log_file.read_text()}"
                found = await chat.get_semantic("home-airport")
                return found is not None and "Boston" in found.text

            await wait_until(learned, 120, "the fact to be learned")
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, 30)
            assert code == 0, stage.log_file.read_text()[-3000:]
        finally:
            await memory.close()
            await asyncio.to_thread(stage.stop)
