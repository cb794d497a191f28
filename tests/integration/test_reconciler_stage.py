"""The reconciler stage on real Kafka and MongoDB (SPEC D1–D3, E2)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import REGISTRY
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.kafka import (
    CANDIDATES,
    DeadLetter,
    dead_letter_topic,
    ensure_topics,
    make_producer,
)
from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, Document
from mongomem.codec import decode, encode
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryCandidate
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.stages.reconciler import STAGE, run_reconciler

pytestmark = pytest.mark.integration


async def produce(settings: Settings, messages: list[tuple[bytes | None, bytes]]) -> None:
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for key, value in messages:
            await producer.send(settings.kafka.topic(CANDIDATES), value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def message(c: MemoryCandidate) -> tuple[bytes | None, bytes]:
    return c.scope.kafka_key(), encode(c)


async def until(check: Callable[[], Awaitable[bool]], polls: int = 600) -> None:
    """Poll ``check`` every 0.1 s until it holds (at most ``polls`` times)."""
    for _ in range(polls):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("condition not reached")


@contextlib.asynccontextmanager
async def running(settings: Settings, suffix: str = "") -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_reconciler(settings, stop, group_suffix=suffix))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def airport(city: str, snapshot: str, user: str = "u1") -> MemoryCandidate:
    return candidate(
        "semantic",
        user_id=user,
        label="home-airport",
        text=f"The user's home airport is {city}.",
        snapshot=snapshot,
    )


async def test_stage_updates_reinforces_dedupes_and_dead_letters(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = mongo[settings.mongodb.database]
    await ensure_topics(
        settings.kafka, [settings.kafka.topic(CANDIDATES), dead_letter_topic(settings.kafka, STAGE)]
    )
    boston, denver, denver2 = airport("Boston", "a"), airport("Denver", "b"), airport("Denver", "c")
    await produce(
        settings,
        [
            message(boston),
            (b"junk", b"not a candidate"),
            message(denver),
            message(denver),
            message(denver2),
        ],
    )

    async def ledger_has(n: int) -> bool:
        return await db[LEDGER].count_documents({"state": "done"}) >= n

    async with running(settings):
        await until(lambda: ledger_has(3))
    docs = await db[MEMORIES].find({}).sort("version").to_list()
    assert [(d["version"], d["status"], d["action"]) for d in docs] == [
        (1, "superseded", "ADD"),
        (2, "current", "UPDATE"),
    ]
    assert len(docs[1]["candidate_ids"]) == 2
    assert [e["ref"] for e in docs[1]["evidence"]] == ["b", "c"]

    consumer = AIOKafkaConsumer(
        dead_letter_topic(settings.kafka, STAGE),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    letter = decode(record.value, DeadLetter)
    assert letter.original_value() == b"not a candidate"
    assert letter.error_class == "MessageDecodeError"
    # mongomem_consumer_lag is set from the consumer's own highwater marks: caught up, 0
    lags = [
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "mongomem_consumer_lag"
        for sample in metric.samples
        if sample.labels["stage"] == STAGE
        and sample.labels["topic"] == settings.kafka.topic(CANDIDATES)
    ]
    assert lags
    assert set(lags) == {0.0}

    # Replaying the whole topic in a new consumer group changes nothing.
    before = await db[MEMORIES].find({}).sort("_id").to_list()
    async with running(settings, suffix=".replay"):
        await asyncio.sleep(3)
    assert await db[MEMORIES].find({}).sort("_id").to_list() == before


async def test_direct_saves_and_the_stage_on_one_scope_at_once_stay_consistent(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = mongo[settings.mongodb.database]
    await ensure_topics(settings.kafka, [settings.kafka.topic(CANDIDATES)])
    cities = ["Boston", "Denver", "Austin", "Denver"]
    staged = [airport(cities[i % 4], f"snap-{i}") for i in range(24)]
    total = len(staged) * 2
    async with (
        running(settings),
        AsyncMemory(project_id="p1", settings=settings, embedder=HashingEmbedder(64)) as memory,
    ):
        chat = memory.bind(MemoryRequestContext(user_id="u1", session_id="s1"))

        async def direct() -> None:
            for i in range(len(staged)):
                await chat.save_semantic(
                    "home-airport", f"The user's home airport is {cities[i % 3]}."
                )

        await asyncio.gather(produce(settings, [message(c) for c in staged]), direct())
        # the stage settles a ledger entry per candidate; an unkeyed direct save keeps none
        # (no retry can repeat its random candidate id): it is done when its call returns
        await until(lambda: ledger_count_is(db, len(staged)))
        final = await chat.get_semantic("home-airport")
    docs = await db[MEMORIES].find({}).to_list()
    assert len({d["memory_id"] for d in docs}) == 1
    assert [d["status"] for d in docs].count("current") == 1
    assert sorted(d["version"] for d in docs) == list(range(1, len(docs) + 1))
    assert sum(len(d["candidate_ids"]) for d in docs) == total
    assert {e["source"] for d in docs for e in d["evidence"]} == {"direct", "snapshot"}
    assert final is not None
    # The current version holds the latest evidence; staged candidates said before the
    # direct saves that they meet enter history below it (SPEC L2), so it need not be
    # the highest version.
    (current,) = [d for d in docs if d["status"] == "current"]
    assert final.version == current["version"]
    assert current["observed_rank"] == max(d["observed_rank"] for d in docs)
    logged = await db[DECISIONS].find({}).to_list()
    assert len(logged) == total
    assert {e["outcome"]["action"] for e in logged} <= {a.value for a in Action}


async def ledger_count_is(db: AsyncDatabase[Document], n: int) -> bool:
    return await db[LEDGER].count_documents({"state": "done"}) >= n


async def test_mongomem_run_reconciler_stops_cleanly_on_sigterm(
    settings: Settings, mongo: AsyncMongoClient[Document], subprocess_env: dict[str, str]
) -> None:
    db = mongo[settings.mongodb.database]
    await ensure_topics(settings.kafka, [settings.kafka.topic(CANDIDATES)])
    await produce(settings, [message(airport("Boston", "x"))])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mongomem.cli",
        "run",
        "reconciler",
        env={**subprocess_env, "PYTHONPATH": os.getcwd()},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await until(lambda: ledger_count_is(db, 1))
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0, (await proc.stderr.read()).decode() if proc.stderr else ""
