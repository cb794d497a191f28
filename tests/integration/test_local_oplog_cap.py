"""The local mongo-java-server keeps its oplog capped like a replica set's (issue 28):
mongo-java-server's own oplog only grows and each change-stream read scans all of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from mongomem.adapters.mongo import Document
from mongomem.local.infra import free_port
from mongomem.local.servers import LocalMongo
from mongomem.settings import load_settings

pytestmark = pytest.mark.integration

CAP = 200


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMongo]:
    cache = load_settings().infra.state_dir.resolve() / "cache"
    root: Path = tmp_path_factory.mktemp("capped-mongo")
    server = LocalMongo(port=free_port(), state_dir=root, cache_dir=cache, oplog_max=CAP)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(capped: LocalMongo) -> AsyncIterator[AsyncMongoClient[Document]]:
    c: AsyncMongoClient[Document] = AsyncMongoClient(capped.uri)
    try:
        yield c
    finally:
        await c.close()


async def _entries(client: AsyncMongoClient[Document]) -> int:
    return await client.local["oplog.rs"].count_documents({})


async def _trimmed(client: AsyncMongoClient[Document], most: int) -> None:
    for _ in range(100):  # the trimmer runs every 200 ms
        if await _entries(client) <= most:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the oplog kept {await _entries(client)} entries")


async def test_a_live_stream_misses_nothing_while_the_oplog_is_trimmed(
    client: AsyncMongoClient[Document],
) -> None:
    coll = client.db["live"]
    seen = 0
    counts = [await client.local["oplog.rs"].estimated_document_count()]
    async with await coll.watch() as stream:
        for batch in range(10):
            await coll.insert_many([{"n": batch * 100 + i} for i in range(100)])
            while await stream.try_next() is not None:
                seen += 1
            await asyncio.sleep(0.3)
            counts.append(await client.local["oplog.rs"].estimated_document_count())
    assert seen == 1000
    await _trimmed(client, CAP + CAP // 10)
    # the count the watcher's idle probe reads: every entry ever appended (only grows)
    assert counts == sorted(counts)
    assert counts[-1] - counts[0] >= 1000


async def test_resuming_from_a_dropped_point_is_history_lost(
    client: AsyncMongoClient[Document],
) -> None:
    coll = client.db["resume"]
    async with await coll.watch() as stream:
        await coll.insert_one({"n": 0})
        assert await stream.try_next() is not None
        token = stream.resume_token
    for batch in range(5):
        await coll.insert_many([{"n": batch * 100 + i} for i in range(100)])
    await _trimmed(client, CAP + CAP // 10)
    with pytest.raises(OperationFailure) as lost:
        async with await coll.watch(resume_after=token) as resumed:
            await resumed.try_next()
    assert lost.value.code == 286  # ChangeStreamHistoryLost: the watcher back-fills


async def test_an_open_stream_keeps_what_it_has_not_read(
    client: AsyncMongoClient[Document],
) -> None:
    coll = client.db["behind"]
    async with await coll.watch() as stream:
        await coll.insert_one({"n": -1})
        assert await stream.try_next() is not None
        await coll.insert_many([{"n": i} for i in range(600)])
        await asyncio.sleep(1.0)  # several trims
        assert await _entries(client) >= 600
        seen = 0
        while await stream.try_next() is not None:
            seen += 1
    assert seen == 600
