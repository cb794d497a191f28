"""TypeHandler with in-memory doubles: what is retried, what is paid for once, what stops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import SecretStr

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.kafka import DeadLetter
from mongomem.adapters.llm import OpenAILLM
from mongomem.codec import decode, encode
from mongomem.errors import ConfigError, EmbeddingError, StorageError
from mongomem.models import MemoryCandidate, MemoryScope
from mongomem.operations.usage import MemoryUsageRecorder
from mongomem.settings import ExtractionSettings, KafkaSettings, LLMSettings
from mongomem.stages.extractor.core import Known as KnownMemory
from mongomem.stages.extractor.handler import TypeHandler
from mongomem.stages.extractor.types import builtin_spec
from mongomem.stages.runtime import RetryPolicy
from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.runtime.ports import Message
from mongomem.stm.recall import mark_recalled
from mongomem.testing import (
    LLAMA_CPP_PYTHON,
    Answer,
    FakeOpenAIServer,
    Malformed,
    RateLimited,
    ServerError,
    Slow,
    make_snapshot,
)

FACT = {"items": [{"label": "home-airport", "fact": "The user's home airport is Boston."}]}


Record = Message  # a plain consumed record


class FlakyEmbedder(HashingEmbedder):
    def __init__(self, failures: int) -> None:
        super().__init__(16)
        self.failures = failures

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.failures:
            self.failures -= 1
            raise EmbeddingError("injected")
        return await super().embed(texts)


async def run(
    server: FakeOpenAIServer,
    embedder: HashingEmbedder,
    turns: Sequence[tuple[str, str]] = (("user", "My home airport is Boston."),),
    known: Any = None,
    erasures: Any = None,
) -> tuple[Any, ...]:
    broker = MemoryBroker(partitions=1)
    delays: list[float] = []
    clock = [1000.0]

    async def sleep(seconds: float) -> None:  # virtual time
        delays.append(seconds)
        clock[0] += seconds

    llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
    handler = TypeHandler(
        builtin_spec("semantic"),
        llm=llm,
        embedder=embedder,
        publisher=broker.publisher(),
        kafka=KafkaSettings(topic_prefix="t"),
        extraction=ExtractionSettings(max_attempts=3, backoff_base_s=0.5, backoff_max_s=4),
        policy=RetryPolicy(base_s=0.5, cap_s=4, max_attempts=3, random=lambda: 1.0),
        usage=(usage := MemoryUsageRecorder()),
        known=known,
        erasures=erasures,
        sleep=sleep,
        monotonic=lambda: clock[0],
    )
    snapshot = make_snapshot(turns)
    record = Record("t.snapshots", 0, 7, snapshot.session.kafka_key(), encode(snapshot))
    try:
        outcome = await handler.handle(record)
    finally:
        await llm.close()
    return outcome, [(m.topic, m.value) for m in broker.history], delays, usage.records


class Erasures:
    """An erasure register in which every session is erased."""

    async def is_erased(self, *who: Any) -> bool:
        return True


async def test_an_erased_sessions_snapshot_costs_no_llm_call_and_writes_nothing() -> None:
    with FakeOpenAIServer() as server:
        server.script(Answer(FACT))
        outcome, sent, _, usage = await run(server, HashingEmbedder(16), erasures=Erasures())
        assert server.chat_requests == []
    assert (sent, usage) == ([], [])
    assert not outcome.dead_lettered


async def test_a_later_step_is_retried_without_paying_for_the_llm_again() -> None:
    with FakeOpenAIServer() as server:
        server.script(RateLimited(retry_after=3), Answer(FACT))
        outcome, sent, delays, usage = await run(server, FlakyEmbedder(failures=1))
        assert len(server.chat_requests) == 2  # the 429, then the answer; not a third call
    assert outcome.attempts == 3
    assert not outcome.dead_lettered
    assert delays == [3, 1.0]  # Retry-After honoured, then exponential backoff
    ((topic, value),) = sent
    assert topic == "t.candidates"
    assert decode(value, MemoryCandidate).key == "home-airport"
    (record,) = usage
    assert record.calls == 2  # every request sent is counted, the refused 429 too
    assert record.outcome == "ok"


async def test_tokens_of_invalid_answers_are_recorded_too() -> None:
    with FakeOpenAIServer() as server:
        server.script(Malformed(), Answer(FACT))
        outcome, _, _, usage = await run(server, HashingEmbedder(16))
    assert outcome.attempts == 2
    (record,) = usage
    assert record.calls == 2
    assert record.completion_tokens > 1


async def test_exhausted_retries_dead_letter_with_the_attempt_count() -> None:
    with FakeOpenAIServer() as server:
        server.script(ServerError(500), ServerError(502), ServerError(503))
        outcome, sent, delays, usage = await run(server, HashingEmbedder(16))
    assert outcome.dead_lettered
    ((topic, value),) = sent
    assert topic == "t.dlq.extractor.semantic"
    letter = decode(value, DeadLetter)
    assert letter.attempts == 3
    assert letter.error_class == "LLMUnavailable"
    assert letter.source_offset == 7
    assert delays == [0.5, 1.0]
    assert usage[0].outcome == "dead-letter"


async def test_a_rejected_key_stops_the_stage_instead_of_dead_lettering() -> None:
    with FakeOpenAIServer() as server:
        server.script(ServerError(401, "invalid api key"))
        with pytest.raises(ConfigError, match="MONGOMEM_LLM_API_KEY"):
            await run(server, HashingEmbedder(16))


class VirtualClock:
    """Time that only moves when the handler sleeps."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.now += seconds


