"""SIGKILL of the reconciler with a judge request in flight (issue 24, SPEC I5).

A candidate that changes a known fact needs the judge. The counting endpoint
holds the first judge request; the reconciler process is killed while it
waits, then restarted, and asks again. Every request the endpoint received has
exactly one record in ``llm_usage`` (tied by the id each request carried): the
one cut off by the kill stays *started* (unfinished, no answer, no tokens), the
one after the restart is *finished*; nothing is counted twice, and the memory
is updated once.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import CANDIDATES, ensure_topics, make_producer, pipeline_topics
from mongomem.adapters.mongo import MEMORIES, Document
from mongomem.codec import encode
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import utcnow
from mongomem.operations.usage import LLM_USAGE, recent_usage
from mongomem.settings import Settings
from mongomem.testing import Answer, FakeOpenAIServer, Slow

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VERDICT = Answer({"action": "UPDATE", "reason": "the airport changed"})


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "mongomem.cli", "run", "reconciler"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def test_a_judge_call_cut_off_by_sigkill_is_recorded_once_as_unfinished(
    settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    mongo: AsyncMongoClient[Document],
) -> None:
    db = mongo[settings.mongodb.database]
    known = candidate("semantic", label="home-airport", text="The user's home airport is Boston.")
    store = MemoryStore(db)
    await store.setup()
    await store.reconcile(known)  # the fact the next candidate changes (no judge needed)
    changed = candidate(
        "semantic",
        label="home-airport",
        text="The user's home airport is Denver now.",
        snapshot="snap-2",
    )
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, []))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.kafka.topic(CANDIDATES), encode(changed), key=changed.scope.kafka_key()
        )
    finally:
        await producer.stop()

    with FakeOpenAIServer() as server:
        server.script(Slow(60.0, VERDICT), VERDICT)  # the first request hangs: killed in flight
        env = {
            **subprocess_env,
            "MONGOMEM_LLM_BASE_URL": server.base_url,
            "MONGOMEM_LLM_API_KEY": "test",
            "MONGOMEM_LLM_TIMEOUT_S": "60",
        }
        log = tmp_path / "reconciler.log"
        proc = start(env, log)
        try:
            deadline = time.monotonic() + 60
            while not server.chat_requests and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # the server's requests: a list another thread fills
            assert server.chat_requests, tail(log)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            proc = start(env, log)

            async def updated() -> bool:
                doc = await db[MEMORIES].find_one({"key": "home-airport", "status": "current"})
                return doc is not None and "Denver" in doc["text"]

            deadline = time.monotonic() + 90
            while not await updated() and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            assert await updated(), tail(log)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        received = server.requests_for("reconcile_verdict")

    assert len(received) == 2  # the one cut off by the kill, and the one after the restart
    assert len(server.chat_requests) == 2  # nothing else was asked
    calls = await db[LLM_USAGE].find({"kind": "call"}).sort("started_at").to_list()
    assert [d["_id"] for d in calls] == [r.call_id for r in received]  # one record each
    assert {(d["purpose"], d["snapshot_id"], d["memory_type"]) for d in calls} == {
        ("judge", "snap-2", "semantic")
    }
    cut, answered = calls
    assert (cut["state"], cut["answers"], cut["prompt_tokens"]) == ("started", 0, 0)
    assert (answered["state"], answered["outcome"], answered["answers"]) == (
        "finished",
        "answered",
        1,
    )
    (row,) = await recent_usage(db[LLM_USAGE], utcnow() - timedelta(hours=1), settings.llm)
    assert (row.name, row.calls, row.unfinished) == ("judge:semantic", 2, 1)  # what status shows
    versions = await db[MEMORIES].count_documents({"key": "home-airport"})
    assert versions == 2  # updated once, however often it was asked
