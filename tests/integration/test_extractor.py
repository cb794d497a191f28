"""The extractor on real Kafka (and MongoDB for usage) with the local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from pydantic import SecretStr
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.kafka import DeadLetter, dead_letter_topic, ensure_topics, make_producer
from mongomem.adapters.llm import forget_working_modes
from mongomem.adapters.mongo import Document
from mongomem.codec import decode, encode
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate as ltm_candidate
from mongomem.models import MemoryCandidate, ScopeKind, Snapshot
from mongomem.operations.usage import LLM_USAGE
from mongomem.settings import EmbeddingSettings, ExtractionSettings, LLMSettings, Settings
from mongomem.stages.extractor import run_extractors, specs
from mongomem.testing import (
    LLAMA_CPP_PYTHON,
    Answer,
    ChatRequest,
    FakeOpenAIServer,
    Malformed,
    RateLimited,
    Reply,
    SchemaViolation,
    ServerError,
    Slow,
    citing,
    make_snapshot,
)

pytestmark = pytest.mark.integration

ANSWERS: dict[str, dict[str, Any]] = {
    "extract_semantic": {
        "items": [{"label": "home-airport", "fact": "The user's home airport is Boston."}]
    },
    "extract_episodic": {
        "items": [
            {
                "title": "Trip planning",
                "account": "The user planned a trip to Lisbon.",
                "participants": ["user", "assistant"],
            }
        ]
    },
    "extract_procedural": {
        "items": [
            {
                "name": "compare-flights",
                "description": "Compare flight options.",
                "steps": ["Rank by price", "Then by stops"],
            }
        ]
    },
    "extract_taxonomic": {
        "items": [{"domain": "airline", "term": "red-eye", "definition": "An overnight flight."}]
    },
    "extract_preference": {"items": [{"topic": "seat", "value": "aisle"}]},
}


def scripted(request: ChatRequest) -> Reply:
    answer = ANSWERS.get(request.schema_name or "", {"items": []})
    return Answer(citing(request, answer["items"]))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted) as srv:
        yield srv


def configure(
    settings: Settings, server: FakeOpenAIServer, enabled: tuple[str, ...], **extraction: Any
) -> Settings:
    options: dict[str, Any] = {
        "enabled": enabled,
        "max_attempts": 3,
        "backoff_base_s": 0.05,
        "backoff_max_s": 0.2,
        "concurrency": 4,
    }
    options.update(extraction)
    return settings.model_copy(
        update={
            "llm": LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), timeout_s=0.5),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=32),
            "extraction": ExtractionSettings(**options),
        }
    )


async def publish(settings: Settings, *items: Snapshot | bytes) -> None:
    await ensure_topics(settings.kafka, [settings.kafka.topic("snapshots")])
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for item in items:
            if isinstance(item, bytes):
                await producer.send_and_wait(settings.kafka.topic("snapshots"), item, key=b"junk")
            else:
                await producer.send_and_wait(
                    settings.kafka.topic("snapshots"), encode(item), key=item.session.kafka_key()
                )
    finally:
        await producer.stop()


async def read_topic(
    settings: Settings,
    topic: str,
    done: Callable[[list[bytes]], bool],
    timeout_s: float = 45.0,
    settle_s: float = 0.0,
) -> list[bytes]:
    """Values of ``topic`` from the start until ``done`` holds (then ``settle_s`` more)."""
    await ensure_topics(settings.kafka, [topic])
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            values.extend(r.value for records in batch.values() for r in records if r.value)
            if settle_until is None and done(values):
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
    finally:
        await consumer.stop()
    return values


@contextlib.asynccontextmanager
async def extractor(settings: Settings, types: list[str] | None = None) -> AsyncIterator[None]:
    task = asyncio.create_task(
        run_extractors(settings, specs(settings, types), embedder=HashingEmbedder(32))
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def candidates_of(values: list[bytes]) -> list[MemoryCandidate]:
    return [decode(v, MemoryCandidate) for v in values]


async def test_one_snapshot_fans_out_to_every_enabled_type_only(
    settings: Settings, server: FakeOpenAIServer, mongo: AsyncMongoClient[Document]
) -> None:
    """One handler per enabled type (SPEC C1); every candidate carries its embedding (SPEC C3)."""
    cfg = configure(settings, server, ("semantic", "procedural", "taxonomic"))
    snapshot = make_snapshot([("user", "My home airport is Boston."), ("assistant", "Noted.")])
    await publish(cfg, snapshot)
    async with extractor(cfg):
        values = await read_topic(
            cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 3, settle_s=2.0
        )
    found = {c.memory_type: c for c in candidates_of(values)}
    assert sorted(found) == ["procedural", "semantic", "taxonomic"]
    assert len(values) == 3
    assert server.requests_for("extract_episodic") == []
    assert found["semantic"].key == "home-airport"
    assert found["semantic"].scope.user_id == snapshot.user_id
    assert found["taxonomic"].scope.kind is ScopeKind.PROJECT
    assert found["procedural"].fields["content"] == "1. Rank by price\n2. Then by stops"
    assert all(len(c.embedding) == 32 for c in found.values())
    assert found["semantic"].model == "fake-model"

    usage = mongo[cfg.mongodb.database][LLM_USAGE]
    calls = await usage.find({"kind": "call", "snapshot_id": snapshot.snapshot_id}).to_list()
    assert sorted(d["memory_type"] for d in calls) == ["procedural", "semantic", "taxonomic"]
    assert all(d["prompt_tokens"] > 0 and d["completion_tokens"] > 0 for d in calls)
    assert {d["_id"] for d in calls} == {r.call_id for r in server.chat_requests}
    runs = await usage.find({"kind": "extraction", "snapshot_id": snapshot.snapshot_id}).to_list()
    assert all(d["last_outcome"] == "ok" and d["fresh"] == 1 for d in runs)
    stored = mongo[cfg.mongodb.database]["extraction_results"]
    assert await stored.count_documents({"snapshot_id": snapshot.snapshot_id}) == 3


async def test_a_json_object_only_server_extracts_a_whole_snapshot_in_auto_mode(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """llama-cpp-python refuses json_schema with HTTP 500: auto falls back, nothing dead-letters."""
    types = ("semantic", "episodic", "procedural", "taxonomic")
    try:
        with FakeOpenAIServer(scripted, dialect=LLAMA_CPP_PYTHON) as server:
            cfg = configure(settings, server, types)
            snapshot = make_snapshot([("user", "My home airport is Boston."), ("assistant", "Ok.")])
            await publish(cfg, snapshot)
            async with extractor(cfg):
                values = await read_topic(
                    cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 4, settle_s=2.0
                )
            requests = list(server.chat_requests)
            refused = list(server.refused_requests)
    finally:
        forget_working_modes()
    found = {c.memory_type: c for c in candidates_of(values)}
    assert sorted(found) == sorted(types)
    assert len(values) == 4
    assert found["semantic"].key == "home-airport"
    answered = [r for r in requests if r not in refused]
    assert sorted(r.schema_name or "" for r in answered) == sorted(f"extract_{t}" for t in types)
    assert {r.mode for r in answered} == {"json_object"}
    # Each type's first call may race the others to the refusal; none is refused twice.
    assert 1 <= len(refused) <= len(types)
    assert {r.mode for r in refused} == {"json_schema"}
    assert len({r.schema_name for r in refused}) == len(refused)

    usage = mongo[cfg.mongodb.database][LLM_USAGE]
    docs = await usage.find({"snapshot_id": snapshot.snapshot_id}).to_list()
    assert all(d["last_outcome"] == "ok" for d in docs if d["kind"] == "extraction")
    calls = [d for d in docs if d["kind"] == "call"]
    assert len(calls) == len(requests)  # the refused requests are recorded too, once each
    assert sorted(d["_id"] for d in calls) == sorted(r.call_id or "" for r in requests)
    assert sum(d["answers"] for d in calls) == len(answered)


FAULTS: dict[str, Reply] = {
    "rate-limit": RateLimited(retry_after=0.3),
    "server-error": ServerError(500),
    "timeout": Slow(2.0),
    "malformed": Malformed(),
    "schema": SchemaViolation(),
}


async def test_each_fault_is_retried_then_dead_lettered_and_the_stream_goes_on(
    settings: Settings, server: FakeOpenAIServer
) -> None:
    cfg = configure(settings, server, ("semantic",), max_attempts=2)
    snaps = {
        name: make_snapshot([("user", f"case {name}")], session_id=f"s-{name}") for name in FAULTS
    }
    flaky = make_snapshot([("user", "case flaky")], session_id="s-flaky")

    def responder(request: ChatRequest) -> Reply:
        text = request.text("user")
        for name, reply in FAULTS.items():
            if f"case {name}" in text:
                return reply
        if "case flaky" in text:
            seen = [r for r in server.chat_requests if "case flaky" in r.text("user")]
            if len(seen) == 1:  # the first call fails, the retry succeeds
                return ServerError(503)
        return scripted(request)

    server.responder = responder
    await publish(cfg, *snaps.values(), b"not a snapshot", flaky)
    dlq = dead_letter_topic(cfg.kafka, "extractor.semantic")
    async with extractor(cfg):
        letters = [
            decode(v, DeadLetter)
            for v in await read_topic(cfg, dlq, lambda v: len(v) >= len(FAULTS) + 1)
        ]
        values = await read_topic(cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 1)

    assert len(letters) == len(FAULTS) + 1
    by_case: dict[str, DeadLetter] = {}
    for letter in letters:
        raw = letter.original_value()
        assert raw is not None
        if raw == b"not a snapshot":
            by_case["junk"] = letter
        else:
            by_case[decode(raw, Snapshot).session_id.removeprefix("s-")] = letter
    assert by_case["junk"].attempts == 1
    assert by_case["junk"].error_class == "MessageDecodeError"
    expected = {
        "rate-limit": "LLMRateLimited",
        "server-error": "LLMUnavailable",
        "timeout": "LLMUnavailable",
        "malformed": "LLMOutputInvalid",
        "schema": "LLMOutputInvalid",
    }
    for case, error_class in expected.items():
        assert by_case[case].error_class == error_class, by_case[case]
        assert by_case[case].attempts == 2
        assert by_case[case].stage == "extractor.semantic"
        calls = [r for r in server.chat_requests if f"case {case}" in r.text("user")]
        assert len(calls) == 2
    limited = [r.at for r in server.chat_requests if "case rate-limit" in r.text("user")]
    assert limited[1] - limited[0] >= 0.3  # Retry-After honoured

    # The flaky snapshot failed once, then went through: the stream went on.
    (candidate,) = candidates_of(values)
    assert candidate.evidence.ref == flaky.snapshot_id


async def test_custom_type_end_to_end(
    settings: Settings, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    config = tmp_path / "project-config.yaml"
    config.write_text(
        """