def handler_on(
    server: FakeOpenAIServer, clock: VirtualClock, extraction: ExtractionSettings
) -> tuple[TypeHandler, OpenAILLM]:
    llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
    handler = TypeHandler(
        builtin_spec("semantic"),
        llm=llm,
        embedder=HashingEmbedder(16),
        publisher=MemoryBroker().publisher(),
        kafka=KafkaSettings(topic_prefix="t"),
        extraction=extraction,
        usage=MemoryUsageRecorder(),
        sleep=clock.sleep,
        monotonic=lambda: clock.now,
    )
    return handler, llm


def snapshot_record(n: int) -> Record:
    snap = make_snapshot([("user", f"turn {n}")], session_id=f"s{n}")
    return Record("t.snapshots", 0, n, snap.session.kafka_key(), encode(snap))


async def test_a_429_holds_back_the_handlers_next_calls() -> None:
    clock = VirtualClock(50.0)
    with FakeOpenAIServer() as server:
        server.script(RateLimited(retry_after=5), Answer(FACT))
        handler, llm = handler_on(server, clock, ExtractionSettings(max_attempts=1))
        outcomes = []
        try:
            for n in range(2):
                outcomes.append(await handler.handle(snapshot_record(n)))
        finally:
            await llm.close()
    assert outcomes[0].dead_lettered  # one attempt only: the 429 is final for it
    assert not outcomes[1].dead_lettered
    assert clock.delays == [5]  # the next snapshot's call waited out the Retry-After


async def test_max_rps_spaces_the_llm_calls_of_a_handler() -> None:
    clock = VirtualClock(10.0)
    with FakeOpenAIServer() as server:
        server.script(Answer(FACT), Answer(FACT), Answer(FACT))
        handler, llm = handler_on(server, clock, ExtractionSettings(max_rps=2))
        try:
            outcomes = await asyncio.gather(*(handler.handle(snapshot_record(n)) for n in range(3)))
        finally:
            await llm.close()
    assert all(not o.dead_lettered for o in outcomes)
    # Only the limiter's sleeps move the virtual clock: three calls at 2/s start
    # 0, 0.5 and 1.0 s in, so the third began exactly one second after the first.
    assert clock.now - 10.0 == pytest.approx(1.0)
    assert len(clock.delays) == 2


