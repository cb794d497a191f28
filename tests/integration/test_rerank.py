"""The optional reranker (SPEC M1): off by default; configured, memory and turn search
are reordered by a ``/rerank`` endpoint over real HTTP — here a local stand-in that
prefers the shortest document (NOT a model) — and a failing one leaves the fused order."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.adapters.rerank import HttpReranker, http_reranker, rerank
from mongomem.errors import RerankError
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import RerankSettings, Settings

pytestmark = pytest.mark.integration


@dataclass
class ShortestFirst:
    """A ``/rerank`` stand-in (NOT a model): a document's score is minus its length.
    ``status`` other than 200 answers that status; every request body is kept."""

    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        request = json.loads(await reader.readexactly(length))
        self.requests.append({"path": head.split(b" ")[1].decode(), **request})
        docs = request["documents"]
        body = json.dumps(
            {
                "results": [
                    {"index": i, "relevance_score": -float(len(d))} for i, d in enumerate(docs)
                ]
            }
        ).encode()
        reason = b"OK" if self.status == 200 else b"Failed"
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (self.status, reason, len(body), body)
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def stand_in() -> AsyncIterator[ShortestFirst]:
    served = ShortestFirst()
    server = await asyncio.start_server(served.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    served.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield served
    finally:
        server.close()
        await server.wait_closed()


def test_off_by_default() -> None:
    assert http_reranker(RerankSettings()) is None
    on = http_reranker(RerankSettings(base_url="http://127.0.0.1:9/v1", model="bge"))
    assert isinstance(on, HttpReranker)
    assert on.url == "http://127.0.0.1:9/v1/rerank"


async def test_the_http_reranker_speaks_the_rerank_api(stand_in: ShortestFirst) -> None:
    reranker = HttpReranker(stand_in.url, model="bge-reranker", api_key="k")
    assert await reranker.scores("q", ["three", "a", "xx"]) == [-5.0, -1.0, -2.0]
    [sent] = stand_in.requests
    assert sent == {
        "path": "/v1/rerank",
        "model": "bge-reranker",
        "query": "q",
        "documents": ["three", "a", "xx"],
        "top_n": 3,
    }
    ordered = await rerank(reranker, "q", ["three", "a", "xx"], str)
    assert ordered == [("a", -1.0), ("xx", -2.0), ("three", -5.0)]
    stand_in.status = 500
    with pytest.raises(RerankError, match="answered 500"):
        await reranker.scores("q", ["a"])
    assert await rerank(reranker, "q", ["a", "b"], str) is None  # the caller keeps its order


def _settings(settings: Settings, url: str) -> Settings:
    return settings.model_copy(update={"rerank": RerankSettings(base_url=url, depth=10)})


async def _said(memory: AsyncMemory) -> None:
    chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="s1"))
    for text in [
        "Ana flies from Porto airport on most trips abroad",
        "Porto airport",
        "Ana likes the airport lounge in Porto",
    ]:
        await chat.record_turn("user", text)
        await chat.save_semantic(text[:12].replace(" ", "-"), text)


async def test_search_is_reranked_when_configured_and_survives_a_failing_reranker(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    stand_in: ShortestFirst,
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = HashingEmbedder()  # a stand-in embedder, not a model
    async with AsyncMemory(
        project_id="rerank", settings=_settings(settings, stand_in.url), embedder=embedder
    ) as memory:
        await _said(memory)
        chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="s2"))
        facts = await chat.search_semantic("Porto airport trips", limit=3)
        assert [len(h.memory.text) for h in facts] == sorted(len(h.memory.text) for h in facts)
        assert all(h.ranks is not None and h.ranks.rerank_score is not None for h in facts)
        # the fused order puts the long turn first (it has every word); the stand-in does not
        asked = "Ana flies from Porto airport on most trips abroad"
        turns = await chat.search_turns(asked, limit=2)
        assert [t.turn.content for t in turns] == [
            "Porto airport",
            "Ana likes the airport lounge in Porto",
        ]  # the reranker saw all three (depth 10), the limit cut after it
        assert turns[0].ranks.fused_rank != 1  # it was not first before reranking
        assert turns[0].ranks.rerank_score == -float(len("Porto airport"))
        assert len(stand_in.requests[-1]["documents"]) == 3
        stand_in.status = 503
        with caplog.at_level(logging.WARNING, logger="mongomem.adapters.rerank"):
            fused = await chat.search_turns("Porto airport trips", limit=3)
        assert [t.ranks.fused_rank for t in fused] == [1, 2, 3]
        assert all(t.ranks.rerank_score is None for t in fused)
        assert "reranking skipped" in caplog.text
    # off (the default): no request is made
    before = len(stand_in.requests)
    async with AsyncMemory(project_id="rerank", settings=settings, embedder=embedder) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="ana", session_id="s2"))
        plain = await chat.search_turns("Porto airport trips", limit=3)
        assert [t.ranks.fused_rank for t in plain] == [1, 2, 3]
        assert all(t.ranks.rerank_score is None for t in plain)
    assert len(stand_in.requests) == before
