"""Rotating the encryption key of spaces (SPEC H1), against the real MongoDB-compatible
server: old items stay readable under a previous key, writes use the current one, and
``rekey_space`` moves a space to it, resumably, over the API, HTTP and the CLI."""

from __future__ import annotations

import argparse
import asyncio
import base64
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, serving, start

from mongomem.adapters.mongo import Document
from mongomem.cli.spaces import add_cli, spaces_command
from mongomem.errors import ConfigError, InputError, StorageError
from mongomem.sdk.spaces import HttpSpaces
from mongomem.settings import Settings
from mongomem.spaces import (
    AsyncSpaces,
    PayloadCipher,
    RecallSettings,
    SpaceItem,
    SpacesSettings,
)
from mongomem.spaces.store import SpaceStore

pytestmark = pytest.mark.integration

API_KEY = "support-env-key-0123456789abcdef"
A, B, C = bytes(range(32)), bytes(32), bytes([7] * 32)
ID_A, ID_B, ID_C = (PayloadCipher(k).key_id for k in (A, B, C))
QUESTIONS = [
    "customer wants a refund for a damaged blender",
    "customer asks how to reset the router password",
    "refund request for a late delivery of shoes",
    "the parcel was left at the wrong door",
    "invoice shows the wrong company address",
]


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def keys(current: bytes | None, *previous: bytes) -> SpacesSettings:
    return SpacesSettings(
        encryption_key=None if current is None else b64(current),
        previous_encryption_keys=tuple(SecretStr(b64(k)) for k in previous),
    )


def opened(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces_settings: SpacesSettings
) -> AsyncSpaces:
    return AsyncSpaces(
        settings,
        project_id="support",
        embedder=EMBEDDER,
        spaces_settings=spaces_settings,
        client=mongo,
    )


async def fill(spaces: AsyncSpaces, count: int = 3) -> None:
    await spaces.create_space(
        "secret",
        keys=[{"argument": "question"}],
        encrypted=True,
        recall=RecallSettings(threshold=0.1, duplicate_threshold=1.0),
    )
    for n, question in enumerate(QUESTIONS[:count]):
        added = await spaces.add_item(
            "secret",
            inputs={"question": question},
            outcome=f"outcome {n}",
            outputs={"reply": f"reply {n}"},
            comment="good call",
            sentiment="positive",
        )
        assert added.action == "added"


async def stored(mongo: AsyncMongoClient[Document], settings: Settings) -> dict[str, Document]:
    """The raw item documents of space ``secret``, by id."""
    cursor = mongo[settings.mongodb.database]["space_items"].find({"space_id": "secret"})
    return {d["_id"]: d async for d in cursor}


async def space_key(mongo: AsyncMongoClient[Document], settings: Settings) -> str:
    doc = await mongo[settings.mongodb.database]["spaces"].find_one({"space_id": "secret"})
    assert doc is not None
    return str(doc["key_id"])


def by_id(items: list[SpaceItem]) -> dict[str, SpaceItem]:
    return {i.item_id: i for i in items}