async def test_a_call_cut_short_by_a_crash_was_counted_before_it_was_sent() -> None:
    """The defect of issue 14: calls interrupted by a crash were missing from llm_usage."""
    usage = MemoryUsageRecorder()
    with FakeOpenAIServer() as server:
        server.script(Slow(30.0))
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
        handler = TypeHandler(
            builtin_spec("semantic"),
            llm=llm,
            embedder=HashingEmbedder(16),
            publisher=MemoryBroker().publisher(),
            kafka=KafkaSettings(topic_prefix="t"),
            extraction=ExtractionSettings(max_attempts=1),
            usage=usage,
        )
        task = asyncio.create_task(handler.handle(snapshot_record(1)))
        for _ in range(500):  # until the request is at the server (bounded, not timed)
            if server.chat_requests:
                break
            await asyncio.sleep(0.01)
        assert len(server.chat_requests) == 1
        task.cancel()  # the process dies mid-call
        with pytest.raises(asyncio.CancelledError):
            await task
        await llm.close()
    (started,) = usage.started
    assert usage.call_ids == [server.chat_requests[0].call_id]  # the request names its record
    assert started.kind == "extraction"
    assert started.name == "semantic"
    assert usage.answers == []
    assert usage.records == []  # the run never finished; its call is counted all the same


async def test_a_configured_mode_the_server_refuses_stops_the_stage() -> None:
    """Every snapshot would be refused alike: stop, do not dead-letter them all."""
    broker = MemoryBroker()
    with FakeOpenAIServer(dialect=LLAMA_CPP_PYTHON) as server:
        settings = LLMSettings(
            base_url=server.base_url, api_key=SecretStr("k"), structured_output="json_schema"
        )
        llm = OpenAILLM(settings)
        handler = TypeHandler(
            builtin_spec("semantic"),
            llm=llm,
            embedder=HashingEmbedder(16),
            publisher=broker.publisher(),
            kafka=KafkaSettings(topic_prefix="t"),
            extraction=ExtractionSettings(max_attempts=3),
            usage=MemoryUsageRecorder(),
        )
        try:
            with pytest.raises(ConfigError, match="MONGOMEM_LLM_STRUCTURED_OUTPUT"):
                await handler.handle(snapshot_record(1))
        finally:
            await llm.close()
        assert len(server.chat_requests) == 1  # not retried
    assert broker.history == []  # no dead letter


async def test_a_snapshot_with_nothing_to_extract_makes_no_llm_call() -> None:
    recalled = mark_recalled("## Known facts\n- home-airport: The user's home airport is Boston.")
    with FakeOpenAIServer() as server:
        server.script(Answer(FACT))
        outcome, sent, _, usage = await run(
            server, HashingEmbedder(16), [("system", recalled), ("assistant", recalled)]
        )
        assert server.chat_requests == []
    assert (outcome.candidate_ids, outcome.dead_lettered, sent) == ((), False, [])
    (record,) = usage
    assert (record.calls, record.outcome) == (0, "nothing-to-extract")


class Known:
    """A KnownMemories double: answers ``found``, or raises ``error``."""

    def __init__(self, found: list[KnownMemory], error: Exception | None = None) -> None:
        self.found, self.error = found, error
        self.asked: list[tuple[MemoryScope, str, int]] = []

    async def nearest(
        self, scope: MemoryScope, memory_type: str, vector: Sequence[float], limit: int
    ) -> list[KnownMemory]:
        self.asked.append((scope, memory_type, limit))
        if self.error is not None:
            raise self.error
        return self.found


async def test_known_memories_reach_the_prompt_and_a_failed_lookup_does_not_stop_it() -> None:
    boston = KnownMemory("home-airport", "The user's home airport is Boston.")
    for known, shown in ((Known([boston]), True), (Known([], StorageError("down")), False)):
        with FakeOpenAIServer() as server:
            server.script(Answer(FACT))
            outcome, sent, _, _ = await run(server, HashingEmbedder(16), known=known)
            (request,) = server.chat_requests
        assert ("The user's home airport is Boston." in request.text("user")) is shown
        assert len(sent) == 1
        assert not outcome.dead_lettered
        ((scope, memory_type, _),) = known.asked
        assert (scope.user_id, memory_type) == ("user-1", "semantic")
