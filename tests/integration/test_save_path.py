"""A direct save reads the erasure register beside the embedding call (issue 28), and an
erased user is still refused with nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from pymongo import AsyncMongoClient, monitoring
from service_http import EMBEDDER

from mongomem.adapters.mongo import MEMORIES, Document, database
from mongomem.erasure.register import ERASURES, erasure_id
from mongomem.errors import Erased
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


class RegisterReads(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == ERASURES:
            self.sent += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class SlowEmbedder:
    """The test embedder, slow enough to see what is sent while it works."""

    def __init__(self, reads: RegisterReads) -> None:
        self.name, self.dimensions = EMBEDDER.name, EMBEDDER.dimensions
        self.reads = reads
        self.register_read_meanwhile: list[bool] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        before = self.reads.sent
        await asyncio.sleep(0.2)
        self.register_read_meanwhile.append(self.reads.sent > before)
        return await EMBEDDER.embed(texts)


async def test_the_register_is_read_while_the_text_is_embedded(settings: Settings) -> None:
    reads = RegisterReads()
    monitoring.register(reads)  # for the clients made from here on (the SDK's own)
    embedder = SlowEmbedder(reads)
    async with AsyncMemory(project_id="travel", settings=settings, embedder=embedder) as memory:
        ana = memory.bind(MemoryRequestContext(user_id="ana"))
        await ana.save_semantic("home", "ana lives in Porto.")
        assert embedder.register_read_meanwhile == [True]


async def test_an_erased_user_is_refused_and_nothing_is_written(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = database(mongo, settings.mongodb)
    await db[ERASURES].insert_one({"_id": erasure_id("travel", "gone")})
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        gone = memory.bind(MemoryRequestContext(user_id="gone"))
        with pytest.raises(Erased):
            await gone.save_semantic("home", "gone lives in Faro.")
    assert await db[MEMORIES].count_documents({"scope.user_id": "gone"}) == 0
