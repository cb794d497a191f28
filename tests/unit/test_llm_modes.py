"""Structured-output modes through the real ``openai`` client (SPEC K4).

Every mode is asked of the local OpenAI-compatible server; ``auto`` meets
fake servers that accept one mode each and refuse the others with the
status and body of the real server they are named after (scripted stand-ins,
NOT those servers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from mongomem.adapters.llm import (
    FALLBACK_ORDER,
    LLMUsage,
    Mode,
    OpenAILLM,
    StandInLLM,
    forget_working_modes,
)
from mongomem.errors import ConfigError, ExtractionError, LLMOutputInvalid, LLMUnavailable
from mongomem.settings import LLMSettings, StructuredOutput
from mongomem.stages.extractor.core import extracted_items, render_messages
from mongomem.stages.extractor.types import builtin_spec
from mongomem.testing import (
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER_BEFORE_JSON_SCHEMA,
    LM_STUDIO,
    PROMPT_ONLY,
    TOOLS_ONLY,
    VLLM_JSON_OBJECT_ONLY,
    Answer,
    Dialect,
    FakeOpenAIServer,
    Malformed,
    SchemaViolation,
    ServerError,
    Slow,
    make_snapshot,
)


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    label: str
    fact: str


class Facts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    items: list[Fact]


MESSAGES = [{"role": "system", "content": "extract"}, {"role": "user", "content": "hi"}]
FACTS = {"items": [{"label": "home-airport", "fact": "Boston"}]}


class Meter:
    """Counts calls and answers, and what the server had received when each call started."""

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.seen_at_start: list[int] = []
        self.answers: list[LLMUsage] = []
        self.failures: list[tuple[str, str]] = []

    async def call_started(self) -> str:
        self.seen_at_start.append(len(self.server.chat_requests))
        return f"call-{len(self.seen_at_start)}"

    async def answered(self, call_id: str, usage: LLMUsage, model: str) -> None:
        self.answers.append(usage)

    async def failed(self, call_id: str, error: str) -> None:
        self.failures.append((call_id, error))


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """What ``auto`` learned about one fake server must not reach the next on the same port."""
    yield
    forget_working_modes()


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def llm_for(
    server: FakeOpenAIServer, mode: StructuredOutput = "auto", timeout_s: float = 5.0
) -> OpenAILLM:
    return OpenAILLM(
        LLMSettings(
            base_url=server.base_url,
            api_key=SecretStr("k"),
            model="m",
            structured_output=mode,
            timeout_s=timeout_s,
        )
    )


async def ask(llm: OpenAILLM, meter: Meter | None = None) -> Facts:
    try:
        result = await llm.structured(MESSAGES, Facts, schema_name="extract_semantic", meter=meter)
    finally:
        await llm.close()
    return result.value


@pytest.mark.parametrize("mode", FALLBACK_ORDER)
async def test_each_mode_asks_its_way_and_validates_the_answer(
    server: FakeOpenAIServer, mode: Mode
) -> None:
    server.script(Answer(FACTS))
    value = await ask(llm_for(server, mode))
    assert value.items[0].label == "home-airport"
    (sent,) = server.chat_requests
    assert sent.mode == mode
    assert sent.schema_name == "extract_semantic"
    assert sent.schema is not None
    assert "items" in sent.schema["properties"]
    body = sent.body
    if mode == "json_schema":
        assert body["response_format"]["json_schema"]["strict"] is True
    if mode == "json_object":
        assert body["response_format"]["type"] == "json_object"
        assert body["response_format"]["schema"]["required"] == ["items"]
    if mode == "tools":
        assert "response_format" not in body
        assert body["tool_choice"] == {"type": "function", "function": {"name": "extract_semantic"}}
        assert body["tools"][0]["function"]["parameters"]["required"] == ["items"]
    if mode == "prompt":
        assert "response_format" not in body
        assert "tools" not in body
    if mode in ("json_object", "prompt"):
        system = sent.text("system")
        assert system.startswith("extract")  # the caller's instructions stay first
        assert "JSON schema" in system  # OpenAI's json_object needs the word JSON in the prompt


@pytest.mark.parametrize(
    ("dialect", "works", "refusals"),
    [
        (LLAMA_CPP_PYTHON, "json_object", [500]),
        (LLAMA_SERVER_BEFORE_JSON_SCHEMA, "json_object", [500]),
        (VLLM_JSON_OBJECT_ONLY, "json_object", [400]),
        (LM_STUDIO, "json_schema", []),
        (TOOLS_ONLY, "tools", [400, 400]),
        (PROMPT_ONLY, "prompt", [422, 422, 422]),
    ],
    ids=lambda v: v.name if isinstance(v, Dialect) else None,
)
async def test_auto_falls_back_past_refusals_and_remembers_the_working_mode(
    dialect: Dialect, works: Mode, refusals: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mongomem.adapters.llm")
    with FakeOpenAIServer(dialect=dialect) as server:
        server.script(Answer(FACTS), Answer(FACTS), Answer(FACTS))
        first = llm_for(server)
        assert (await ask(first)).items[0].fact == "Boston"
        assert len(server.refused_requests) == len(refusals)
        assert [r.mode for r in server.refused_requests] == list(FALLBACK_ORDER[: len(refusals)])
        assert [dialect.refusal(r.mode).status for r in server.refused_requests] == refusals
        # The process remembers: a new adapter for the same endpoint starts with the mode.
        second = llm_for(server)
        assert second.mode == works
        assert (await ask(second)).items[0].fact == "Boston"
        assert len(server.refused_requests) == len(refusals)
        answered = [r for r in server.chat_requests if r not in server.refused_requests]
        assert [r.mode for r in answered] == [works, works]
    remembered = [r for r in caplog.records if "remembered for this process" in r.getMessage()]
    assert len(remembered) == 1
    assert works in remembered[0].getMessage()


async def test_a_refused_configured_mode_is_a_config_error_naming_the_setting() -> None:
    with FakeOpenAIServer(dialect=LLAMA_CPP_PYTHON) as server:
        with pytest.raises(ConfigError, match="MONGOMEM_LLM_STRUCTURED_OUTPUT") as caught:
            await ask(llm_for(server, "json_schema"))
        assert len(server.chat_requests) == 1  # no fallback when a mode is configured
    assert "Input should be 'text' or 'json_object'" in str(caught.value)
    assert caught.value.retriable is False


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (ServerError(500, "CUDA error: out of memory"), LLMUnavailable),
        (ServerError(400, "This model's maximum context length is 8192 tokens"), ExtractionError),
        (ServerError(422, "temperature must be at most 2"), ExtractionError),
    ],
)
async def test_auto_does_not_fall_back_on_errors_that_do_not_name_the_format(
    server: FakeOpenAIServer, reply: ServerError, error: type[Exception]
) -> None:
    server.script(reply)
    with pytest.raises(error) as caught:
        await ask(llm_for(server))
    assert type(caught.value) is error
    assert len(server.chat_requests) == 1


async def test_prompt_mode_asks_once_for_a_repair(server: FakeOpenAIServer) -> None:
    server.script(SchemaViolation(), Answer(FACTS))
    meter = Meter(server)
    value = await ask(llm_for(server, "prompt"), meter)
    assert value.items[0].label == "home-airport"
    first, repair = server.chat_requests
    assert repair.messages[: len(first.messages)] == first.messages
    assert repair.messages[-2]["role"] == "assistant"
    assert "unexpected" in repair.messages[-2]["content"]  # the invalid answer, quoted back
    assert repair.messages[-1]["role"] == "user"
    assert "That answer is invalid" in repair.messages[-1]["content"]
    assert "extract_semantic" in repair.messages[-1]["content"]
    assert meter.seen_at_start == [0, 1]  # the repair is a call of its own, counted
    assert len(meter.answers) == 2
    # each request carries the id of its own usage record
    assert [r.call_id for r in server.chat_requests] == ["call-1", "call-2"]


async def test_prompt_mode_fails_after_one_invalid_repair(server: FakeOpenAIServer) -> None:
    server.script(Malformed(), Malformed())
    with pytest.raises(LLMOutputInvalid) as caught:
        await ask(llm_for(server, "prompt"))
    assert type(caught.value) is LLMOutputInvalid
    assert caught.value.retriable is True  # the stage's retries and dead letter still apply
    assert len(server.chat_requests) == 2


async def test_prompt_mode_reads_a_fenced_answer() -> None:
    with FakeOpenAIServer(dialect=PROMPT_ONLY) as server:
        server.script(Answer(FACTS))
        value = await ask(llm_for(server, "prompt"))
        assert len(server.chat_requests) == 1  # no repair needed for a code fence
    assert value.items[0].fact == "Boston"


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tools"])
async def test_invalid_answers_in_other_modes_are_output_invalid_without_repair(
    server: FakeOpenAIServer, mode: Mode
) -> None:
    server.script(SchemaViolation())
    with pytest.raises(LLMOutputInvalid, match="does not fit extract_semantic"):
        await ask(llm_for(server, mode))
    assert len(server.chat_requests) == 1


async def test_the_meter_hears_of_a_call_before_it_is_sent_even_if_it_never_returns(
    server: FakeOpenAIServer,
) -> None:
    server.script(Slow(2.0))
    meter = Meter(server)
    with pytest.raises(LLMUnavailable, match="timed out"):
        await ask(llm_for(server, "json_schema", timeout_s=0.3), meter)
    assert meter.seen_at_start == [0]  # counted before the server had the request
    assert meter.answers == []
    assert meter.failures == [("call-1", "timeout")]  # finished as failed, exactly once


@pytest.mark.parametrize("mode", FALLBACK_ORDER)
async def test_the_stand_in_reads_the_schema_in_every_mode(mode: Mode) -> None:
    spec = builtin_spec("semantic")
    snapshot = make_snapshot([("user", "My home airport is Boston Logan.")])
    llm = StandInLLM(LLMSettings(use_stand_in=True, structured_output=mode))
    try:
        result = await llm.structured(
            render_messages(spec, snapshot), spec.output_model, schema_name=spec.schema_name
        )
    finally:
        await llm.close()
    (item,) = extracted_items(spec, result.value)
    assert item.fields == {
        "label": "home-airport",
        "text": "The user's home airport is Boston Logan.",
    }


async def test_auto_remembers_an_accepted_mode_even_when_its_answer_is_invalid() -> None:
    with FakeOpenAIServer(dialect=LLAMA_CPP_PYTHON) as server:
        server.script(Malformed(), Answer(FACTS))
        with pytest.raises(LLMOutputInvalid):
            await ask(llm_for(server))
        assert (await ask(llm_for(server))).items[0].fact == "Boston"  # the stage's retry
        assert len(server.refused_requests) == 1  # json_schema was not tried again
