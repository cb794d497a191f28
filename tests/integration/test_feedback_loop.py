"""K3 on the real servers: recalled context pasted back into a conversation is no evidence.

``mongomem run all`` learns a fact, the SDK's ``build_context`` recalls it, and
the agent's next conversation carries that recall in a system turn, an
assistant turn that echoes it and a user turn that quotes it. The scripted
LLM (a fake OpenAI-compatible server, NOT a model) extracts "home airport is
X" from *any* turn it is shown, so the recalled fact would be confirmed again
if the extractor let it through. It must not be: the memory keeps one piece
of evidence, while new facts in the same conversation are still learned.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest
from run_all import all_stages, with_stand_in_embedder

from mongomem.local.llm_stand_in.rules import read_turns
from mongomem.models import Role
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.stm.recall import RECALL_OPEN
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply, StandInResponder
from mongomem.testing.harness import wait_until

pytestmark = pytest.mark.integration

_FACTS = re.compile(r"\b(home airport|meal preference|seat preference) is (\w+)", re.IGNORECASE)
_STAND_IN = StandInResponder()


def eager(request: ChatRequest) -> Reply:
    """Scripted: every "<home airport|meal/seat preference> is X" in any turn is a fact."""
    if request.schema_name != "extract_semantic":
        return _STAND_IN(request)  # the judge's questions, and the other types
    items = {}
    for turn in read_turns(request.text("user")):
        for attr, value in _FACTS.findall(turn["content"]):
            label = attr.lower().replace(" ", "-")
            fact = f"The user's {attr.lower()} is {value}."
            items[label] = {"label": label, "fact": fact, "seqs": [turn["seq"]]}
    return Answer({"items": list(items.values())})


async def test_recalled_memories_pasted_back_add_no_evidence(
    settings: Settings, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    with FakeOpenAIServer(eager) as llm:
        stage = all_stages(
            subprocess_env, tmp_path, llm.base_url, MONGOMEM_ENABLED_EXTRACTIONS="semantic"
        )
        await asyncio.to_thread(stage.start)
        process = stage.process
        assert process is not None
        memory = AsyncMemory(project_id="p", settings=with_stand_in_embedder(settings))
        try:
            first = memory.bind(MemoryRequestContext(user_id="u", session_id="s1"))

            async def learned(*labels: str) -> bool | str:
                if process.poll() is not None:
                    return f"exited {process.returncode}: {stage.log_file.read_text()}"
                return all([await first.get_semantic(label) for label in labels])

            await first.record_turn("user", "My home airport is Boston.")
            await first.record_turn("assistant", "Noted.")
            await wait_until(lambda: learned("home-airport"), 120, "the fact to be learned")

            recalled = (await first.build_context("home airport")).text
            assert recalled.startswith(RECALL_OPEN)
            assert "home airport is Boston" in recalled
            again = memory.bind(MemoryRequestContext(user_id="u", session_id="s2"))
            await again.record_turn(Role.SYSTEM, f"You are a travel agent.\n{recalled}")
            await again.record_turn(
                "user", f"You told me:\n{recalled}\nAlso, my meal preference is vegan."
            )
            await again.record_turn("assistant", f"Here is what I know:\n{recalled}")
            await again.record_turn("user", "My seat preference is aisle.")
            await wait_until(
                lambda: learned("meal-preference", "seat-preference"),
                120,
                "the new facts of the second conversation",
            )

            airport = await first.get_semantic("home-airport")
            assert airport is not None
            assert (airport.version, airport.reinforcement_count) == (1, 1)
            history = await first.history(airport.memory_id)
            assert [len(v.evidence) for v in history] == [1]
            process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(process.wait, 30) == 0
        finally:
            await memory.close()
            await asyncio.to_thread(stage.stop)
