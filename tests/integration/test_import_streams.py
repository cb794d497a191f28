"""A streamed import over HTTP is bounded in time, and a client that hangs up is no error
(issue 25): a stalled body is refused (408) after the idle timeout, a trickling one after
the total timeout, and a hang-up is logged at INFO and counted as 499 with no traceback.
Nothing of any of them is stored."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import serving, start

from mongomem.adapters.mongo import MEMORIES, Document
from mongomem.ltm.export import IMPORTS
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "streams-env-key-0123456789abcdef"
IMPORT = "/v1/users/{user}/import"
HEADER = (
    b'{"kind": "header", "format": "mongomem.memory-export", "format_version": 1, '
    b'"project_id": "travel", "user_id": "%s", "embedder": null, '
    b'"exported_at": "2026-01-01T00:00:00Z", "mongomem_version": "0"}\n'
)


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    served = serving(
        settings,
        api_keys=(SecretStr(f"travel:{KEY}"),),
        import_idle_timeout_s=0.5,
        import_total_timeout_s=1.5,
    )
    runner, base = await start(served)
    try:
        yield base
    finally:
        await runner.stop()


async def nothing_stored(mongo: AsyncMongoClient[Document], settings: Settings, user: str) -> None:
    db = mongo[settings.mongodb.database]
    assert await db[MEMORIES].count_documents({"scope.user_id": user}) == 0
    jobs = await db[IMPORTS].find({"user_id": user}).to_list()
    assert [j["state"] for j in jobs] == ["rolled_back"]


async def test_a_stalled_import_is_408_after_the_idle_timeout(
    url: str, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    async def stall() -> AsyncIterator[bytes]:
        yield HEADER % b"stalled"
        await asyncio.sleep(3)  # far past the idle timeout: the server gives up first
        yield b""

    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        answer = await c.post(
            IMPORT.format(user="stalled"),
            content=stall(),
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert answer.status_code == 408, answer.text
    assert answer.json()["error"] == {
        "type": "BodyTimeout",
        "message": "the body sent nothing for 0.5 s",
        "retriable": False,
        "field": "body",
    }
    await nothing_stored(mongo, settings, "stalled")


async def test_a_trickling_import_is_408_after_the_total_timeout(
    url: str, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        yield HEADER % b"slow"
        for _ in range(15):  # a blank line every 0.2 s: never idle, done only after 3 s
            await asyncio.sleep(0.2)
            yield b"\n"

    async with httpx.AsyncClient(base_url=url, timeout=10) as c:
        answer = await c.post(
            IMPORT.format(user="slow"),
            content=trickle(),
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert answer.status_code == 408, answer.text
    assert answer.json()["error"]["message"] == "the body took longer than 1.5 s in all"
    await nothing_stored(mongo, settings, "slow")


def hung_up() -> float:
    return (
        REGISTRY.get_sample_value(
            "mongomem_service_requests_total", {"operation": "import_user", "status": "499"}
        )
        or 0.0
    )


async def test_a_client_hanging_up_is_info_and_499_with_no_traceback(
    url: str,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    before = hung_up()
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    first = HEADER % b"gone"
    writer.write(
        b"POST /v1/users/gone/import HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {KEY}\r\n".encode()
        + b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(first):x}\r\n".encode()
        + first
        + b"\r\n"
    )
    await writer.drain()
    await asyncio.sleep(0.2)  # the import has started reading
    writer.close()  # and the client hangs up
    await writer.wait_closed()
    for _ in range(100):
        if hung_up() > before:
            break
        await asyncio.sleep(0.05)
    assert hung_up() == before + 1
    service = [r for r in caplog.records if r.name.startswith("mongomem")]
    assert [r for r in service if r.levelno >= logging.WARNING] == []
    assert [r for r in service if r.exc_info] == []
    assert any("hung up" in r.getMessage() and r.levelno == logging.INFO for r in service)
    await nothing_stored(mongo, settings, "gone")
