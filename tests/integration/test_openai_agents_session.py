"""The OpenAI Agents SDK session over short-term memory (SPEC N1), through ``Runner.run``
with a scripted ``Model`` (labelled, not a model), and the pipeline running on the real
servers with the scripted OpenAI-compatible server as the extraction LLM."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.errors import InputError
from mongomem.integrations.openai_agents import MongomemSession, turn_of
from mongomem.local.llm_stand_in.rules import read_turns
from mongomem.local.supervisor import StageProcess
from mongomem.models import Role
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, ExtractionSettings, Settings
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply

pytestmark = pytest.mark.integration

NO_TRACING = RunConfig(tracing_disabled=True)  # nothing leaves the machine


class ScriptedModel(Model):
    """Answers each call with the next output of its script (a test double, NOT a model);
    keeps every input it was given."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = script
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def say(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(name: str, arguments: dict[str, Any], n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{n}",
        call_id=f"call_{n}",
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


@function_tool
def airport_code(city: str) -> str:
    """The main airport code of a city."""
    return {"Boston": "BOS"}.get(city, "unknown")


def scripted_extraction(request: ChatRequest) -> Reply:
    """Scripted: the user's turn naming their home airport is a fact, citing that turn's
    seq (an uncited item is dropped, SPEC L4)."""
    if request.schema_name != "extract_semantic":
        return Answer({"items": []})
    stated = [
        t["seq"]
        for t in read_turns(request.text("user"))
        if t["role"] == "user" and "home airport is Boston" in t["content"]
    ]
    if not stated:
        return Answer({"items": []})
    fact = "The user's home airport is Boston (BOS)."
    return Answer({"items": [{"label": "home-airport", "fact": fact, "seqs": stated}]})


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted_extraction) as server:
        yield server


TYPES = ("semantic",)


@pytest.fixture
async def pipeline(
    subprocess_env: dict[str, str], tmp_path: Path, llm: FakeOpenAIServer
) -> AsyncIterator[StageProcess]:
    env = {
        **subprocess_env,
        "MONGOMEM_LLM_BASE_URL": llm.base_url,
        "MONGOMEM_LLM_API_KEY": "fake",
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_ENABLED_EXTRACTIONS": ",".join(TYPES),
        "MONGOMEM_WINDOW_MAX_MESSAGES": "50",
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
        "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.5",
    }
    stage = StageProcess(name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env)
    await asyncio.to_thread(stage.start)
    try:
        yield stage
    finally:
        await asyncio.to_thread(stage.stop)


def configured(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "embedding": EmbeddingSettings(provider="stand-in"),
            "extraction": ExtractionSettings(enabled=TYPES),
        }
    )


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="agents", settings=configured(settings)) as m:
        yield m


async def test_two_runs_of_one_conversation_and_what_memory_learned(
    memory: AsyncMemory, pipeline: StageProcess
) -> None:
    model = ScriptedModel(
        [
            [call("airport_code", {"city": "Boston"}, 1)],
            [say("Noted: you fly from Boston (BOS).", 2)],
            [say("From Boston, BOS.", 3)],
        ]
    )
    agent = Agent(
        name="travel", instructions="Help the traveller.", model=model, tools=[airport_code]
    )
    session = MongomemSession(memory, user_id="user_1", session_id="thread_1")
    typed: Session = session  # it is the Agents SDK's Session protocol
    assert isinstance(typed, Session)

    first = await Runner.run(
        agent, "My home airport is Boston.", session=session, run_config=NO_TRACING
    )
    assert first.final_output == "Noted: you fly from Boston (BOS)."
    second = await Runner.run(agent, "Where do I fly from?", session=session, run_config=NO_TRACING)
    assert second.final_output == "From Boston, BOS."

    # the second run saw the first's items: the user's words, the tool call and its output
    seen = model.inputs[2]
    assert seen[0] == {"content": "My home airport is Boston.", "role": "user"}
    kinds = [i.get("type", "message") for i in seen]
    assert kinds[:5] == ["message", "function_call", "function_call_output", "message", "message"]
    assert seen[1]["call_id"] == "call_1"
    assert seen[2]["output"] == "BOS"
    assert seen[-1]["content"] == "Where do I fly from?"

    # a new session object on the same conversation reads the same items, losslessly
    again = MongomemSession(memory, user_id="user_1", session_id="thread_1")
    items = await again.get_items()
    assert items == await session.get_items()
    assert len(items) == 6
    assert await again.get_items(limit=2) == items[-2:]

    # they are turns of short-term memory, with roles; then the pipeline extracts from them
    chat = memory.bind(MemoryRequestContext(user_id="user_1", session_id="thread_1"))
    turns = await chat.recent_turns()
    assert [t.role for t in turns] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert turns[1].content == 'airport_code({"city": "Boston"})'
    await session.end_session()
    try:
        await chat.wait_until_processed(120, all_turns=True)
    finally:  # a pipeline that died says why (not only that nothing was processed)
        assert pipeline.alive(), pipeline.log_file.read_text(errors="replace")[-2000:]
    fact = await chat.get_semantic("home-airport")
    assert fact is not None
    assert "Boston" in fact.text


async def test_pop_and_clear(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    async with AsyncMemory(
        project_id="agents", settings=settings, embedder=HashingEmbedder(64)
    ) as memory:
        session = MongomemSession(memory, user_id="u", session_id="s")
        assert await session.pop_item() is None
        first: Any = {"role": "user", "content": "I like window seats."}
        second: Any = {"role": "assistant", "content": "Noted."}
        await session.add_items([first, second])
        assert await session.pop_item() == second
        assert await session.get_items() == [first]
        more: Any = {"role": "user", "content": "And aisle on long flights."}
        await session.add_items([more])
        items: list[Any] = await session.get_items()
        assert [i["content"] for i in items] == [
            "I like window seats.",
            "And aisle on long flights.",
        ]

        await session.clear_session()
        assert await session.get_items() == []
        hello: Any = {"role": "user", "content": "Hello again."}
        await session.add_items([hello])  # still usable
        assert await session.get_items() == [hello]
        # not an erasure: short-term memory keeps what was said, and the markers
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id="s"))
        contents = [t.content for t in await chat.recent_turns()]
        assert "I like window seats." in contents
        assert "Noted." in contents  # withdrawn, not rewritten

        # an item that is not JSON or has no role mapping stores nothing
        before = len(await chat.recent_turns())
        bad: Any = [{"role": "user", "content": "ok"}, {"x": object()}]
        critic: Any = {"role": "critic", "content": "hm"}
        with pytest.raises(InputError):
            await session.add_items(bad)
        with pytest.raises(InputError, match="role"):
            turn_of(critic)
        assert len(await chat.recent_turns()) == before
