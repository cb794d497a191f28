"""A direct save's judge calls are accounted like the reconciler's (issue 24, SPEC I5):
an SDK given an LLM judge, and the service's direct save path, record each judge request
the endpoint received exactly once in ``llm_usage``, with purpose ``judge``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.llm import OpenAILLM
from mongomem.adapters.mongo import Document
from mongomem.ltm import LLMJudge
from mongomem.models import Action
from mongomem.operations.usage import LLM_USAGE
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.service.app import make_app
from mongomem.service.http import start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings
from mongomem.testing import Answer, FakeOpenAIServer

pytestmark = pytest.mark.integration

KEY = "travel-env-key-0123456789abcdef"
EMBEDDER = HashingEmbedder(64)
CALLER = MemoryRequestContext(user_id="ana", session_id="s1")


@pytest.fixture
def judge_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        server.script(Answer({"action": "UPDATE", "reason": "the airport changed"}))
        yield server


async def _judge_calls(mongo: AsyncMongoClient[Document], settings: Settings) -> list[Document]:
    usage = mongo[settings.mongodb.database][LLM_USAGE]
    return await usage.find({"kind": "call"}).to_list()


def _check(calls: list[Document], server: FakeOpenAIServer) -> None:
    received = server.chat_requests
    assert [r.schema_name for r in received] == ["reconcile_verdict"]
    assert [d["_id"] for d in calls] == [r.call_id for r in received]  # once, tied by id
    (call,) = calls
    assert (call["purpose"], call["memory_type"], call["project_id"]) == (
        "judge",
        "semantic",
        "travel",
    )
    assert (call["state"], call["outcome"], call["answers"]) == ("finished", "answered", 1)
    assert call["prompt_tokens"] > 0


async def test_an_sdk_direct_save_meters_the_callers_llm_judge(
    settings: Settings, mongo: AsyncMongoClient[Document], judge_server: FakeOpenAIServer
) -> None:
    llm = OpenAILLM(LLMSettings(base_url=judge_server.base_url, api_key=SecretStr("k")))
    judge = LLMJudge(llm)
    try:
        async with AsyncMemory(
            project_id="travel", settings=settings, embedder=EMBEDDER, judge=judge
        ) as memory:
            chat = memory.bind(CALLER)
            await chat.save_semantic("home-airport", "The user's home airport is Boston.")
            saved = await chat.save_semantic("home-airport", "The user's home airport is Denver.")
    finally:
        await llm.close()
    assert saved.action is Action.UPDATE
    assert judge.meter_for is None  # the caller's judge is left as it was given
    _check(await _judge_calls(mongo, settings), judge_server)


async def test_the_services_direct_save_path_meters_its_judge(
    settings: Settings, mongo: AsyncMongoClient[Document], judge_server: FakeOpenAIServer
) -> None:
    served = settings.model_copy(
        update={
            "service": settings.service.model_copy(
                update={"api_keys": (SecretStr(f"travel:{KEY}"),)}
            ),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
        }
    )
    llm = OpenAILLM(LLMSettings(base_url=judge_server.base_url, api_key=SecretStr("k")))
    running = await start_server(make_app(served, embedder=EMBEDDER, judge=LLMJudge(llm)))
    try:
        async with AsyncMemory(project_id="travel", api_key=KEY, base_url=running.url) as memory:
            chat = memory.bind(CALLER)
            await chat.save_semantic("home-airport", "The user's home airport is Boston.")
            saved = await chat.save_semantic("home-airport", "The user's home airport is Denver.")
    finally:
        await running.stop()
        await llm.close()
    assert saved.action is Action.UPDATE
    _check(await _judge_calls(mongo, settings), judge_server)


async def test_erasing_a_user_removes_the_judge_calls_of_their_direct_saves(
    settings: Settings, mongo: AsyncMongoClient[Document], judge_server: FakeOpenAIServer
) -> None:
    judge_server.script(Answer({"action": "UPDATE", "reason": "the airport changed"}))
    llm = OpenAILLM(LLMSettings(base_url=judge_server.base_url, api_key=SecretStr("k")))
    try:
        async with AsyncMemory(
            project_id="travel", settings=settings, embedder=EMBEDDER, judge=LLMJudge(llm)
        ) as memory:
            for user in ("ana", "bo"):
                chat = memory.bind(MemoryRequestContext(user_id=user, session_id="s1"))
                await chat.save_semantic("home-airport", "The user's home airport is Boston.")
                await chat.save_semantic("home-airport", "The user's home airport is Denver.")
            calls = await _judge_calls(mongo, settings)
            assert sorted(d["user_id"] for d in calls) == ["ana", "bo"]  # whose they are
            assert {d["session_id"] for d in calls} == {"s1"}
            await memory.erase_user("ana", confirm=True)
    finally:
        await llm.close()
    assert [d["user_id"] for d in await _judge_calls(mongo, settings)] == ["bo"]
