"""A request whose client gave up, or whose deadline passed, stores nothing (issue 17).

Real servers: the service on uvicorn in this process, the MongoDB-compatible
server. "The embedder is busy" is made deterministic with a gated fake in
front of the stand-in embedder (hashing, NOT a model): its first call waits
until the test opens the gate, so a second save queues behind it for as long
as the test wants. Nothing here waits for a time to pass: the waits are for
conditions (a job queued, a job dropped), bounded so a failure cannot hang.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import serving

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import MEMORIES, TURNS, Document
from mongomem.service.app import make_app
from mongomem.service.http import RunningServer, start_server
from mongomem.service.scheduling import FairEmbedder
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY_A = "deadline-tenant-a-0123456789abcdef"
KEY_B = "deadline-tenant-b-0123456789abcdef"
SAVE = "/v1/users/u1/memories/semantic"


class GatedEmbedder:
    """The hashing stand-in (NOT a model) whose first call waits for :attr:`gate`."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.gate = asyncio.Event()
        self.busy = asyncio.Event()
        self.texts: list[str] = []

    @property
    def name(self) -> str:
        return "stand-in:gated-hashing-64 (NOT a model)"

    @property
    def dimensions(self) -> int:
        return 64

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        if not self.busy.is_set():
            self.busy.set()
            await self.gate.wait()
        return await self.inner.embed(texts)


async def until(condition: object, what: str) -> None:
    """Wait (bounded) until ``condition()`` holds; no assertion on how long it took."""
    for _ in range(3000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
async def served(
    settings: Settings,
) -> AsyncIterator[tuple[str, GatedEmbedder, FairEmbedder, RunningServer]]:
    gated = GatedEmbedder()
    fair = FairEmbedder(gated)
    keys = (SecretStr(f"alpha:{KEY_A}"), SecretStr(f"beta:{KEY_B}"))
    app = make_app(serving(settings, api_keys=keys, request_deadline_s=None), embedder=fair)
    running = await start_server(app)
    try:
        yield running.url, gated, fair, running
    finally:
        gated.gate.set()
        await running.stop()


async def stored_texts(mongo: AsyncMongoClient[Document], settings: Settings) -> list[str]:
    docs = await mongo[settings.mongodb.database][MEMORIES].find({}, {"text": 1}).to_list()
    return sorted(str(d.get("text")) for d in docs)


def raw_save(base: str, key: str, text: str) -> bytes:
    host = base.removeprefix("http://")
    body = json.dumps({"fields": {"label": "note", "text": text}}).encode()
    return (
        f"POST {SAVE}?session_id=s1 HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_a_save_whose_client_closed_the_socket_is_not_embedded_nor_stored(
    served: tuple[str, GatedEmbedder, FairEmbedder, RunningServer],
    mongo: AsyncMongoClient[Document],
    settings: Settings,
) -> None:
    base, gated, fair, _ = served
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        first = asyncio.create_task(
            client.post(
                SAVE,
                params={"session_id": "s1"},
                headers={"Authorization": f"Bearer {KEY_A}"},
                json={"fields": {"label": "seat", "text": "the user prefers aisle seats"}},
            )
        )
        await until(gated.busy.is_set, "the embedder is busy with tenant A's save")
        host, port = base.removeprefix("http://").split(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(raw_save(base, KEY_B, "the client of this save gave up"))
        await writer.drain()
        await until(lambda: fair.stored.queued == 1, "tenant B's save is queued")
        writer.close()  # the client gives up before the answer
        await writer.wait_closed()
        await until(lambda: fair.stored.queued == 0, "the abandoned save left the queue")
        gated.gate.set()  # the embedder is free again
        answer = await first
    assert answer.status_code == 200, answer.text
    assert "the client of this save gave up" not in " ".join(gated.texts)  # never embedded
    assert await stored_texts(mongo, settings) == ["the user prefers aisle seats"]


async def test_a_save_past_its_deadline_answers_503_and_stores_nothing(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    gated = GatedEmbedder()
    keys = (SecretStr(f"alpha:{KEY_A}"), SecretStr(f"beta:{KEY_B}"))
    app = make_app(serving(settings, api_keys=keys, request_deadline_s=0.5), embedder=gated)
    running = await start_server(app)
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=60) as client:
            late = await client.post(  # the embedder stays busy until this is answered
                SAVE,
                params={"session_id": "s1"},
                headers={"Authorization": f"Bearer {KEY_B}"},
                json={"fields": {"label": "late", "text": "this save runs out of time"}},
            )
            assert late.status_code == 503, late.text
            assert late.headers["Retry-After"] == "1"
            assert late.json()["error"]["type"] == "DeadlineExceeded"
            gated.gate.set()
            quick = await client.post(
                SAVE,
                params={"session_id": "s1"},
                headers={"Authorization": f"Bearer {KEY_A}"},
                json={"fields": {"label": "seat", "text": "the user prefers aisle seats"}},
            )
            assert quick.status_code == 200, quick.text
    finally:
        gated.gate.set()
        await running.stop()
    assert await stored_texts(mongo, settings) == ["the user prefers aisle seats"]


async def test_nothing_is_written_once_the_deadline_has_passed(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """A deadline of a microsecond has passed before any write: every writer refuses."""
    keys = (SecretStr(f"alpha:{KEY_A}"),)
    served = serving(settings, api_keys=keys, request_deadline_s=1e-6)
    running = await start_server(make_app(served, embedder=HashingEmbedder(64)))
    auth = {"Authorization": f"Bearer {KEY_A}"}
    try:
        async with httpx.AsyncClient(base_url=running.url, headers=auth, timeout=60) as client:
            answers = [
                await client.post(
                    "/v1/users/u1/sessions/s1/turns", json={"role": "user", "content": "hello"}
                ),
                await client.post("/v1/users/u1/sessions/s1/end"),
                await client.post(
                    SAVE,
                    params={"session_id": "s1"},
                    json={"fields": {"label": "l", "text": "a late save"}},
                ),
            ]
            health = await client.get("/healthz")
    finally:
        await running.stop()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "DeadlineExceeded"
    assert health.status_code == 200  # nothing to write: a deadline changes nothing there
    db = mongo[settings.mongodb.database]
    assert await db[TURNS].count_documents({}) == 0
    assert await db[MEMORIES].count_documents({}) == 0
