"""On mongo-java-server (an oplog that only grows, and getMores answered at once) an idle
watcher source probes the oplog's size instead of reading the stream again (issue 28)."""

from __future__ import annotations

import asyncio

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import TURNS, Document
from mongomem.settings import Settings
from mongomem.stages.watcher_checkpoints import WatcherCheckpoints
from mongomem.stages.watcher_logic import READ_PIPELINE, PublishLedger
from mongomem.stages.watcher_source import ChangeStreamSource, StreamedTurn

pytestmark = pytest.mark.integration


async def test_an_idle_source_probes_and_a_new_turn_still_arrives(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = mongo[settings.mongodb.database]
    await db[TURNS].insert_one({"_id": "before", "seq": 1})  # no token: a back-fill first
    source = ChangeStreamSource(
        db[TURNS],
        WatcherCheckpoints(db, "t", 0, 1),
        PublishLedger(),
        read_pipeline=READ_PIPELINE,
        read_batch=100,
        read_ahead=100,
        poll_s=0.005,
        max_await_ms=50,
        marks_interval_s=1.0,
    )
    await source.open()
    try:
        while source.scanning:
            records = (await source.poll(100, 0.1)).get(0, [])
            await source.commit({0: records[-1].offset + 1} if records else {})
        for _ in range(20):  # the back-fill's end is stored: the stream is read
            if source.streaming:
                break
            await asyncio.sleep(0.05)
        await source.poll(100, 0.1)
        reader = source._reader
        assert reader is not None
        await asyncio.sleep(1.0)
        reads = reader.empty_reads
        assert reader.probes >= 3  # probed while idle …
        assert reads <= 3  # … instead of a getMore every poll_s (≈ 200 in that second)
        await db[TURNS].insert_one({"_id": "after", "seq": 2})
        got: list[object] = []
        for _ in range(40):
            got += (await source.poll(100, 0.1)).get(0, [])
            if any(isinstance(r, StreamedTurn) for r in got):
                break
        turns = [r for r in got if isinstance(r, StreamedTurn)]
        assert [r.document["_id"] for r in turns if r.document] == ["after"]
    finally:
        await source.close()
