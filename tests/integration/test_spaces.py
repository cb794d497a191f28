"""Memory spaces against the real MongoDB-compatible server (SPEC H1, H2, F3)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.errors import ConfigError, InputError
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces, RecallSettings, SearchKey, SpacesSettings
from mongomem.spaces.scoring import combine

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder(64)
KEY = SpacesSettings(encryption_key=base64.b64encode(bytes(range(32))).decode())
OTHER_KEY = SpacesSettings(encryption_key=base64.b64encode(bytes(32)).decode())

CASES = [
    ("customer wants a refund for a damaged blender", "gold", "refund approved"),
    ("customer asks how to reset the router password", "basic", "sent the reset guide"),
    ("refund request for a late delivery of shoes", "basic", "voucher offered"),
]


@pytest.fixture
async def spaces(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncSpaces]:
    async with AsyncSpaces(
        settings, project_id="support", embedder=EMBEDDER, spaces_settings=KEY, client=mongo
    ) as s:
        yield s


async def counts(mongo: AsyncMongoClient[Document], settings: Settings) -> tuple[int, int]:
    db = mongo[settings.mongodb.database]
    return await db["spaces"].count_documents({}), await db["space_items"].count_documents({})


async def seeded(spaces: AsyncSpaces, space_id: str = "refunds", **create: object) -> None:
    await spaces.create_space(
        space_id,
        keys=[SearchKey(argument="question", weight=3), SearchKey(argument="tier", weight=1)],
        recall=RecallSettings(threshold=0.1, top_k=3),
        **create,  # type: ignore[arg-type]
    )
    for question, tier, outcome in CASES:
        result = await spaces.add_item(
            space_id,
            inputs={"question": question, "tier": tier},
            outcome=outcome,
            outputs={"reply": f"({outcome})"},
            comment="good call",
            sentiment="positive",
        )
        assert result.action == "added"


async def test_create_list_inspect_edit_delete(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    created = await spaces.create_space(
        "refunds", name="Refund cases", description="How refunds went", keys=[{"argument": "q"}]
    )
    assert created.encrypted is False
    assert created.embedder == EMBEDDER.name
    assert created.recall == RecallSettings()
    await spaces.create_space("escalations", kind="escalation", keys=[{"argument": "q"}])
    assert [s.space_id for s in await spaces.list_spaces()] == ["escalations", "refunds"]

    with pytest.raises(InputError) as exists:
        await spaces.create_space("refunds", keys=[{"argument": "q"}])
    assert exists.value.field == "space_id"

    update = await spaces.update_space(
        "refunds", name="Refunds", description="", recall={"top_k": 5, "mode": "meaning"}
    )
    assert update.applied
    got = await spaces.get_space("refunds")
    assert (got.name, got.description, got.recall.top_k, got.recall.mode) == (
        "Refunds",
        "",
        5,
        "meaning",
    )
    assert got.recall.threshold == RecallSettings().threshold  # untouched fields kept

    await spaces.add_item("refunds", inputs={"q": "a broken kettle"}, outcome="refund")
    assert (await spaces.get_space("refunds")).item_count == 1
    assert await spaces.delete_space("refunds") == 1
    assert await counts(mongo, settings) == (1, 0)
    with pytest.raises(InputError) as gone:
        await spaces.get_space("refunds")
    assert gone.value.field == "space_id"


async def test_encryption_is_fixed_at_creation(spaces: AsyncSpaces) -> None:
    await spaces.create_space("plain", keys=[{"argument": "q"}])
    await spaces.create_space("secret", keys=[{"argument": "q"}], encrypted=True)
    for space_id, wanted in (("plain", True), ("secret", False)):
        with pytest.raises(InputError, match="cannot be changed") as refused:
            await spaces.update_space(space_id, encrypted=wanted, name="renamed")
        assert refused.value.field == "encrypted"
        assert (await spaces.get_space(space_id)).name == space_id  # nothing applied
    assert (await spaces.update_space("secret", encrypted=True)).applied  # same value: fine


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"space_id": "", "keys": [{"argument": "q"}]}, "space_id"),
        ({"space_id": "$bad", "keys": [{"argument": "q"}]}, "space_id"),
        ({"space_id": "s", "keys": []}, "keys"),
        ({"space_id": "s", "keys": [{"argument": "a.b"}]}, "keys.0.argument"),
        ({"space_id": "s", "keys": [{"argument": "q", "weight": 0}]}, "keys.0.weight"),
        ({"space_id": "s", "keys": [{"argument": "q"}, {"argument": "q"}]}, "keys"),
        ({"space_id": "s", "keys": [{"argument": "q"}], "recall": {"top_k": 0}}, "recall.top_k"),
        (
            {"space_id": "s", "keys": [{"argument": "q"}], "recall": {"threshold": 2}},
            "recall.threshold",
        ),
        ({"space_id": "s", "keys": [{"argument": "q"}], "kind": "other"}, "kind"),
        ({"space_id": "s", "keys": [{"argument": "q"}], "name": " "}, "name"),
    ],
)
async def test_bad_space_input_names_the_field_and_stores_nothing(
    spaces: AsyncSpaces,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    kwargs: dict[str, object],
    field: str,
) -> None:
    with pytest.raises(InputError) as bad:
        await spaces.create_space(**kwargs)  # type: ignore[arg-type]
    assert bad.value.field == field
    assert await counts(mongo, settings) == (0, 0)


async def test_bad_item_input_names_the_field_and_stores_nothing(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    await seeded(spaces)
    bad: list[tuple[dict[str, object], str]] = [
        ({"inputs": {}}, "inputs"),
        ({"inputs": {"other": "x"}}, "inputs"),  # none of the search keys
        ({"inputs": {"question": "  "}}, "inputs.question"),
        ({"inputs": {"question": 3}}, "inputs.question"),
        ({"inputs": {"bad name": "x"}}, "inputs"),
        ({"inputs": {"question": "x"}, "sentiment": "great"}, "sentiment"),
        ({"inputs": {"question": "x"}, "outputs": {"a": object()}}, "outputs"),
        ({"inputs": {"question": "x"}, "outputs": ["not", "a", "mapping"]}, "outputs"),
        ({"inputs": {"question": "x"}, "agent_id": "$me"}, "agent_id"),
        ({"inputs": {"question": "x"}, "on_duplicate": "merge"}, "on_duplicate"),
    ]
    for kwargs, field in bad:
        with pytest.raises(InputError) as refused:
            await spaces.add_item("refunds", **kwargs)  # type: ignore[arg-type]
        assert refused.value.field == field, kwargs
    with pytest.raises(InputError) as missing:
        await spaces.add_item("nope", inputs={"question": "x"})
    assert missing.value.field == "space_id"
    assert await counts(mongo, settings) == (1, 3)


async def test_recall_ranks_by_weighted_similarity(spaces: AsyncSpaces) -> None:
    await seeded(spaces)
    hits = await spaces.recall("refunds", {"question": "refund for a damaged blender", "tier": "x"})
    assert hits[0].item.outcome == "refund approved"
    assert hits[0].item.outputs == {"reply": "(refund approved)"}
    assert hits[0].item.feedback[0].comment == "good call"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:  # hybrid: the documented formula
        assert hit.score == pytest.approx(combine(hit.meaning, hit.keyword, "hybrid", 0.3))
        assert hit.meaning == pytest.approx(
            (3 * hit.per_argument["question"] + hit.per_argument["tier"]) / 4
        )

    # Inputs that are not search keys are ignored; only given keys count.
    only_question = await spaces.recall(
        "refunds", {"question": "router password reset", "unrelated": "gold"}
    )
    assert only_question[0].item.outcome == "sent the reset guide"
    assert set(only_question[0].per_argument) == {"question"}

    # The weights decide: tier x10 makes the "gold" case win for a router question.
    query = {"question": "router password reset", "tier": "gold"}
    assert (await spaces.recall("refunds", query))[0].item.outcome == "sent the reset guide"
    await spaces.update_space(
        "refunds",
        keys=[{"argument": "question"}, {"argument": "tier", "weight": 10}],
        confirm=True,
    )
    assert (await spaces.recall("refunds", query))[0].item.outcome == "refund approved"


async def test_threshold_top_k_and_mode_come_from_the_space(spaces: AsyncSpaces) -> None:
    await seeded(spaces)
    query = {"question": "refund", "tier": "basic"}
    assert len(await spaces.recall("refunds", query)) == 3
    await spaces.update_space("refunds", recall={"top_k": 1})
    assert len(await spaces.recall("refunds", query)) == 1
    await spaces.update_space("refunds", recall={"top_k": 3, "threshold": 0.99})
    assert await spaces.recall("refunds", query) == []
    await spaces.update_space("refunds", recall={"threshold": -1, "mode": "meaning"})
    hits = await spaces.recall("refunds", query)
    assert all(h.score == h.meaning and h.keyword == 0.0 for h in hits)
    with pytest.raises(InputError) as none:
        await spaces.recall("refunds", {"other": "x"})
    assert none.value.field == "inputs"


async def test_projects_never_see_each_other(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    await seeded(spaces)
    async with AsyncSpaces(
        settings, project_id="other", embedder=EMBEDDER, spaces_settings=KEY, client=mongo
    ) as other:
        assert await other.list_spaces() == []
        for call in (
            other.get_space("refunds"),
            other.recall("refunds", {"question": "refund"}),
            other.list_items("refunds"),
            other.delete_space("refunds"),
        ):
            with pytest.raises(InputError):
                await call
        # The same space id in another project is another space.
        await other.create_space("refunds", keys=[{"argument": "question"}])
        await other.add_item("refunds", inputs={"question": "customer wants a refund"})
        assert len(await other.list_items("refunds")) == 1
        item = (await spaces.list_items("refunds"))[0]
        with pytest.raises(InputError):
            await other.get_item("refunds", item.item_id)
        assert not await other.delete_item("refunds", item.item_id)
    assert len(await spaces.list_items("refunds")) == 3
    assert (await spaces.get_space("refunds")).item_count == 3


async def test_encrypted_payloads_at_rest(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    await seeded(spaces, "secret", encrypted=True)
    raw = await mongo[settings.mongodb.database]["space_items"].find_one({"space_id": "secret"})
    assert raw is not None
    assert "payload" not in raw
    assert b"blender" not in bytes(raw["sealed"])
    assert b"refund" not in bytes(raw["sealed"])
    assert set(raw["vectors"]) == {"question", "tier"}  # vectors are not encrypted
    hits = await spaces.recall("secret", {"question": "damaged blender refund", "tier": "gold"})
    assert hits[0].item.outcome == "refund approved"

    for other_settings, message in ((OTHER_KEY, "not the key"), (SpacesSettings(), "encrypted")):
        async with AsyncSpaces(
            settings,
            project_id="support",
            embedder=EMBEDDER,
            spaces_settings=other_settings,
            client=mongo,
        ) as wrong:
            with pytest.raises(ConfigError, match=message):
                await wrong.list_items("secret")
    async with AsyncSpaces(
        settings,
        project_id="support",
        embedder=EMBEDDER,
        spaces_settings=SpacesSettings(),
        client=mongo,
    ) as keyless:
        # the caller asked for what this deployment cannot do: its input, not the settings
        with pytest.raises(InputError, match="MONGOMEM_SPACES_ENCRYPTION_KEY") as refused:
            await keyless.create_space("more", keys=[{"argument": "q"}], encrypted=True)
        assert refused.value.field == "encrypted"


async def test_another_embedder_is_refused(
    settings: Settings, mongo: AsyncMongoClient[Document], spaces: AsyncSpaces
) -> None:
    await seeded(spaces)
    async with AsyncSpaces(
        settings, project_id="support", embedder=HashingEmbedder(32), client=mongo
    ) as other:
        with pytest.raises(ConfigError, match="re-embed"):
            await other.recall("refunds", {"question": "refund"})
