"""The LLM adapter against the local OpenAI-compatible server: answers and error mapping."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from mongomem.adapters.llm import (
    OpenAILLM,
    StandInLLM,
    make_llm,
    parse_retry_after,
    strict_json_schema,
)
from mongomem.errors import (
    ConfigError,
    ExtractionError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMUnavailable,
    MongomemError,
    NotReady,
)
from mongomem.settings import LLMSettings
from mongomem.testing import (
    STAND_IN_MODEL,
    Answer,
    Dropped,
    FakeOpenAIServer,
    Malformed,
    RateLimited,
    SchemaViolation,
    ServerError,
    Slow,
)


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    label: str
    fact: str
    when: str | None = None


class Facts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    items: list[Fact]


MESSAGES = [{"role": "system", "content": "extract"}, {"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def llm_for(server: FakeOpenAIServer, timeout_s: float = 5.0) -> OpenAILLM:
    key = SecretStr("k")
    return OpenAILLM(
        LLMSettings(base_url=server.base_url, api_key=key, model="m", timeout_s=timeout_s)
    )


async def test_valid_answer_is_validated_with_usage_and_latency(server: FakeOpenAIServer) -> None:
    server.script(Answer({"items": [{"label": "home-airport", "fact": "Boston", "when": None}]}))
    llm = llm_for(server)
    try:
        result = await llm.structured(MESSAGES, Facts, schema_name="extract_semantic")
    finally:
        await llm.close()
    assert result.value.items[0].label == "home-airport"
    assert result.usage.prompt_tokens > 0
    assert result.usage.completion_tokens > 0
    assert result.latency_s >= 0
    sent = server.chat_requests[-1]
    assert sent.schema_name == "extract_semantic"
    assert sent.body["response_format"]["json_schema"]["strict"] is True


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (ServerError(500), LLMUnavailable),
        (ServerError(503), LLMUnavailable),
        (Dropped(after_bytes=10), LLMUnavailable),
        (ServerError(401, "bad key"), ConfigError),
        (ServerError(404, "no such model"), ConfigError),
        (ServerError(400, "bad request"), ExtractionError),
        (Malformed(), LLMOutputInvalid),
        (SchemaViolation(), LLMOutputInvalid),
        (Answer({"items": []}, finish_reason="length"), LLMOutputInvalid),
    ],
)
async def test_faults_map_to_typed_errors(
    server: FakeOpenAIServer, reply: object, error: type[MongomemError]
) -> None:
    server.script(reply)  # type: ignore[arg-type]
    llm = llm_for(server)
    try:
        with pytest.raises(error) as caught:
            await llm.structured(MESSAGES, Facts, schema_name="extract_semantic")
    finally:
        await llm.close()
    assert type(caught.value) is error
    assert caught.value.retriable is (error is not ConfigError)


async def test_429_carries_retry_after(server: FakeOpenAIServer) -> None:
    server.script(RateLimited(retry_after=1.5))
    llm = llm_for(server)
    try:
        with pytest.raises(LLMRateLimited) as caught:
            await llm.structured(MESSAGES, Facts, schema_name="extract_semantic")
    finally:
        await llm.close()
    assert caught.value.retry_after == pytest.approx(1.5)


async def test_timeout_is_unavailable(server: FakeOpenAIServer) -> None:
    server.script(Slow(2.0))
    llm = llm_for(server, timeout_s=0.3)
    started = time.perf_counter()
    try:
        with pytest.raises(LLMUnavailable, match="timed out"):
            await llm.structured(MESSAGES, Facts, schema_name="extract_semantic")
    finally:
        await llm.close()
    assert time.perf_counter() - started < 1.5  # no hidden client retries


async def test_refused_connection_is_unavailable() -> None:
    llm = OpenAILLM(LLMSettings(base_url="http://127.0.0.1:9/v1", api_key=SecretStr("k")))
    try:
        with pytest.raises(LLMUnavailable, match="cannot connect"):
            await llm.structured(MESSAGES, Facts, schema_name="x")
    finally:
        await llm.close()


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": "Thu, 01 Jan 2026 12:00:05 GMT"}, now) == 5.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_strict_schema_requires_every_property_and_forbids_extras() -> None:
    schema = strict_json_schema(Facts)
    item = schema["$defs"]["Fact"]
    assert item["required"] == ["label", "fact", "when"]
    assert item["additionalProperties"] is False
    assert schema["additionalProperties"] is False


def test_make_llm_refuses_without_endpoint_and_prefers_a_configured_one() -> None:
    with pytest.raises(NotReady, match="MONGOMEM_LLM_BASE_URL"):
        make_llm(LLMSettings())
    with pytest.raises(NotReady, match="MONGOMEM_LLM_API_KEY"):
        make_llm(LLMSettings(base_url="http://127.0.0.1:9/v1"))
    configured = make_llm(
        LLMSettings(base_url="http://127.0.0.1:9/v1", api_key=SecretStr("k"), use_stand_in=True)
    )
    assert not isinstance(configured, StandInLLM)
    assert "NOT" not in configured.name


async def test_stand_in_announces_itself(capsys: pytest.CaptureFixture[str]) -> None:
    llm = make_llm(LLMSettings(use_stand_in=True))
    try:
        assert isinstance(llm, StandInLLM)
        assert "NOT a real model" in llm.name
        user = '{"seq": 1, "role": "user", "content": "My home airport is Boston."}'
        result = await llm.structured(
            [{"role": "user", "content": user}], Facts, schema_name="extract_semantic"
        )
    finally:
        await llm.close()
    assert "NOT a real model" in capsys.readouterr().err
    assert result.model == STAND_IN_MODEL
    assert [i.label for i in result.value.items] == ["home-airport"]
