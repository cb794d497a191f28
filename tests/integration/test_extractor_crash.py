"""SIGKILL of an extractor process after the LLM answered, before the offset commit.

Two snapshots of one session are already on the topic when the extractor
starts, so they arrive in one batch and run in order. The first one's
candidates are published; the second one's LLM answer arrives, and its
embedding request is held at the local server. Then the process is killed:
the batch's offsets were never committed. A restarted extractor must emit
the same candidate ids again (duplicates are the reconciler's to absorb) and
lose nothing, and it must not pay the LLM again: both answers were stored
before the kill (SPEC I6).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import ensure_topics, make_producer, pipeline_topics
from mongomem.adapters.mongo import Document
from mongomem.codec import decode, encode
from mongomem.models import MemoryCandidate
from mongomem.operations.usage import LLM_USAGE
from mongomem.settings import Settings
from mongomem.stages.extractor.types import builtin_spec
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply, Slow, make_snapshot

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def answer(request: ChatRequest) -> Reply:
    text = request.text("user")
    city = "Lisbon" if "Lisbon" in text else "Boston"
    return Answer({"items": [{"label": "home-city", "fact": f"The user lives in {city}."}]})


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(answer) as srv:
        yield srv


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "mongomem.cli", "run", "extractor", "--type", "semantic"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def wait_until(condition: object, timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; log:\n{tail(log)}")


async def test_sigkill_before_commit_replays_the_same_candidate_ids(
    settings: Settings,
    subprocess_env: dict[str, str],
    server: FakeOpenAIServer,
    tmp_path: Path,
    mongo: AsyncMongoClient[Document],
) -> None:
    env = {
        **subprocess_env,
        "MONGOMEM_LLM_BASE_URL": server.base_url,
        "MONGOMEM_LLM_API_KEY": "test",
        "MONGOMEM_EMBEDDING_PROVIDER": "openai",
        "MONGOMEM_EMBEDDING_BASE_URL": server.base_url,
        "MONGOMEM_EMBEDDING_API_KEY": "test",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "32",
        "MONGOMEM_ENABLED_EXTRACTIONS": "semantic",
    }
    first = make_snapshot([("user", "I live in Boston.")])
    second = make_snapshot([("user", "I moved, I live in Lisbon now.")], first_seq=2)
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, ["extractor.semantic"]))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for snap in (first, second):
            await producer.send_and_wait(
                settings.kafka.topic("snapshots"), encode(snap), key=snap.session.kafka_key()
            )
    finally:
        await producer.stop()

    version = builtin_spec("semantic").full_prompt_version
    id_first = MemoryCandidate.make_id(first.snapshot_id, "semantic", version, 0)
    id_second = MemoryCandidate.make_id(second.snapshot_id, "semantic", version, 0)

    seen: list[str] = []
    consumer = AIOKafkaConsumer(
        settings.kafka.topic("candidates"),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()

    async def drain() -> None:
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            seen.extend(decode(r.value, MemoryCandidate).candidate_id for r in records)

    # Hold the candidate's embedding (after the LLM answered), not the snapshot's own
    # embedding that looks up the known memories before the LLM is asked.
    fact = "The user lives in Lisbon."
    gate = server.hold_embeddings(lambda texts: fact in texts)
    log = tmp_path / "extractor.log"
    proc = start(env, log)
    try:
        deadline = time.monotonic() + 60
        while id_first not in seen and time.monotonic() < deadline:
            await drain()
        assert id_first in seen, tail(log)

        def lisbon_embedding_requested() -> bool:
            return any(fact in req for req in server.embedding_requests)

        await wait_until(lisbon_embedding_requested, 30, "the held embedding request", log)
        assert len(server.requests_for("extract_semantic")) == 2  # both answered by the LLM
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        gate.set()

        proc = start(env, log)
        deadline = time.monotonic() + 90
        while id_second not in seen and time.monotonic() < deadline:
            await drain()
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            await drain()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        await consumer.stop()

    assert proc.returncode == 0, tail(log)  # SIGTERM stops the restarted extractor cleanly
    counts = Counter(seen)
    assert counts[id_second] == 1, (counts, tail(log))
    assert counts[id_first] == 2  # emitted, not committed, emitted again after the restart
    assert set(counts) == {id_first, id_second}

    # The answers were stored before the kill (SPEC I6): the restarted extractor reused
    # them and asked the endpoint nothing. Every request the endpoint received has exactly
    # one record in llm_usage, tied by the id the request carried.
    received = server.requests_for("extract_semantic")
    assert len(received) == 2  # both snapshots before the kill, none again after it
    usage = await mongo[settings.mongodb.database][LLM_USAGE].find().to_list()
    calls = [d for d in usage if d["kind"] == "call"]
    assert sorted(d["_id"] for d in calls) == sorted(r.call_id or "" for r in received)
    assert all(d["state"] == "finished" and d["answers"] == 1 for d in calls)
    runs = [d for d in usage if d["kind"] == "extraction"]
    assert sum(d["runs"] for d in runs) == 3  # the killed run never finished
    assert sum(d.get("reused", 0) for d in runs) == 2  # both reruns reused a stored answer


async def test_a_call_cut_off_by_sigkill_is_recorded_once_as_unfinished(
    settings: Settings,
    subprocess_env: dict[str, str],
    server: FakeOpenAIServer,
    tmp_path: Path,
    mongo: AsyncMongoClient[Document],
) -> None:
    """Issue 24: the endpoint's requests and llm_usage's records are equal, one for one,
    when the extractor is killed with a request in flight."""
    env = {
        **subprocess_env,
        "MONGOMEM_LLM_BASE_URL": server.base_url,
        "MONGOMEM_LLM_API_KEY": "test",
        "MONGOMEM_LLM_TIMEOUT_S": "60",
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "32",
        "MONGOMEM_ENABLED_EXTRACTIONS": "semantic",
    }
    snap = make_snapshot([("user", "I live in Boston.")])
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, ["extractor.semantic"]))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.kafka.topic("snapshots"), encode(snap), key=snap.session.kafka_key()
        )
    finally:
        await producer.stop()
    server.script(Slow(60.0, answer_for_boston()))  # the first request hangs: killed in flight
    log = tmp_path / "extractor.log"
    proc = start(env, log)
    usage = mongo[settings.mongodb.database][LLM_USAGE]
    try:
        await wait_until(lambda: len(server.chat_requests) == 1, 60, "the first request", log)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = start(env, log)

        done: list[Document] = []

        async def finished() -> bool:
            done[:] = await usage.find({"kind": "extraction", "last_outcome": "ok"}).to_list()
            return bool(done)

        for _ in range(450):  # at most 90 s
            if await finished():
                break
            await asyncio.sleep(0.2)
        assert done, tail(log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    received = server.requests_for("extract_semantic")
    assert len(received) == 2  # the one cut off by the kill, and the one after the restart
    calls = await usage.find({"kind": "call"}).sort("started_at").to_list()
    assert [d["_id"] for d in calls] == [r.call_id for r in received]  # one record each
    cut, answered = calls
    assert (cut["state"], cut["answers"], cut["prompt_tokens"]) == ("started", 0, 0)
    assert (answered["state"], answered["outcome"], answered["answers"]) == (
        "finished",
        "answered",
        1,
    )


def answer_for_boston() -> Answer:
    return Answer({"items": [{"label": "home-city", "fact": "The user lives in Boston."}]})