memory:
  extraction:
    enabled: [semantic, preference]
    custom:
      - name: preference
        scope: user
        key: [topic]
        fields:
          topic: "what the preference is about"
          value: "the preference itself"
        instructions: "Extract stable travel preferences the user states."
""",
        encoding="utf-8",
    )
    cfg = configure(settings, server, ()).model_copy(
        update={"project_config": config, "extraction": ExtractionSettings(backoff_base_s=0.05)}
    )
    snapshot = make_snapshot([("user", "I always take an aisle seat.")])
    await publish(cfg, snapshot)
    async with extractor(cfg, ["preference"]):
        values = await read_topic(cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 1)
    (candidate,) = candidates_of(values)
    assert candidate.memory_type == "preference"
    assert candidate.key == "seat"
    assert candidate.fields == {"topic": "seat", "value": "aisle"}
    assert candidate.scope.user_id == snapshot.user_id
    (request,) = server.requests_for("extract_preference")
    assert "Extract stable travel preferences" in request.text("system")
    assert request.schema is not None
    assert server.requests_for("extract_semantic") == []  # only the chosen type runs here


async def test_demo_mode_stand_in_and_local_model(
    settings: Settings, mongo: AsyncMongoClient[Document], capfd: pytest.CaptureFixture[str]
) -> None:
    """``make run`` without an LLM: the labelled stand-in, real local embeddings."""
    cfg = settings.model_copy(
        update={
            "llm": LLMSettings(use_stand_in=True),
            "embedding": EmbeddingSettings(provider="local"),
            "extraction": ExtractionSettings(enabled=("semantic", "taxonomic")),
        }
    )
    snapshot = make_snapshot(
        [
            (
                "user",
                "My home airport is Boston. In airline jargon a red-eye means a night flight.",
            ),
            ("assistant", "Noted!"),
        ]
    )
    await publish(cfg, snapshot)
    task = asyncio.create_task(run_extractors(cfg, specs(cfg)))
    try:
        values = await read_topic(cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 2)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    found = {c.memory_type: c for c in candidates_of(values)}
    assert found["semantic"].text == "The user's home airport is Boston."
    assert found["taxonomic"].key == "airline/red-eye"
    assert found["taxonomic"].fields["definition"] == "A night flight."
    assert all(c.model is not None and "NOT a real model" in c.model for c in found.values())
    assert all(len(c.embedding) == 384 for c in found.values())
    assert "NOT a real model" in capfd.readouterr().err


async def test_the_model_is_shown_the_scopes_known_memories_and_can_reuse_their_labels(
    settings: Settings, server: FakeOpenAIServer, mongo: AsyncMongoClient[Document]
) -> None:
    """K2, with a scripted LLM (NOT a model) that reuses a label only when it is shown one."""
    cfg = configure(settings, server, ("semantic",))
    store = MemoryStore(mongo[cfg.mongodb.database])
    await store.setup()
    known = ltm_candidate(
        "semantic",
        project_id="proj",
        user_id="user-1",
        label="home-airport",
        text="The user's home airport is Boston.",
        embedder=HashingEmbedder(32),
    )
    await store.reconcile(known)

    def relabelling(request: ChatRequest) -> Reply:
        if request.schema_name != "extract_semantic":
            return Answer({"items": []})
        shown = '{"key": "home-airport", "text": "The user\'s home airport is Boston."}'
        label = "home-airport" if shown in request.text("user") else "departure-airport"
        fact = "The user's home airport is Denver."
        item = {"label": label, "fact": fact, "corrects": "home-airport"}
        return Answer(citing(request, [item]))

    server.responder = relabelling
    snapshot = make_snapshot([("user", "We moved: I fly from Denver now."), ("assistant", "Ok.")])
    await publish(cfg, snapshot)
    async with extractor(cfg):
        values = await read_topic(cfg, cfg.kafka.topic("candidates"), lambda v: len(v) >= 1)
    (found,) = candidates_of(values)
    assert found.key == "home-airport"
    assert found.corrects == "home-airport"  # the model's hint travels with the candidate
    assert found.prompt_version.endswith("+sys-v3")
    outcome = await store.reconcile(found)
    logged = await store.decisions.find_one({"_id": outcome.candidate_id})
    assert logged is not None
    assert (logged["action"], logged["model_says_corrects"]) == ("UPDATE", "home-airport")
    (request,) = server.requests_for("extract_semantic")
    assert "<<<KNOWN " in request.text("user")
