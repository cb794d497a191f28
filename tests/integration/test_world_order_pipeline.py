"""Order by the world through the running pipeline (SPEC L2), end to end.

Two users say the same three sessions, each session with its own past date
(a historical import, SPEC J7). One user's sessions are recorded — and, since
each is waited for, windowed, extracted and reconciled — in order; the other's
in reverse, newest first. Real Kafka, mongo-java-server, every stage running
(``mongomem run all``), extraction by the rule-based stand-in endpoint (NOT a
model: it is the scripted LLM here, so this measures mongomem's code path).
Both users end with the same current memory: the latest statement of each key.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import MEMORIES, Document, database
from mongomem.local.supervisor import StageProcess
from mongomem.ltm.documents import from_document
from mongomem.ltm.plan import history_order
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.integration

SESSIONS = [
    (
        "may",
        datetime(2023, 5, 1, 10, 0, tzinfo=UTC),
        ["My seat preference is window.", "My home airport is Boston."],
    ),
    ("june", datetime(2023, 6, 1, 10, 0, tzinfo=UTC), ["My seat preference is aisle."]),
    (
        "july",
        datetime(2023, 7, 1, 10, 0, tzinfo=UTC),
        ["My seat preference is exit row.", "My diet is vegetarian."],
    ),
]


async def say(memory: AsyncMemory, user: str, order: list[int]) -> None:
    for index in order:
        name, at, lines = SESSIONS[index]
        chat = memory.bind(MemoryRequestContext(user_id=user, session_id=name))
        for i, line in enumerate(lines):
            await chat.record_turn("user", line, at=at.replace(minute=i))
        await chat.end_session()
        await chat.wait_until_processed(timeout=120, all_turns=True)


async def memory_of(
    mongo: AsyncMongoClient[Document], settings: Settings, user: str
) -> dict[str, tuple[str, list[str]]]:
    """Per key: the current text and every version's text in history order."""
    docs = (
        await database(mongo, settings.mongodb)[MEMORIES]
        .find({"scope.project_id": "world", "scope.user_id": user, "memory_type": "semantic"})
        .to_list()
    )
    versions = [from_document(d) for d in docs]
    out = {}
    for key in sorted({v.key for v in versions}):
        mine = [v for v in versions if v.key == key]
        (current,) = [v.text for v in mine if v.status == "current"]
        out[key] = (current, [v.text for v in history_order(mine)])
    return out


async def test_sessions_extracted_in_reverse_give_the_in_order_memory(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    with stand_in_llm() as llm:
        env = {
            **subprocess_env,
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": "stand-in",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.2",
        }
        stage = StageProcess(
            name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env
        )
        await asyncio.to_thread(stage.start)
        embedder = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
        try:
            async with AsyncMemory(project_id="world", settings=embedder) as memory:
                await say(memory, "in-order", [0, 1, 2])
                await say(memory, "reversed", [2, 1, 0])
        finally:
            await asyncio.to_thread(stage.stop)
    forward = await memory_of(mongo, settings, "in-order")
    backward = await memory_of(mongo, settings, "reversed")
    seat = (
        "The user's seat preference is exit row.",
        [
            "The user's seat preference is window.",
            "The user's seat preference is aisle.",
            "The user's seat preference is exit row.",
        ],
    )
    assert forward["seat-preference"] == seat
    assert forward["home-airport"][0] == "The user's home airport is Boston."
    assert forward["diet"][0] == "The user's diet is vegetarian."
    assert backward == forward, "the order of processing does not change the memory"
