"""Ids over HTTP follow the one rule of :mod:`mongomem.identifiers` (issue 25): a lookalike
(Cyrillic ``а``), a bidi override or a zero-width character in an id is 422 naming the
field, with nothing stored; an id in NFD is the same user as in NFC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import serving, start

from mongomem.adapters.mongo import MEMORIES, Document
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

KEY = "identifiers-env-key-0123456789abc"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def client(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[httpx.AsyncClient]:
    runner, base = await start(serving(settings, api_keys=(SecretStr(f"travel:{KEY}"),)))
    try:
        async with httpx.AsyncClient(base_url=base, headers=AUTH) as c:
            yield c
    finally:
        await runner.stop()


def save_path(user: str) -> str:
    return f"/v1/users/{quote(user, safe='')}/memories/semantic"


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("\u0430lice", "must not mix scripts"),
        ("\u202ealice", "bidirectional control character (U+202E)"),
        ("alice\u200b", "zero-width character (U+200B)"),
    ],
)
async def test_a_lookalike_or_invisible_user_id_is_422_naming_the_field(
    client: httpx.AsyncClient,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    user: str,
    why: str,
) -> None:
    body = {"fields": {"label": "home", "text": "Home is Lisbon."}}
    answer = await client.post(save_path(user), json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "user_id"
    assert why in error["message"]
    answer = await client.post(save_path("alice"), json={**body, "session_id": user})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "session_id"
    assert await mongo[settings.mongodb.database][MEMORIES].count_documents({}) == 0


async def test_a_label_with_a_bidi_override_is_422_naming_the_field(
    client: httpx.AsyncClient,
) -> None:
    body = {"fields": {"label": "home\u202e", "text": "Home is Lisbon."}}
    answer = await client.post(save_path("alice"), json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] in ("label", "fields.label")


async def test_an_nfd_user_id_is_the_nfc_user(client: httpx.AsyncClient) -> None:
    body = {"fields": {"label": "home", "text": "Home is Lisbon."}}
    saved = await client.post(save_path("jose\u0301"), json=body)
    assert saved.status_code in (200, 201), saved.text
    listed = await client.get(save_path("jos\u00e9"))
    assert listed.status_code == 200, listed.text
    assert "Home is Lisbon." in listed.text
