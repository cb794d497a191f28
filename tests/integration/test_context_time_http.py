"""``build_context`` is time-aware without ``as_of`` (SPEC M1), directly and over HTTP: a
time expression in the query is resolved against now, for memories and raw turns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, serving, start

from mongomem.adapters.mongo import Document
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import utcnow
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "context-time-key-0123456789abcdef"
PROJECT = "ctxtime"
QUERY = "the Rota Vicentina hike two weeks ago"


async def seed(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    """Two hikes: yesterday's matches the words best, the other was said two weeks ago;
    and the same two as turns of two sessions."""
    now = utcnow()
    store = MemoryStore(mongo[settings.mongodb.database])
    await store.setup(probe=False)
    for position, (title, content, days) in enumerate(
        [
            ("Rota Vicentina hike", "Hiked the Rota Vicentina coast trail.", 1),
            ("Walk in the south", "Walked a stretch of the Vicentina route with Ben.", 14),
        ]
    ):
        await store.reconcile(
            candidate(
                "episodic",
                project_id=PROJECT,
                user_id="ana",
                snapshot=f"snap-{days}",
                position=position,
                at=now - timedelta(days=days),
                title=title,
                content=content,
            )
        )
    async with AsyncMemory(project_id=PROJECT, settings=settings, embedder=EMBEDDER) as memory:
        for session, text, days in [
            ("s-old", "We walked the Vicentina route.", 14),
            ("s-new", "We hiked the Rota Vicentina hike trail.", 1),
        ]:
            chat = memory.bind(MemoryRequestContext(user_id="ana", session_id=session))
            await chat.record_turn("user", text, at=now - timedelta(days=days))


@pytest.fixture(params=["direct", "http"])
async def memory(
    request: pytest.FixtureRequest, settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    configured = serving(settings, api_keys=(SecretStr(f"{PROJECT}:{KEY}"),))
    await seed(configured, mongo)
    if request.param == "direct":
        async with AsyncMemory(
            project_id=PROJECT, settings=configured, embedder=EMBEDDER
        ) as direct:
            yield direct
        return
    runner, url = await start(configured)
    try:
        async with AsyncMemory(project_id=PROJECT, base_url=url, api_key=KEY) as remote:
            yield remote
    finally:
        await runner.stop()


async def test_build_context_boosts_the_window_of_the_query_without_as_of(
    memory: AsyncMemory,
) -> None:
    chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="s-now"))
    # without the expression, the words pick yesterday's hike
    plain = await chat.build_context(
        "the Rota Vicentina hike", include=["episodic"], limit_per_type=1
    )
    assert [i.key for i in plain.items] == ["Rota Vicentina hike"]
    # "two weeks ago", from now: the walk said then comes in instead
    context = await chat.build_context(
        QUERY, include=["episodic"], limit_per_type=1, include_turns=1
    )
    memories = [i for i in context.items if i.memory_type == "episodic"]
    turns = [i for i in context.items if i.memory_type == "turn"]
    assert [i.key for i in memories] == ["Walk in the south"]
    assert [i.text for i in turns] == ["We walked the Vicentina route."]
    assert "session s-old" in turns[0].key
