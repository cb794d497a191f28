"""Per-API-key rate limits of the memory service over real HTTP (SPEC G2).

The service runs on a free loopback port against the test servers, with
environment keys for projects ``travel`` and ``other``; the limit is slow to
refill (0.5 requests/s) so that what the tests send in a burst stays refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import call, serving, start

from mongomem.adapters.mongo import Document
from mongomem.errors import RateLimitExceeded
from mongomem.models import Action
from mongomem.sdk import AsyncMemory, HttpTransport, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY_A = "travel-env-key-0123456789abcdef"
KEY_B = "other-env-key-0123456789abcdef"
ALICE = {"project_id": "travel", "user_id": "alice", "session_id": "s1"}
BOB = {"project_id": "other", "user_id": "bob", "session_id": "s1"}


def limited(settings: Settings, rate: float | None, burst: int = 3) -> Settings:
    keys = (SecretStr(f"travel:{KEY_A}"), SecretStr(f"other:{KEY_B}"))
    return serving(settings, api_keys=keys, rate_limit_per_s=rate, rate_limit_burst=burst)


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    runner, base = await start(limited(settings, rate=0.5, burst=3))
    try:
        yield base
    finally:
        await runner.stop()


async def post(
    client: httpx.AsyncClient, op: str, body: dict[str, Any], key: str | None
) -> httpx.Response:
    return await call(str(client.base_url), op, body, key)


def ctx(user: str) -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id="s1")


async def test_a_burst_beyond_the_limit_answers_429_with_retry_after(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        answers = [await post(client, "list_domains", ALICE, KEY_A) for _ in range(5)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
        refused = answers[3]
        assert refused.headers["Retry-After"] == "2"  # one token at 0.5/s, rounded up
        assert refused.json()["error"] | {"message": ""} == {
            "type": "RateLimitExceeded",
            "message": "",
            "retriable": True,
            "retry_after": 2,
        }
        assert "rate limit" in refused.json()["error"]["message"]

        # the spaces routes share the key's bucket
        spaces = await client.get("/v1/spaces", headers={"Authorization": f"Bearer {KEY_A}"})
        assert spaces.status_code == 429
        assert int(spaces.headers["Retry-After"]) >= 1

        # another key is not affected, on either kind of route
        assert (await post(client, "list_domains", BOB, KEY_B)).status_code == 200
        other = await client.get("/v1/spaces", headers={"Authorization": f"Bearer {KEY_B}"})
        assert other.status_code == 200

        # an unknown or missing key is refused as such, however often it is sent
        for key in ("not-a-key-0123456789abcdef", None) * 3:
            answer = await post(client, "list_domains", ALICE, key)
            assert answer.status_code == 401
            assert "Retry-After" not in answer.headers

        # health, readiness and metrics are never limited
        for _ in range(10):
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            assert (await client.get("/metrics")).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert 'mongomem_service_requests_total{operation="list_domains",status="429"}' in metrics
    assert 'mongomem_service_requests_total{operation="list_spaces",status="429"}' in metrics


async def test_the_sdk_raises_a_retriable_rate_limit_error(url: str) -> None:
    async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as memory:
        chat = memory.bind(ctx("alice"))
        for _ in range(3):
            await chat.list_domains()
        with pytest.raises(RateLimitExceeded) as err:
            await chat.list_domains()
    assert err.value.retriable
    assert err.value.retry_after == 2


async def test_a_keyed_save_retries_after_the_services_retry_after(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, base = await start(limited(settings, rate=1.0, burst=1))
    try:
        # a back-off far shorter than the wait: only Retry-After makes the retry succeed
        transport = HttpTransport(base, api_key=KEY_A, retry_backoff_s=0.01)
        async with AsyncMemory(project_id="travel", transport=transport) as memory:
            chat = memory.bind(ctx("alice"))
            first = await chat.save_semantic("seat", "Aisle.", idempotency_key="seat-1")
            started = time.monotonic()
            again = await chat.save_semantic("seat", "Aisle.", idempotency_key="seat-2")
            waited = time.monotonic() - started
            with pytest.raises(RateLimitExceeded):  # without a key: the caller's to retry
                await chat.save_semantic("seat", "Aisle.")
    finally:
        await runner.stop()
    assert (first.action, again.action) == (Action.ADD, Action.REINFORCE)
    assert waited >= 1.0  # Retry-After: 1, not the 10 ms back-off


async def test_without_a_limit_nothing_is_refused(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, base = await start(limited(settings, rate=None, burst=1))
    try:
        async with httpx.AsyncClient(base_url=base) as client:
            answers = await asyncio.gather(
                *[post(client, "list_domains", ALICE, KEY_A) for _ in range(40)]
            )
            answers += [await post(client, "list_domains", ALICE, KEY_A) for _ in range(10)]
    finally:
        await runner.stop()
    assert {a.status_code for a in answers} == {200}
