"""The memory service against hostile and odd input (SPEC G2, F3; issue: probes that failed).

Each test is one finding of a probe run that used tools the project did not
write: what it sent, and what the service must answer instead of a 500, a
leak or a silent drop. Every answer is checked against MongoDB: nothing of a
refused request is stored. The last test greps every log line and body of a
probe run for the API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import serving, start

from mongomem.adapters.mongo import MEMORIES, Document
from mongomem.ltm.kinds import MAX_FIELD_CHARS
from mongomem.sdk.spaces import HttpSpaces
from mongomem.settings import MongoSettings, Settings

pytestmark = pytest.mark.integration

KEY = "hostile-env-key-0123456789abcdef"
DOMAINS = "/v1/users/user_1/domains"
SAVE = "/v1/users/user_1/memories/semantic"


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    runner, base = await start(serving(settings, api_keys=(SecretStr(f"travel:{KEY}"),)))
    try:
        yield base
    finally:
        await runner.stop()


async def stored(mongo: AsyncMongoClient[Document], settings: Settings) -> int:
    return await mongo[settings.mongodb.database][MEMORIES].count_documents({})


def save(fields: dict[str, Any]) -> dict[str, Any]:
    return {"fields": fields}


async def raw_request(base: str, request: bytes) -> bytes:
    """Send bytes httpx would refuse to send (HTTP/1.0: the server closes); the answer."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):  # the server may have cut it off first
            await writer.wait_closed()


@pytest.mark.parametrize("token", ["‹é…›".encode(), b"\xff\xfe", "ключ".encode()])
async def test_a_non_ascii_or_binary_bearer_token_is_401(url: str, token: bytes) -> None:
    """It was a 500 (UnicodeEncodeError while hashing the key), with no valid key at all."""
    answer = await raw_request(
        url,
        b"GET /v1/users/u/domains HTTP/1.0\r\nHost: x\r\n"
        b"Authorization: Bearer " + token + b"\r\nConnection: close\r\n\r\n",
    )
    assert answer.split(b" ", 2)[1] == b"401", answer[:200]


