"""`mongomem dlq list|show|requeue` on real Kafka and MongoDB, with the reconciler running."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import (
    CANDIDATES,
    DeadLetter,
    dead_letter_topic,
    ensure_topics,
    make_producer,
)
from mongomem.adapters.mongo import LEDGER, MEMORIES, Document, connect
from mongomem.cli.main import main
from mongomem.codec import encode
from mongomem.errors import StorageError
from mongomem.ltm.testing import candidate
from mongomem.operations.dlq import REQUEUES
from mongomem.operations.status import consumer_group, dead_letter_counts, group_lag
from mongomem.settings import Settings
from mongomem.stages.reconciler import STAGE, run_reconciler
from mongomem.stages.runtime import PublishedDeadLetters
from mongomem.stages.runtime.kafka import KafkaPublisher

pytestmark = pytest.mark.integration


def _env(settings: Settings, monkeypatch: pytest.MonkeyPatch, state: Path) -> None:
    monkeypatch.setenv("MONGOMEM_INFRA_STATE_DIR", str(state))
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_KAFKA_BOOTSTRAP", settings.kafka.bootstrap or "")
    monkeypatch.setenv("MONGOMEM_KAFKA_TOPIC_PREFIX", settings.kafka.topic_prefix)
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic")


async def _reconcile_until(settings: Settings, check: Callable[[], Awaitable[bool]]) -> None:
    """Run the reconciler stage until ``check`` holds (polled every 0.1 s, at most 60 s)."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_reconciler(settings, stop))
    try:
        for _ in range(600):
            if await check():
                return
            if task.done():
                task.result()
            await asyncio.sleep(0.1)
        raise TimeoutError("condition not reached")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def _state(settings: Settings) -> tuple[list[Document], int, list[Document]]:
    client: AsyncMongoClient[Document] = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        memories = await db[MEMORIES].find({}).sort("_id").to_list()
        ledger = await db[LEDGER].count_documents({})
        requeues = await db[REQUEUES].find({}).sort("_id").to_list()
        return memories, ledger, requeues
    finally:
        await client.close()


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_dead_letters_are_listed_decoded_and_requeued_once(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _env(settings, monkeypatch, tmp_path / "state")
    kafka = settings.kafka
    candidates = kafka.topic(CANDIDATES)
    boston = candidate(
        "semantic",
        user_id="u1",
        label="home-airport",
        text="The user's home airport is Boston.",
        snapshot="s1",
    )

    async def prepare() -> None:
        await ensure_topics(kafka, [candidates, dead_letter_topic(kafka, STAGE)])
        producer = make_producer(kafka)
        await producer.start()
        try:
            # A valid candidate the reconciler dead-lettered on a permanent storage
            # failure (written as the stage writes it); its cause is fixed now.
            letter = DeadLetter.of(
                stage=STAGE,
                topic=candidates,
                partition=0,
                offset=0,
                key=boston.scope.kafka_key(),
                value=encode(boston),
                error=StorageError("not authorized on memories"),
                attempts=1,
            )
            await PublishedDeadLetters(KafkaPublisher(producer), kafka).send(
                letter, boston.scope.kafka_key()
            )
            await producer.send_and_wait(candidates, b"not a candidate", key=b"junk")
        finally:
            await producer.stop()

        async def two_dead() -> bool:
            return (await dead_letter_counts(kafka, [STAGE]))[STAGE] >= 2

        await _reconcile_until(settings, two_dead)  # the stage dead-letters the junk itself

    asyncio.run(prepare())
    lines = _out(capsys, ["dlq", "list", "--stage", "reconciler"]).splitlines()
    assert lines[-1] == "2 dead letter(s)"
    ids = [line.split()[0] for line in lines[:-1]]
    assert all(i.startswith(dead_letter_topic(kafka, STAGE) + ":") for i in ids)
    shown = {i: json.loads(_out(capsys, ["dlq", "show", i])) for i in ids}
    by_error = {s["error"].split(":")[0]: s for s in shown.values()}
    assert by_error["MessageDecodeError"]["value"] == "not a candidate"
    assert by_error["MessageDecodeError"]["key"] == "junk"
    fixable = by_error["StorageError"]
    assert fixable["value"]["kind"] == "candidate"
    assert fixable["value"]["data"]["candidate_id"] == boston.candidate_id
    assert fixable["requeued_at"] is None

    out = _out(capsys, ["dlq", "requeue", fixable["id"]])
    assert out.splitlines()[-1] == "1 requeued, 0 already requeued"

    async def reconciled() -> bool:
        memories, _, _ = await _state(settings)
        return len(memories) == 1

    asyncio.run(_reconcile_until(settings, reconciled))
    memories, ledger, requeues = asyncio.run(_state(settings))
    assert [m["text"] for m in memories] == ["The user's home airport is Boston."]
    assert [r["_id"] for r in requeues] == [fixable["id"]]

    # Requeued twice: the second requeue is refused as already done, nothing is published.
    out = _out(capsys, ["dlq", "requeue", "--stage", "reconciler"])
    assert f"skipped {fixable['id']} (requeued before)" in out
    assert out.splitlines()[-1] == "1 requeued, 1 already requeued"  # the junk, never before
    listed = _out(capsys, ["dlq", "list", "--stage", "reconciler"])
    assert listed.count("requeued 20") == 2

    # A requeue whose record was lost (a crash after Kafka's ack) republishes the
    # candidate: the reconciler processes it again and changes nothing.
    async def forget_and_requeue() -> None:
        client: AsyncMongoClient[Document] = connect(settings.mongodb)
        try:
            await client[settings.mongodb.database][REQUEUES].delete_one({"_id": fixable["id"]})
        finally:
            await client.close()

    asyncio.run(forget_and_requeue())
    out = _out(capsys, ["dlq", "requeue", fixable["id"]])
    assert out.splitlines()[-1] == "1 requeued, 0 already requeued"

    async def drained() -> bool:
        lag = await group_lag(kafka, consumer_group(kafka, STAGE), candidates)
        return lag.end == 4 and lag.lag == 0  # junk, Boston, junk again, Boston again

    asyncio.run(_reconcile_until(settings, drained))
    after, ledger_after, _ = asyncio.run(_state(settings))
    assert after == memories
    assert ledger_after == ledger


def test_requeue_asks_what_and_refuses_unknown_stages_and_ids(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _env(settings, monkeypatch, tmp_path / "state")
    assert main(["dlq", "requeue"]) == 1
    assert "say what to requeue" in capsys.readouterr().err
    assert main(["dlq", "list", "--stage", "gossip"]) == 1
    assert "unknown stage gossip" in capsys.readouterr().err
    assert main(["dlq", "show", "nope:0:0"]) == 1
    assert "not a dead-letter id" in capsys.readouterr().err
    assert _out(capsys, ["dlq", "list"]).splitlines() == ["0 dead letter(s)"]
