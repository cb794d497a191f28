"""Turn search on the real MongoDB-compatible server treats speakers' names in the query
as a field (SPEC M1): the query embedding reads the question without the name, and the
named speaker's turns carry a ``speaker_rank``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


class QueryRecorder(HashingEmbedder):
    """The hashing stand-in embedder (not a model), keeping the queries it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.queries: list[str] = []

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        self.queries.extend(texts)
        return await super().embed(texts)


@pytest.fixture
async def embedder() -> QueryRecorder:
    return QueryRecorder()


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document], embedder: QueryRecorder
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="recall-speakers", settings=settings, embedder=embedder) as m:
        yield m


async def test_a_named_speaker_is_a_field_not_words(
    memory: AsyncMemory, embedder: QueryRecorder
) -> None:
    chat = memory.bind(MemoryRequestContext(user_id="u1", session_id="s1"))
    said = [
        ("Theo", "Mine is a rusty Land Rover, always at the mechanic."),
        ("Maya", "My car is an old Volvo estate."),
        ("Theo", "The train was late again this morning."),
    ]
    for i, (speaker, text) in enumerate(said):
        role = "user" if i % 2 == 0 else "assistant"
        await chat.record_turn(role, text, {"speaker": speaker}, at=T0 + timedelta(minutes=i))
    hits = await chat.search_turns("What car does Maya's friend drive?", limit=3)
    assert embedder.queries[-1] == "What car does friend drive?"
    by_speaker = {h.turn.content: h.ranks.speaker_rank for h in hits}
    assert by_speaker[said[1][1]] == 1
    assert by_speaker.get(said[0][1]) is None
    # a query that names nobody is embedded as it is, with no speaker list
    hits = await chat.search_turns("Which car is at the mechanic?", limit=3)
    assert embedder.queries[-1] == "Which car is at the mechanic?"
    assert all(h.ranks.speaker_rank is None for h in hits)