@pytest.mark.parametrize(
    "header",
    [
        b"Authorization: Bearer " + KEY.encode() + b"\x00",  # a NUL after the key
        b"Authorization: Bearer " + KEY.encode() + b"\x01\x7f",
        b"Authorization: Bearer " + KEY.encode() + b"x" * 70_000,  # an over-long header
    ],
)
async def test_a_malformed_credential_header_is_refused_without_echoing_it(
    url: str, header: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A header ending in NUL got a 400 whose body echoed the whole key, logged at ERROR."""
    caplog.set_level(logging.DEBUG)
    answer = await raw_request(
        url, b"GET /v1/users/u/domains HTTP/1.0\r\nHost: x\r\n" + header + b"\r\n\r\n"
    )
    status = answer.split(b" ", 2)[1] if answer else b""
    assert status in (b"400", b"401", b"431", b""), answer[:200]  # refused (or cut off)
    assert KEY.encode() not in answer
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"lable": "typo", "text": "The user likes tea."}, "fields.lable"),
        ({"label": "home-airport", "text": "Boston", "extra": "x"}, "fields.extra"),
        ({"label": "lab\x00el", "text": "The user likes tea."}, "label"),
        ({"label": "\x1b[31mred\x1b[0m", "text": "The user likes tea."}, "label"),
        ({"label": "tea", "text": "likes \x07 tea"}, "text"),
        ({"label": "tea", "text": "x" * (MAX_FIELD_CHARS + 1)}, "text"),
    ],
)
async def test_bad_fields_are_422_naming_the_field_and_store_nothing(
    url: str,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    fields: dict[str, Any],
    field: str,
) -> None:
    """Unknown fields were dropped (a memory without its label); keys took control bytes."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        answer = await c.post(SAVE, json=save(fields))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert await stored(mongo, settings) == 0


async def test_a_text_with_newlines_and_tabs_is_still_a_memory(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        answer = await c.post(
            SAVE, json=save({"label": "trip", "text": "Day 1:\tLisbon\nDay 2:\tPorto"})
        )
    assert answer.status_code == 200, answer.text


async def test_a_wrong_method_is_405_with_allow(url: str) -> None:
    """The error middleware rebuilt the answer and dropped the Allow header."""
    async with httpx.AsyncClient(base_url=url) as c:
        answer = await c.delete(SAVE)
    assert answer.status_code == 405
    assert set(answer.headers["Allow"].split(", ")) == {"GET", "POST"}


async def test_spaces_odd_input_is_4xx(
    url: str, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as c:
        refused = await c.post(
            "/v1/spaces", json={"space_id": "vault", "keys": [{"argument": "q"}], "encrypted": True}
        )
        # was a 500; well formed, refused by the deployment (no key): a StateConflict
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["field"] == "encrypted"
        keys = [{"argument": "q"}]
        created = await c.post("/v1/spaces", json={"space_id": "cases", "keys": keys})
        assert created.status_code == 201, created.text
        deep: Any = "bottom"
        for _ in range(100):
            deep = {"d": deep}
        nested = await c.post(
            "/v1/spaces/cases/items", json={"inputs": {"q": "refund"}, "outputs": deep}
        )
        assert nested.status_code == 422, nested.text  # outputs nested 100 deep were stored
        assert nested.json()["error"]["field"] == "outputs"
        gone = await c.delete("/v1/spaces/cases/items/no-such-item")
        assert gone.status_code == 404, gone.text  # was 200 false; the README says 404
    items = mongo[settings.mongodb.database]["space_items"]
    assert await items.count_documents({}) == 0
    spaces = HttpSpaces(url, KEY)
    try:
        assert await spaces.delete_item("cases", "no-such-item") is False  # as in process
    finally:
        await spaces.close()


async def test_with_mongodb_down_answers_say_nothing_of_it(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A 503 carried pymongo's topology description; /readyz named the database address."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    down = settings.model_copy(
        update={
            "mongodb": MongoSettings(
                uri=f"mongodb://127.0.0.1:{port}/?directConnection=true",
                database="x",
                server_selection_timeout_s=0.5,
            )
        }
    )
    runner, url = await start(serving(down, api_keys=(SecretStr(f"travel:{KEY}"),)))
    caplog.set_level(logging.WARNING)
    try:
        async with httpx.AsyncClient(base_url=url) as c:
            managed = "mmk_0123456789abcdef_" + "a" * 32  # looked up in MongoDB
            answers = [
                await c.get(DOMAINS, headers={"Authorization": f"Bearer {managed}"}),
                await c.get(DOMAINS, headers={"Authorization": f"Bearer {KEY}"}),
                await c.get("/readyz"),
            ]
    finally:
        await runner.stop()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert str(port) not in answer.text
        assert "127.0.0.1" not in answer.text
        assert "Topology" not in answer.text
    assert answers[0].headers["Retry-After"] == "1"
    assert answers[0].json()["error"]["message"] == "the database is unavailable; retry later"
    assert str(port) in caplog.text  # the details are in the service's log


async def test_the_key_is_never_written_to_a_log_or_a_body(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``?api_key=`` went in full to the access log; a NUL-ended header's 400 echoed it."""
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []
    async with httpx.AsyncClient(base_url=url) as c:
        for answer in (
            await c.get(f"{DOMAINS}?api_key={KEY}"),
            await c.get(f"{DOMAINS}?api_key={KEY}", headers={"Authorization": f"Bearer {KEY}"}),
            await c.post("/v1/nope", json={}, headers={"Authorization": f"Bearer {KEY}"}),
            await c.delete(f"{SAVE}?k={KEY}"),
            await c.get(f"{SAVE}?limit=oops&k={KEY}", headers={"Authorization": f"Bearer {KEY}"}),
        ):
            bodies.append(answer.text)
    assert [b for b in bodies if KEY in b] == []
    served = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    lines = [r.getMessage() for r in served]  # the service's, not the test client's
    assert [line for line in lines if KEY in line] == []
    assert any(DOMAINS in line for line in lines)  # the access log logs requests


async def test_a_body_too_large_without_a_content_length_is_413(
    url: str, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """A chunked body past the limit was cut off, and FastAPI answered 400 "error parsing"."""

    async def chunks() -> Any:
        for _ in range(400):  # 40 MB, far past the service's limit
            yield b"x" * 100_000

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        answer = await c.post(SAVE, content=chunks(), headers={"Content-Type": "application/json"})
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["field"] == "body"
    assert await stored(mongo, settings) == 0
