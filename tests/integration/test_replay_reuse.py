"""``mongomem replay extractor`` against a counting endpoint (SPEC I6, issue 24).

Three snapshots of two types are extracted once by a live extractor. A replay
of the snapshots topic from offset 0 in a new consumer group then makes no
LLM request at all (every answer is stored); ``--re-extract`` makes exactly one
request per snapshot and type. Each request the endpoint received has exactly
one record in ``llm_usage`` (tied by the id the request carries).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.kafka import ensure_topics, make_producer, pipeline_topics
from mongomem.adapters.mongo import EXTRACTIONS, Document
from mongomem.codec import encode
from mongomem.operations.usage import LLM_USAGE
from mongomem.settings import Settings
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply, citing, make_snapshot

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TYPES = ("semantic", "episodic")


def answer(request: ChatRequest) -> Reply:
    if request.schema_name == "extract_semantic":
        return Answer(
            citing(request, [{"label": "home-city", "fact": "The user lives in Boston."}])
        )
    return Answer({"items": []})


def replay(env: dict[str, str], suffix: str, *extra: str) -> str:
    command = [sys.executable, "-m", "mongomem.cli", "replay", "extractor"]
    command += [f"--group-suffix={suffix}", *extra]
    for memory_type in TYPES:
        command += ["--type", memory_type]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


async def test_a_replay_pays_nothing_and_re_extract_pays_once_per_snapshot_and_type(
    settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    mongo: AsyncMongoClient[Document],
) -> None:
    snapshots = [
        make_snapshot([("user", f"I live in Boston ({n}).")], session_id=f"s{n}") for n in range(3)
    ]
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, ["extractor.semantic"]))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for snap in snapshots:
            await producer.send_and_wait(
                settings.kafka.topic("snapshots"), encode(snap), key=snap.session.kafka_key()
            )
    finally:
        await producer.stop()
    with FakeOpenAIServer(answer) as server:
        env = {
            **subprocess_env,
            "MONGOMEM_LLM_BASE_URL": server.base_url,
            "MONGOMEM_LLM_API_KEY": "test",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_EMBEDDING_DIMENSIONS": "32",
            "MONGOMEM_ENABLED_EXTRACTIONS": ",".join(TYPES),
        }
        replay(env, "-first")  # the first pass: asks for every snapshot and type
        first = list(server.chat_requests)
        assert Counter(r.schema_name for r in first) == {
            "extract_semantic": 3,
            "extract_episodic": 3,
        }

        replay(env, "-again")  # nothing changed: every answer is stored
        assert len(server.chat_requests) == len(first)

        replay(env, "-forced", "--re-extract")  # asked again, once per snapshot and type
        forced = server.chat_requests[len(first) :]
        assert Counter((r.schema_name, r.text("user").count("Boston")) for r in forced) == {
            ("extract_semantic", 1): 3,
            ("extract_episodic", 1): 3,
        }
        received = list(server.chat_requests)

    db = mongo[settings.mongodb.database]
    calls = await db[LLM_USAGE].find({"kind": "call"}).to_list()
    assert sorted(d["_id"] for d in calls) == sorted(r.call_id or "" for r in received)
    assert {d["purpose"] for d in calls} == {"extract"}
    runs = await db[LLM_USAGE].find({"kind": "extraction"}).to_list()
    assert len(runs) == 6
    assert all((d["runs"], d["fresh"], d["reused"]) == (3, 2, 1) for d in runs)
    assert {d["last_asked"] for d in runs} == {"re-extract"}  # status says why it asked
    assert await db[EXTRACTIONS].count_documents({}) == 6  # one per snapshot and type
