"""A user's in-process turn index is the same whichever way it catches up (issue 28):
a big catch-up reads the user's vectors and turns by owner, a small one by id; both
keep only the user's own turns (no event, no other user's), embed only what has no
stored vector, and answer a search alike."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import TURN_VECTORS, TURNS, Document
from mongomem.models import Role, SessionKey
from mongomem.settings import Settings
from mongomem.stm.search import TurnQuery, TurnSearch
from mongomem.stm.turns import ShortTermMemory

pytestmark = pytest.mark.integration

WORDS = ["rain", "train", "late", "coffee", "seat", "aisle", "window", "museum", "ferry"]


class CountingEmbedder(HashingEmbedder):
    """The hashing stand-in (word overlap, NOT a model), counting what it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.embedded = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return await super().embed(texts)


async def seed(db: AsyncDatabase[Document]) -> None:
    stm = ShortTermMemory(db)
    await stm.ensure_indexes()
    start = datetime(2024, 5, 1, tzinfo=UTC)
    for i in range(30):
        for user in ("ana", "ben"):
            key = SessionKey(project_id="p", user_id=user, session_id=f"s{i // 10}")
            words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(4))
            await stm.record_turn(
                key, Role.USER, f"{user} {i}: {words}", None, at=start + timedelta(minutes=i)
            )
    await stm.end_session(SessionKey(project_id="p", user_id="ana", session_id="s0"))


async def index_of(
    db: AsyncDatabase[Document], by_id_max: int, embedder: CountingEmbedder
) -> tuple[set[str], list[str]]:
    search = TurnSearch(db, embedder)
    search.by_id_max = by_id_max
    index = await search.fresh("p", "ana")
    ids = {i for i in index.ids if i is not None}
    built = embedder.embedded
    hits = await search.search("p", "ana", TurnQuery(query="train late coffee", limit=5))
    embedder.embedded = built
    return ids, [h.turn.turn_id for h in hits]


async def test_by_owner_and_by_id_build_the_same_index(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = mongo[settings.mongodb.database]
    await seed(db)
    ana = {d["_id"] async for d in db[TURNS].find({"user_id": "ana", "event": {"$exists": False}})}
    assert len(ana) == 30
    first = CountingEmbedder()
    by_owner, owner_hits = await index_of(db, 5, first)  # 30 new > 5: by owner
    assert by_owner == ana  # no event document, none of ben's turns
    assert first.embedded == 30  # nothing was stored yet: each embedded once, then stored
    assert await db[TURN_VECTORS].count_documents({"user_id": "ana"}) == 30
    again = CountingEmbedder()
    by_id, id_hits = await index_of(db, 10_000, again)  # every id at once: by id
    assert by_id == ana
    assert again.embedded == 0  # the stored vectors were read, not made again
    assert id_hits == owner_hits
    assert len(owner_hits) == 5
    reread = CountingEmbedder()
    assert (await index_of(db, 5, reread))[0] == ana
    assert reread.embedded == 0  # by owner reads the stored vectors too
