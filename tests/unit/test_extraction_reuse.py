"""Stored extraction answers (SPEC I6): a snapshot seen again costs no LLM call."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.llm import OpenAILLM
from mongomem.codec import decode, encode
from mongomem.models import MemoryCandidate, Snapshot
from mongomem.operations.usage import MemoryUsageRecorder
from mongomem.settings import ExtractionSettings, KafkaSettings, LLMSettings
from mongomem.stages.extractor.handler import TypeHandler
from mongomem.stages.extractor.results import MemoryExtractionResults, schema_version
from mongomem.stages.extractor.types import TypeSpec, builtin_spec
from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.runtime.ports import Message
from mongomem.testing import Answer, FakeOpenAIServer, make_snapshot

FACT = {
    "items": [{"label": "home-airport", "fact": "The user's home airport is Boston.", "seqs": [1]}]
}
OTHER = {
    "items": [{"label": "home-airport", "fact": "The user's home airport is Denver.", "seqs": [1]}]
}


async def extract(
    server: FakeOpenAIServer,
    results: MemoryExtractionResults,
    snapshot: Snapshot,
    *,
    spec: TypeSpec | None = None,
    model: str = "gpt-test",
    mode: str = "auto",
    re_extract: bool = False,
) -> tuple[Any, list[bytes], MemoryUsageRecorder]:
    broker = MemoryBroker(partitions=1)
    usage = MemoryUsageRecorder()
    settings = LLMSettings(
        base_url=server.base_url, api_key=SecretStr("k"), model=model, structured_output=mode
    )
    llm = OpenAILLM(settings)
    handler = TypeHandler(
        spec or builtin_spec("semantic"),
        llm=llm,
        embedder=HashingEmbedder(16),
        publisher=broker.publisher(),
        kafka=KafkaSettings(topic_prefix="t"),
        extraction=ExtractionSettings(max_attempts=1),
        usage=usage,
        results=results,
        re_extract=re_extract,
    )
    record = Message("t.snapshots", 0, 1, snapshot.session.kafka_key(), encode(snapshot))
    try:
        outcome = await handler.handle(record)
    finally:
        await llm.close()
    return outcome, [m.value for m in broker.history if m.value is not None], usage


def texts(sent: list[bytes]) -> list[str]:
    return [decode(value, MemoryCandidate).text for value in sent]


async def test_a_snapshot_seen_again_reuses_the_stored_answer_without_a_call() -> None:
    results = MemoryExtractionResults()
    snapshot = make_snapshot([("user", "My home airport is Boston.")])
    with FakeOpenAIServer() as server:
        server.script(Answer(FACT), Answer(OTHER))
        first, sent_first, usage_first = await extract(server, results, snapshot)
        again, sent_again, usage_again = await extract(server, results, snapshot)
        assert len(server.chat_requests) == 1  # the second run asked nothing
    assert again.candidate_ids == first.candidate_ids
    assert texts(sent_again) == texts(sent_first) == ["The user's home airport is Boston."]
    (doc,) = results.documents.values()
    assert doc["snapshot_id"] == snapshot.snapshot_id
    assert doc["prompt_tokens"] > 0  # the answer's cost is kept with it
    (fresh,) = usage_first.records
    (reused,) = usage_again.records
    assert (fresh.reused, fresh.calls) == (False, 1)
    assert (reused.reused, reused.calls, reused.outcome) == (True, 0, "ok")
    assert usage_again.started == []


async def test_another_model_mode_or_re_extract_asks_again() -> None:
    results = MemoryExtractionResults()
    snapshot = make_snapshot([("user", "My home airport is Boston.")])
    with FakeOpenAIServer() as server:
        _, _, first = await extract(server, results, snapshot)
        assert len(server.chat_requests) == 1
        _, _, other_model = await extract(server, results, snapshot, model="gpt-other")
        assert len(server.chat_requests) == 2
        _, _, other_mode = await extract(server, results, snapshot, mode="tools")
        assert len(server.chat_requests) == 3
        server.script(Answer(OTHER))
        _, sent, forced = await extract(server, results, snapshot, re_extract=True)
        assert len(server.chat_requests) == 4
        # each run records why it asked (status shows it, issue 24)
        assert [u.records[0].asked for u in (first, other_model, other_mode, forced)] == [
            "new",
            "model",
            "mode",
            "re-extract",
        ]
        assert texts(sent) == ["The user's home airport is Denver."]
        # the re-extracted answer replaced the stored one: reused from now on
        _, sent_after, reused = await extract(server, results, snapshot)
        assert len(server.chat_requests) == 4
        assert reused.records[0].asked is None  # not asked
        assert texts(sent_after) == ["The user's home airport is Denver."]
    assert len(results.documents) == 3  # one per (model, mode)


async def test_a_new_prompt_version_asks_again() -> None:
    results = MemoryExtractionResults()
    snapshot = make_snapshot([("user", "My home airport is Boston.")])
    spec = builtin_spec("semantic")
    bumped = TypeSpec(
        name=spec.name,
        scope=spec.scope,
        prompt_version=f"{spec.prompt_version}-next",
        instructions=spec.instructions,
        item_model=spec.item_model,
        normalise=spec.normalise,
        key_of=spec.key_of,
        text_of=spec.text_of,
    )
    with FakeOpenAIServer() as server:
        await extract(server, results, snapshot, spec=spec)
        _, _, usage = await extract(server, results, snapshot, spec=bumped)
        assert len(server.chat_requests) == 2
    assert usage.records[0].asked == "prompt"
    assert len(results.documents) == 2


def test_the_schema_version_follows_the_schema() -> None:
    semantic, episodic = builtin_spec("semantic"), builtin_spec("episodic")
    assert schema_version(semantic.output_model) == schema_version(semantic.output_model)
    assert schema_version(semantic.output_model) != schema_version(episodic.output_model)


async def test_an_answer_that_no_longer_fits_the_schema_is_asked_again() -> None:
    results = MemoryExtractionResults()
    snapshot = make_snapshot([("user", "My home airport is Boston.")])
    with FakeOpenAIServer() as server:
        await extract(server, results, snapshot)
        (doc,) = results.documents.values()
        doc["value"] = {"items": [{"unexpected": 1}]}
        _, _, usage = await extract(server, results, snapshot)
        assert len(server.chat_requests) == 2
    assert usage.records[0].asked == "invalid"


def test_why_asked_names_what_changed_against_the_nearest_stored_key() -> None:
    from mongomem.stages.extractor.results import ResultKey, why_asked

    key = ResultKey("snap", "semantic", "p2", "s1", "m2", "auto")
    old_prompt = ResultKey("snap", "semantic", "p1", "s1", "m2", "auto")
    old_both = ResultKey("snap", "semantic", "p1", "s0", "m1", "auto")
    assert why_asked(key, []) == "new"
    assert why_asked(key, [old_both]) == "prompt+schema+model"
    assert why_asked(key, [old_both, old_prompt]) == "prompt"  # the nearest one
    assert why_asked(key, [key]) == "invalid"
    assert why_asked(key, [key], re_extract=True) == "re-extract"
