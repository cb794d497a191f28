"""Historical import (SPEC J7): turns recorded with their own past times, on the real
servers — the STM's checks, over HTTP too, and windowing by those times through a
running pipeline (`mongomem run all`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient
from service_http import call, start
from test_service import KEY_A, with_keys

from mongomem.adapters.mongo import SNAPSHOTS, TURNS, Document, database
from mongomem.errors import InputError
from mongomem.local.supervisor import StageProcess
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.stm.turns import FUTURE_SKEW_S
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.integration

OLD = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)


async def turns(mongo: AsyncMongoClient[Document], settings: Settings) -> int:
    return await database(mongo, settings.mongodb)[TURNS].count_documents({})


async def test_turns_keep_their_own_times_and_bad_times_store_nothing(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    settings = settings.model_copy(update={"embedding": EmbeddingSettings(provider="stand-in")})
    async with AsyncMemory(project_id="travel", settings=settings) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id="old"))
        first = await chat.record_turn(
            "user", "Hello from 2024.", at=OLD + timedelta(microseconds=1500)
        )
        assert first.created_at == OLD + timedelta(milliseconds=1)  # milliseconds, as BSON
        assert first.recorded_at is not None
        assert first.recorded_at > OLD + timedelta(days=300)
        paris = timezone(timedelta(hours=1))
        same = await chat.record_turn(
            "assistant", "Same moment.", at=(OLD + timedelta(milliseconds=1)).astimezone(paris)
        )
        assert same.created_at == first.created_at  # equal times are in order; stored as UTC
        assert same.created_at.utcoffset() == timedelta(0)
        stored = await chat.recent_turns()
        assert stored == [first, same]

        before = await turns(mongo, settings)
        cases = {
            "naive": OLD.replace(tzinfo=None),
            "in the future": datetime.now(UTC) + timedelta(seconds=FUTURE_SKEW_S + 60),
            "earlier than the previous turn": OLD - timedelta(seconds=1),
        }
        for what, at in cases.items():
            with pytest.raises(InputError) as bad:
                await chat.record_turn("user", what, at=at)
            assert bad.value.field == "at", what
        with pytest.raises(InputError) as bad:
            await chat.record_turn("user", "not a time", at="2024-03-01")  # type: ignore[arg-type]
        assert bad.value.field == "at"
        assert await turns(mongo, settings) == before
        # within the clock-skew allowance, and a live turn after historical ones
        await chat.record_turn("user", "skewed", at=datetime.now(UTC) + timedelta(seconds=1))
        live = await chat.record_turn("assistant", "now")
        assert live.recorded_at is None
        assert [t.seq for t in await chat.recent_turns()] == [1, 2, 3, 4]
        with pytest.raises(InputError, match="earlier than the session's previous turn"):
            await chat.record_turn("user", "too late to be old", at=OLD)

        # another process (no cached last turn) checks the order from MongoDB
        with Memory(project_id="travel", settings=settings) as other:
            again = other.bind(MemoryRequestContext(user_id="u", session_id="old"))
            with pytest.raises(InputError) as bad:
                again.record_turn("user", "old again", at=OLD)
            assert bad.value.field == "at"
        assert await turns(mongo, settings) == before + 2


async def test_historical_turns_over_http(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, url = await start(with_keys(settings))
    try:
        async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote:
            chat = remote.bind(MemoryRequestContext(user_id="u", session_id="http-old"))
            turn = await chat.record_turn("user", "Old, over HTTP.", at=OLD)
            assert turn.created_at == OLD
            assert turn.recorded_at is not None
            with pytest.raises(InputError) as bad:
                await chat.record_turn("user", "naive", at=OLD.replace(tzinfo=None))
            assert bad.value.field == "at"
            with pytest.raises(InputError) as bad:
                await chat.record_turn("user", "out of order", at=OLD - timedelta(days=1))
            assert bad.value.field == "at"
        before = await turns(mongo, settings)
        body = {
            "project_id": "travel",
            "user_id": "u",
            "session_id": "http-old",
            "role": "user",
            "content": "naive",
            "at": "2024-03-02T00:00:00",
        }
        answer = await call(url, "record_turn", body, KEY_A)
        assert answer.status_code == 422
        assert answer.json()["error"]["field"] == "at"
        assert await turns(mongo, settings) == before
    finally:
        await runner.stop()


async def test_an_old_conversation_windows_by_its_own_times(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Own pauses of a minute split it (idle timeout 5 s); the wall-clock ticks, every
    0.2 s while it is imported, do not; the last window closes 5 s after the import."""
    with stand_in_llm() as llm:
        env = {
            **subprocess_env,
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": "stand-in",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_WINDOW_MAX_MESSAGES": "50",
            "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "5",
            "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.2",
            "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.2",
        }
        stage = StageProcess(
            name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env
        )
        await asyncio.to_thread(stage.start)
        with_embedder = settings.model_copy(
            update={"embedding": EmbeddingSettings(provider="stand-in")}
        )
        try:
            async with AsyncMemory(project_id="p", settings=with_embedder) as memory:
                chat = memory.bind(MemoryRequestContext(user_id="u", session_id="2024"))
                # seconds after OLD: two runs a minute apart, each turn a second apart
                times = [0, 1, 2, 3, 63, 64, 65]
                for i, second in enumerate(times):
                    role = "user" if i % 2 == 0 else "assistant"
                    at = OLD + timedelta(seconds=second)
                    await chat.record_turn(role, f"turn {i + 1}", at=at)
                    await asyncio.sleep(0.15)  # ticks come in between

                snapshots = database(mongo, settings.mongodb)[SNAPSHOTS]
                for _ in range(600):
                    found = await snapshots.find({"session_id": "2024"}).sort("first_seq").to_list()
                    if sum(len(s["turns"]) for s in found) == len(times):
                        break
                    assert stage.process is not None
                    assert stage.process.poll() is None, stage.log_file.read_text()[-3000:]
                    await asyncio.sleep(0.1)
            assert [(s["first_seq"], s["last_seq"], s["reason"]) for s in found] == [
                (1, 4, "idle"),
                (5, 7, "idle"),
            ]
            # an idle close is dated last turn + idle timeout (turn 4 at 3 s, idle 5 s)
            assert found[0]["closed_at"] == OLD + timedelta(seconds=3 + 5)
            own = [t["created_at"] for s in found for t in s["turns"]]
            assert own == [OLD + timedelta(seconds=s) for s in times]
        finally:
            await asyncio.to_thread(stage.stop)