async def test_a_rotated_key_reads_old_items_writes_new_ones_and_rekey_moves_them_all(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with opened(settings, mongo, keys(A)) as old:
        await fill(old)
        before = by_id(await old.list_items("secret"))
    raw = await stored(mongo, settings)
    assert {d["key_id"] for d in raw.values()} == {ID_A}
    legacy = sorted(raw)[0]  # as stored before items carried their key: the space's is used
    items = mongo[settings.mongodb.database]["space_items"]
    await items.update_one({"_id": legacy}, {"$unset": {"key_id": ""}})

    async with opened(settings, mongo, keys(B, A)) as rotated:
        assert by_id(await rotated.list_items("secret")) == before
        hits = await rotated.recall("secret", {"question": "my blender broke, refund?"})
        assert hits[0].item.inputs == {"question": QUESTIONS[0]}
        added = await rotated.add_item("secret", inputs={"question": QUESTIONS[3]})
        assert added.item is not None
        await rotated.update_item("secret", legacy, outcome="edited")
        written = by_id(await rotated.list_items("secret"))
        assert written[legacy].outcome == "edited"
        raw = await stored(mongo, settings)
        assert raw[added.item.item_id]["key_id"] == ID_B  # writes: the current key
        assert raw[legacy]["key_id"] == ID_B
        assert sorted(d["key_id"] for d in raw.values()) == sorted([ID_A, ID_A, ID_B, ID_B])
        assert await space_key(mongo, settings) == ID_A

    async with opened(settings, mongo, keys(B)) as without_a:
        with pytest.raises(ConfigError, match=f"sealed under key {ID_A}") as missing:
            await without_a.list_items("secret")
        assert "MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS" in str(missing.value)

    async with opened(settings, mongo, keys(B, A)) as rotated:
        done = await rotated.rekey_space("secret")
        assert (done.resealed, done.space.item_count, done.space.key_id) == (2, 4, ID_B)
        after = await stored(mongo, settings)
        assert {d["key_id"] for d in after.values()} == {ID_B}
        assert all(after[i]["sealed"] != raw[i]["sealed"] for i in raw if raw[i]["key_id"] == ID_A)
        assert after[legacy]["sealed"] == raw[legacy]["sealed"]  # already under B: untouched
        assert await space_key(mongo, settings) == ID_B
        assert (await rotated.get_space("secret")).key_id == ID_B
        again = await rotated.rekey_space("secret")
        assert again.resealed == 0

    async with opened(settings, mongo, keys(B)) as without_a:
        assert by_id(await without_a.list_items("secret")) == written
        hits = await without_a.recall("secret", {"question": "my blender broke, refund?"})
        assert hits[0].item.inputs == {"question": QUESTIONS[0]}


async def test_an_interrupted_rekey_completes_when_run_again(
    settings: Settings, mongo: AsyncMongoClient[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(settings, mongo, keys(A)) as old:
        await fill(old, count=5)
        before = by_id(await old.list_items("secret"))

    monkeypatch.setattr("mongomem.spaces.rekey.BATCH", 2)  # several batches per pass
    reseal = SpaceStore.reseal_item
    calls = 0

    async def fails_on_the_third(
        self: SpaceStore, doc: Document, sealed: bytes, key_id: str
    ) -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise StorageError("the connection dropped")
        return await reseal(self, doc, sealed, key_id)

    async with opened(settings, mongo, keys(B, A)) as rotated:
        with monkeypatch.context() as patched:
            patched.setattr(SpaceStore, "reseal_item", fails_on_the_third)
            with pytest.raises(StorageError):
                await rotated.rekey_space("secret")
        raw = await stored(mongo, settings)
        assert sorted(d["key_id"] for d in raw.values()) == sorted([ID_A, ID_A, ID_A, ID_B, ID_B])
        assert await space_key(mongo, settings) == ID_A  # not moved before every item is
        assert by_id(await rotated.list_items("secret")) == before

        done = await rotated.rekey_space("secret")
        assert (done.resealed, done.space.item_count, done.space.key_id) == (3, 5, ID_B)

    assert {d["key_id"] for d in (await stored(mongo, settings)).values()} == {ID_B}
    assert await space_key(mongo, settings) == ID_B
    async with opened(settings, mongo, keys(B)) as without_a:
        assert by_id(await without_a.list_items("secret")) == before


async def test_concurrent_reads_and_writes_during_a_rekey(
    settings: Settings, mongo: AsyncMongoClient[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(settings, mongo, keys(A)) as old:
        await fill(old, count=5)
    reseal = SpaceStore.reseal_item
    calls, gone, seen = 0, "", []
    async with (
        opened(settings, mongo, keys(B, A)) as rotated,
        opened(settings, mongo, keys(B, A)) as writer,
        opened(settings, mongo, keys(A, B)) as stale,  # not switched to the new key yet
    ):

        async def racing(self: SpaceStore, doc: Document, sealed: bytes, key_id: str) -> bool:
            nonlocal calls, gone
            calls += 1
            if calls == 1:  # rewritten between the rekey's read and its write
                await writer.update_item("secret", doc["_id"], outcome="edited meanwhile")
            elif calls == 2:  # deleted in between
                await writer.delete_item("secret", doc["_id"])
                gone = doc["_id"]
            elif calls == 3:  # a new item, sealed under the old key
                await stale.add_item("secret", inputs={"question": "a late question"})
            seen.append(len(await writer.list_items("secret")))  # readers never fail
            return await reseal(self, doc, sealed, key_id)

        monkeypatch.setattr(SpaceStore, "reseal_item", racing)
        done = await rotated.rekey_space("secret")
        monkeypatch.undo()
        assert seen[0] == 5
        assert done.resealed == 4  # three of the five, and the late one
        assert done.space.item_count == 5
        raw = await stored(mongo, settings)
        assert gone not in raw
        assert {d["key_id"] for d in raw.values()} == {ID_B}
        items = await writer.list_items("secret")
        assert sum(i.outcome == "edited meanwhile" for i in items) == 1  # the write won
        assert any(i.inputs == {"question": "a late question"} for i in items)


async def test_keys_that_are_not_configured_are_named(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with opened(settings, mongo, keys(C)) as lost:
        await fill(lost)
        await lost.create_space("plain", keys=[{"argument": "question"}])
    raw = await stored(mongo, settings)

    async with opened(settings, mongo, keys(B, A)) as rotated:
        for call in (rotated.list_items("secret"), rotated.rekey_space("secret")):
            with pytest.raises(ConfigError) as missing:
                await call
            message = str(missing.value)
            assert f"sealed under key {ID_C}" in message, message
            assert f"MONGOMEM_SPACES_ENCRYPTION_KEY ({ID_B})" in message
        with pytest.raises(InputError, match="not encrypted") as plain:
            await rotated.rekey_space("plain")
        assert plain.value.field == "space_id"
    assert await stored(mongo, settings) == raw  # nothing was changed
    assert await space_key(mongo, settings) == ID_C

    async with opened(settings, mongo, keys(None, C)) as reader:  # previous keys only read
        assert len(await reader.list_items("secret")) == 3
        with pytest.raises(ConfigError, match="set MONGOMEM_SPACES_ENCRYPTION_KEY"):
            await reader.rekey_space("secret")
        with pytest.raises(ConfigError, match="set MONGOMEM_SPACES_ENCRYPTION_KEY"):
            await reader.add_item("secret", inputs={"question": "new"})
    with pytest.raises(ConfigError, match="MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS entry 2"):
        opened(settings, mongo, SpacesSettings(previous_encryption_keys=f"{b64(A)},not base64!"))


@pytest.fixture
async def url(settings: Settings) -> AsyncIterator[str]:
    """The memory service, with key B current and key A previous."""
    api_keys = (SecretStr(f"support:{API_KEY}"),)
    served = serving(settings, api_keys=api_keys).model_copy(update={"spaces": keys(B, A)})
    runner, base_url = await start(served)
    try:
        yield base_url
    finally:
        await runner.stop()


async def test_rekey_over_http(
    url: str, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with opened(settings, mongo, keys(A)) as old:
        await fill(old)
    async with HttpSpaces(url, API_KEY) as remote:
        done = await remote.rekey_space("secret")
        assert (done.resealed, done.space.item_count, done.space.key_id) == (3, 3, ID_B)
        with pytest.raises(InputError) as missing:
            await remote.rekey_space("nope")
        assert missing.value.field == "space_id"
    assert {d["key_id"] for d in (await stored(mongo, settings)).values()} == {ID_B}


async def test_the_rekey_cli_command(
    settings: Settings, mongo: AsyncMongoClient[Document], capsys: pytest.CaptureFixture[str]
) -> None:
    async with opened(settings, mongo, keys(A)) as old:
        await fill(old)
    parser = argparse.ArgumentParser(prog="mongomem")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["spaces", "rekey", "secret", "--project-id", "support"])
    rotated = settings.model_copy(update={"spaces": keys(B, A)})

    assert await asyncio.to_thread(spaces_command, args, rotated) == 0
    out = capsys.readouterr().out
    assert f"re-sealed 3 of 3 items of space secret under key {ID_B}" in out
    assert {d["key_id"] for d in (await stored(mongo, settings)).values()} == {ID_B}
    assert await asyncio.to_thread(spaces_command, args, rotated) == 0
    assert "re-sealed 0 of 3 items" in capsys.readouterr().out
