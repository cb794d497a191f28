"""Hybrid memory search, turn search and build_context(include_turns=) on the real
MongoDB-compatible server, directly and over HTTP (SPEC M1, M2)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import call, serving, start

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import TURN_VECTORS, Document
from mongomem.errors import InputError
from mongomem.ranking import MAX_QUERY_CHARS
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "recall-env-key-0123456789abcdef"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


class CountingEmbedder(HashingEmbedder):
    """The hashing stand-in (not a model), counting the texts it embeds for storage."""

    def __init__(self) -> None:
        super().__init__(64)
        self.embedded = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return await super().embed(texts)

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return await super().embed(texts)  # queries are not counted


@pytest.fixture
async def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document], embedder: CountingEmbedder
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="recall", settings=settings, embedder=embedder) as m:
        yield m


def ctx(user: str, session: str) -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


async def _conversation(memory: AsyncMemory, user: str = "ana") -> None:
    """Two sessions between Ana (user) and Ben (assistant), a week apart."""
    sessions = {
        "s1": [
            ("user", "Ana", "We finally adopted a greyhound called Pixel."),
            ("assistant", "Ben", "Congratulations! How old is the dog?"),
            ("user", "Ana", "She is three and loves the beach."),
        ],
        "s2": [
            ("user", "Ana", "I start the pottery class on Thursday."),
            ("assistant", "Ben", "I booked the kiln workshop in Lisbon for us."),
            ("user", "Ana", "Great, Lisbon in June then."),
        ],
    }
    for day, (session, turns) in enumerate(sessions.items()):
        chat = memory.bind(ctx(user, session))
        for i, (role, speaker, text) in enumerate(turns):
            at = T0 + timedelta(days=7 * day, minutes=i)
            await chat.record_turn(role, text, {"speaker": speaker}, at=at)


async def test_memory_search_is_hybrid_and_follows_updates_and_deletes(
    memory: AsyncMemory,
) -> None:
    chat = memory.bind(ctx("ana", "s1"))
    await chat.save_semantic("pet", "The user has a greyhound called Pixel.")
    await chat.save_semantic("hobby", "The user takes pottery classes.")
    await chat.save_semantic("city", "The user wants to visit Lisbon in June.")
    hits = await chat.search_semantic("Pixel", limit=3)
    assert hits[0].memory.label == "pet"
    assert hits[0].ranks is not None
    assert hits[0].ranks.lexical_rank == 1
    assert hits[0].ranks.fused_rank == 1
    assert [h.ranks.fused_rank for h in hits if h.ranks] == list(range(1, len(hits) + 1))
    # an update replaces the words the index holds
    await chat.save_semantic("pet", "The user has a cat called Mochi now.")
    after = await chat.search_semantic("Mochi", limit=3)
    assert after[0].memory.label == "pet"
    assert after[0].ranks is not None
    assert after[0].ranks.lexical_rank == 1
    stale = await chat.search_semantic("greyhound Pixel", limit=3)
    assert all(h.ranks is None or h.ranks.lexical_rank is None for h in stale)
    # a delete is gone from the lexical side too
    await chat.delete_semantic("hobby")
    gone = await chat.search_semantic("pottery", limit=3)
    assert all(h.memory.label != "hobby" for h in gone)


async def test_memory_search_refuses_a_query_over_the_cap(memory: AsyncMemory) -> None:
    chat = memory.bind(ctx("ana", "s1"))
    with pytest.raises(InputError) as err:
        await chat.search_semantic("x" * (MAX_QUERY_CHARS + 1))
    assert err.value.field == "query"


async def test_turn_search_over_every_session_with_filters_and_neighbours(
    memory: AsyncMemory,
) -> None:
    await _conversation(memory)
    chat = memory.bind(ctx("ana", "s3"))  # a third session: search still sees s1 and s2
    hits = await chat.search_turns("kiln workshop", limit=3)
    assert hits[0].turn.content.startswith("I booked the kiln")
    assert hits[0].session_id == "s2"
    assert hits[0].created_at == T0 + timedelta(days=7, minutes=1)
    assert hits[0].ranks.lexical_rank == 1
    assert hits[0].neighbours == ()
    only_s1 = await chat.search_turns("Lisbon dog", limit=10, sessions=["s1"])
    assert only_s1
    assert {h.session_id for h in only_s1} == {"s1"}
    bens = await chat.search_turns("Lisbon", limit=10, speaker="ben")
    assert bens
    assert {h.turn.metadata["speaker"] for h in bens} == {"Ben"}
    later = await chat.search_turns("Lisbon", limit=10, since=T0 + timedelta(days=1))
    assert later
    assert all(h.created_at >= T0 + timedelta(days=1) for h in later)
    early = await chat.search_turns("Lisbon", limit=10, until=T0 + timedelta(days=1))
    assert all(h.session_id == "s1" for h in early)
    [hit] = await chat.search_turns("kiln workshop", limit=1, neighbours=1)
    assert [t.seq for t in hit.neighbours] == [1, 3]


async def test_turn_embeddings_are_made_once_stored_and_erased_by_lineage(
    memory: AsyncMemory,
    embedder: CountingEmbedder,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
) -> None:
    await _conversation(memory)
    assert embedder.embedded == 0  # record_turn embeds nothing
    chat = memory.bind(ctx("ana", "s1"))
    await chat.search_turns("pottery")
    assert embedder.embedded == 6
    db = mongo[settings.mongodb.database]
    assert await db[TURN_VECTORS].count_documents({"user_id": "ana"}) == 6
    await chat.record_turn("user", "Pixel chewed my sandals.", {"speaker": "Ana"})
    [hit] = await chat.search_turns("sandals", limit=1)
    assert hit.turn.content == "Pixel chewed my sandals."
    assert embedder.embedded == 7  # only the new turn
    # another process (a fresh client) reads the stored vectors instead of embedding
    other = CountingEmbedder()
    async with AsyncMemory(project_id="recall", settings=settings, embedder=other) as fresh:
        found = await fresh.bind(ctx("ana", "s1")).search_turns("sandals", limit=1)
        assert found[0].turn.content == "Pixel chewed my sandals."
        assert other.embedded == 0
    await memory.erase_session("ana", "s2", confirm=True)
    assert await db[TURN_VECTORS].count_documents({"session_id": "s2"}) == 0
    assert await db[TURN_VECTORS].count_documents({"session_id": "s1"}) == 4
    left = await chat.search_turns("kiln workshop Lisbon", limit=10)
    assert all(h.session_id != "s2" for h in left)


async def test_build_context_adds_dated_turns_within_its_budget(memory: AsyncMemory) -> None:
    await _conversation(memory)
    chat = memory.bind(ctx("ana", "s1"))
    await chat.save_semantic("city", "The user wants to visit Lisbon in June.")
    context = await chat.build_context("kiln workshop", include_turns=2)
    turns = [i for i in context.items if i.memory_type == "turn"]
    assert turns
    assert "2024-05-08" in turns[0].key
    assert "## From the conversation" in context.text
    assert "I booked the kiln workshop" in context.text
    small = await chat.build_context("kiln workshop", include_turns=2, max_chars=120)
    assert len(small.text) <= 120
    without = await chat.build_context("kiln workshop")
    assert all(i.memory_type != "turn" for i in without.items)
    with pytest.raises(InputError):
        await chat.build_context("kiln", include_turns=-1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "x", "since": T0 + timedelta(days=1), "until": T0}, "since"),
        ({"query": "x", "limit": 0}, "limit"),
    ],
)
async def test_turn_search_bad_input(
    memory: AsyncMemory, kwargs: dict[str, Any], field: str, embedder: CountingEmbedder
) -> None:
    chat = memory.bind(ctx("ana", "s1"))
    with pytest.raises(InputError) as err:
        await chat.search_turns(**kwargs)
    assert err.value.field == field
    assert embedder.embedded == 0


async def test_turn_search_over_http_and_its_422s(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    served = serving(settings, api_keys=(SecretStr(f"recall:{KEY}"),))
    runner, url = await start(served)
    try:
        async with AsyncMemory(project_id="recall", base_url=url, api_key=KEY) as remote:
            await _conversation(remote)
            chat = remote.bind(ctx("ana", "s1"))
            hits = await chat.search_turns("kiln workshop", limit=2, neighbours=1)
            assert hits[0].session_id == "s2"
            assert hits[0].ranks.fused_rank == 1
            assert [t.seq for t in hits[0].neighbours] == [1, 3]
            with pytest.raises(InputError):
                await chat.search_turns("x", since=T0 + timedelta(days=1), until=T0)
            context = await chat.build_context("kiln workshop", include_turns=1)
            assert any(i.memory_type == "turn" for i in context.items)
        caller: dict[str, Any] = {"project_id": "recall", "user_id": "ana"}
        bad: list[dict[str, Any]] = [
            caller | {"query": "x" * (MAX_QUERY_CHARS + 1)},
            caller | {"query": "x", "mood": "happy"},  # an unknown filter
            caller
            | {"query": "x", "since": "2024-05-02T00:00:00Z", "until": "2024-05-01T00:00:00Z"},
            caller | {"query": "x", "limit": 1000},
        ]
        for body in bad:
            answer = await call(url, "search_turns", body, KEY)
            assert answer.status_code == 422, (body, answer.text)
        ok = await call(url, "search_turns", caller | {"query": "pottery"}, KEY)
        assert ok.status_code == 200
        assert ok.json()["result"][0]["ranks"]["fused_rank"] == 1
        long_search = caller | {"memory_type": "semantic", "query": "x" * (MAX_QUERY_CHARS + 1)}
        assert (await call(url, "search", long_search, KEY)).status_code == 422
    finally:
        await runner.stop()


async def test_eval_retrieval_only_reports_recall_without_an_llm(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    data = Path(__file__).parent.parent / "data" / "eval" / "locomo_tiny.json"
    env = subprocess_env | {
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1",  # never asked: no LLM is needed
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mongomem.cli",
        "eval",
        "locomo",
        "--data",
        str(data),
        "--retrieval-only",
        "--out",
        str(tmp_path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    assert "recall@10" in out.decode()
    report = json.loads((tmp_path / "retrieval.json").read_text())
    every = report["categories"]["all"]
    assert every["questions"] == 5  # the adversarial question is left out
    assert 0.0 < every["recall@20"] <= 1.0
    assert every["mrr"] is not None
    assert "NOT a model" in report["embedder"]  # the stand-in says so
    rows = [
        json.loads(x) for x in (tmp_path / "retrieval-questions.jsonl").read_text().splitlines()
    ]
    first = next(r for r in rows if r["id"] == "tiny-1/q0")
    assert first["gold"] == ["D1:1"]
    assert all(d is None or d.startswith("D") for r in rows for d in r["found"])
    assert "| all | 5 |" in (tmp_path / "retrieval.md").read_text()


async def test_without_atlas_search_the_probe_says_no_and_search_stays_in_process(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    from mongomem.ltm import ExactCosineSearch, MemoryStore
    from mongomem.ltm.search import probe_text_search, text_index_definition

    db = mongo[settings.mongodb.database]
    assert await probe_text_search(db["memories"]) is False
    store = MemoryStore(db)
    await store.setup()
    assert isinstance(store.search_backend, ExactCosineSearch)
    fields = text_index_definition()["mappings"]["fields"]
    assert fields["text"]["type"] == "string"
