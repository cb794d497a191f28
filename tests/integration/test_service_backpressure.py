"""Backpressure over HTTP (issue 25): under saturation ``Retry-After`` follows the embedding
queue's expected wait (not a constant 1), and a search query above the cap is 422 before
anything is embedded.

The model is a fake (NOT a model) on a fake clock: each call takes one second of that
clock, so the measured rate is exact; its calls after the first wait on a gate, so the
queue stays as long as the test makes it. Nothing waits for time to pass but the
requests' own deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
from pydantic import SecretStr
from service_http import serving

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.sdk.wire import MAX_QUERY_CHARS
from mongomem.service.app import make_app
from mongomem.service.http import start_server
from mongomem.service.scheduling import FairEmbedder
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "backpressure-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
SAVE = "/v1/users/u1/memories/semantic"


class SlowModel:
    """The hashing stand-in (NOT a model), one fake-clock second a call, gated after one."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.now = 0.0
        self.calls = 0
        self.gate = asyncio.Event()
        self.busy = asyncio.Event()
        self.texts: list[str] = []

    name = "stand-in:slow-hashing-64 (NOT a model)"
    dimensions = 64

    def clock(self) -> float:
        return self.now

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts.extend(texts)
        if self.calls > 1:
            self.busy.set()
            await self.gate.wait()
        self.now += 1.0
        return await self.inner.embed(texts)


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, SlowModel]]:
    model = SlowModel()
    fair = FairEmbedder(model, batch_texts=1, clock=model.clock)
    served = serving(settings, api_keys=(SecretStr(f"travel:{KEY}"),), request_deadline_s=2.0)
    running = await start_server(make_app(served, embedder=fair))
    try:
        async with httpx.AsyncClient(base_url=running.url, headers=AUTH, timeout=30) as c:
            yield c, model
    finally:
        model.gate.set()
        await running.stop()


def note(i: int) -> dict[str, object]:
    return {"fields": {"label": f"note-{i}", "text": f"note number {i:03d}"}}  # one size


async def test_retry_after_follows_the_queues_expected_wait(
    served: tuple[httpx.AsyncClient, SlowModel],
) -> None:
    client, model = served
    warm = await client.post(SAVE, json=note(0))  # one call: 1 fake second for its tokens
    assert warm.status_code == 200, warm.text
    flight = asyncio.create_task(client.post(SAVE, json=note(1)))  # holds the model
    await asyncio.wait_for(model.busy.wait(), timeout=30)
    queued = [asyncio.create_task(client.post(SAVE, json=note(i))) for i in range(2, 6)]
    answers = await asyncio.gather(*queued)
    assert [a.status_code for a in answers] == [503] * 4
    waits = sorted(int(a.headers["Retry-After"]) for a in answers)
    # each dropped job's wait: the jobs still queued behind the one in flight, and itself,
    # at one second a job (the first dropped saw all four; on a loaded machine two may
    # be dropped in one tick, so the others are only bounded)
    assert waits[-1] == 4
    assert all(1 <= w <= 4 for w in waits)
    assert len(set(waits)) >= 2
    assert all(a.json()["error"]["retry_after"] == int(a.headers["Retry-After"]) for a in answers)
    model.gate.set()
    await flight


async def test_a_search_query_above_the_cap_is_422_and_not_embedded(
    served: tuple[httpx.AsyncClient, SlowModel],
) -> None:
    client, model = served
    model.gate.set()
    path = "/v1/users/u1/memories/semantic/search"
    answer = await client.post(path, json={"query": "x" * 1_000_000})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "query"
    answer = await client.post(path, json={"query": "x" * (MAX_QUERY_CHARS + 1)})
    assert answer.status_code == 422, answer.text
    context = await client.post("/v1/users/u1/context", json={"query": "y" * 1_000_000})
    assert context.status_code == 422, context.text
    assert model.texts == []  # nothing was embedded
    ok = await client.post(path, json={"query": "x" * MAX_QUERY_CHARS})
    assert ok.status_code == 200, ok.text
