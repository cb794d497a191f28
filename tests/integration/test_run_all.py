"""`mongomem run all`: one process runs every stage, learns a fact, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from run_all import all_stages, with_stand_in_embedder

from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.testing.harness import stand_in_llm, wait_until

pytestmark = pytest.mark.integration


async def test_run_all_in_one_process(
    settings: Settings, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """Turns are recorded at once; the fact is learned in the background (SPEC B3)."""
    with stand_in_llm() as llm:
        stage = all_stages(subprocess_env, tmp_path, llm.base_url)
        await asyncio.to_thread(stage.start)
        process = stage.process
        assert process is not None
        memory = AsyncMemory(project_id="p", settings=with_stand_in_embedder(settings))
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
