"""Time-aware turn search on the real MongoDB-compatible server (SPEC M1): ``as_of``
leaves later turns out, and a time expression boosts the turns said in its window."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import call, serving, start

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "recall-time-key-0123456789abcdef"
#: Mondays, a week apart.
WEEKS = [datetime(2024, 5, 6, 18, 0, tzinfo=UTC) + timedelta(weeks=w) for w in range(4)]
SAID = "The weather has been awful lately, rain every single day."


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    # the hashing stand-in embedder (not a model): equal texts have equal vectors
    async with AsyncMemory(
        project_id="recall-time", settings=settings, embedder=HashingEmbedder()
    ) as m:
        yield m


async def _weekly_small_talk(memory: AsyncMemory) -> None:
    """The same sentence in four weekly sessions, with other talk around it."""
    for w, at in enumerate(WEEKS):
        chat = memory.bind(MemoryRequestContext(user_id="ana", session_id=f"w{w}"))
        await chat.record_turn("user", "Pass the salt, please.", {"speaker": "Ana"}, at=at)
        await chat.record_turn("assistant", SAID, {"speaker": "Ben"}, at=at + timedelta(minutes=1))


async def test_a_time_expression_picks_the_session_it_names(memory: AsyncMemory) -> None:
    await _weekly_small_talk(memory)
    chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="now"))
    asked = WEEKS[3] + timedelta(days=2)  # the Wednesday after the last session
    # "two weeks ago" from then: the session of WEEKS[1]
    hits = await chat.search_turns("What was said about the weather two weeks ago?", as_of=asked)
    assert hits[0].session_id == "w1"
    assert hits[0].turn.content == SAID
    assert hits[0].ranks.time_rank == 1
    # "last week": the Monday-to-Sunday before, WEEKS[2]
    [top] = await chat.search_turns("the weather last week", limit=1, as_of=asked)
    assert top.session_id == "w2"
    # no expression: no boost, every copy ties on words and meaning
    plain = await chat.search_turns("the weather", limit=4, as_of=asked)
    assert all(h.ranks.time_rank is None for h in plain)
    assert {h.session_id for h in plain if h.turn.content == SAID} == {"w0", "w1", "w2", "w3"}


async def test_as_of_leaves_later_turns_out(memory: AsyncMemory) -> None:
    await _weekly_small_talk(memory)
    chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="now"))
    hits = await chat.search_turns("the weather", limit=10, as_of=WEEKS[1] + timedelta(hours=1))
    assert {h.session_id for h in hits} == {"w0", "w1"}
    # "yesterday" relative to as_of, not to now: the day before WEEKS[1] had nothing said,
    # so the boost finds nothing and the ranking is the plain one
    none_then = await chat.search_turns(
        "the weather yesterday", limit=10, as_of=WEEKS[1] + timedelta(days=1, hours=1)
    )
    assert {h.session_id for h in none_then} == {"w0", "w1"}
    assert none_then[0].session_id == "w1"  # yesterday from that Tuesday is WEEKS[1]'s Monday
    assert none_then[0].ranks.time_rank == 1


async def test_as_of_over_http_and_a_naive_one_is_422(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    served = serving(settings, api_keys=(SecretStr(f"recall-time:{KEY}"),))
    runner, url = await start(served)
    try:
        async with AsyncMemory(project_id="recall-time", base_url=url, api_key=KEY) as remote:
            await _weekly_small_talk(remote)
            chat = remote.bind(MemoryRequestContext(user_id="ana", session_id="now"))
            asked = WEEKS[3] + timedelta(days=2)
            hits = await chat.search_turns("the weather two weeks ago", as_of=asked)
            assert hits[0].session_id == "w1"
            assert hits[0].ranks.time_rank == 1
        caller = {"project_id": "recall-time", "user_id": "ana", "query": "the weather"}
        naive = await call(url, "search_turns", caller | {"as_of": "2024-05-20T10:00:00"}, KEY)
        assert naive.status_code == 422, naive.text
        ok = await call(url, "search_turns", caller | {"as_of": "2024-05-14T10:00:00Z"}, KEY)
        assert ok.status_code == 200
        assert {h["session_id"] for h in ok.json()["result"]} == {"w0", "w1"}
    finally:
        await runner.stop()


async def test_memory_search_boosts_by_the_time_a_memory_was_said(memory: AsyncMemory) -> None:
    chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="now"))
    await chat.save_semantic("drink", "Ana drinks oat flat whites")
    await chat.save_semantic("sport", "Ana plays tennis on Tuesdays")
    # saved now: "today" is their window, "last year" is not
    today = await chat.search_semantic("what did Ana say about drinks today?", limit=2)
    assert [h.ranks.time_rank for h in today if h.ranks] == [1, 2]
    assert today[0].memory.key == "drink"
    last_year = await chat.search_semantic("what did Ana say about drinks last year?", limit=2)
    assert all(h.ranks is not None and h.ranks.time_rank is None for h in last_year)
    plain = await chat.search_semantic("what does Ana drink?", limit=2)
    assert all(h.ranks is not None and h.ranks.time_rank is None for h in plain)
    # relative to as_of: from tomorrow, "yesterday" is today
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    then = await chat.search_semantic("drinks yesterday", limit=2, as_of=tomorrow)
    assert then
    assert all(h.ranks is not None and h.ranks.time_rank is not None for h in then)
