"""Custom memory types through the LangGraph store (SPEC N1, C6): a user-scoped type
declared in ``project-config.yaml`` is a namespace ``(user_id, type)`` like a built-in
one — read, searched, filtered, listed, put and deleted (SPEC C4: a type's direct writes
work beside its extractor's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.errors import InputError, Unmappable
from mongomem.integrations.langgraph import MongomemStore
from mongomem.ltm import MemoryStore
from mongomem.models import Evidence, MemoryCandidate, MemoryScope, stable_id, utcnow
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

U = "user_1"
PREF = (U, "preference")
EMBEDDER = HashingEmbedder(64)
CONFIG = """
memory:
  extraction:
    custom:
      - name: preference
        scope: user
        key: [topic]
        fields:
          topic: "what the preference is about"
          value: "the preference itself"
          note: "anything else the user said about it"
        instructions: "Extract stable preferences the user states."
      - name: route
        scope: user
        key: [origin, destination]
        fields:
          origin: "where the user flies from"
          destination: "where to"
        instructions: "Extract the routes the user flies."
      - name: house-rule
        scope: project
        key: [rule]
        fields:
          rule: "the rule"
        instructions: "Extract the house rules."
"""


def extracted(topic: str, value: str, snapshot: str, note: str | None = None) -> MemoryCandidate:
    """A preference as its extractor makes one (key: the topic; text: its fields)."""
    fields = {"topic": topic, "value": value, "note": note}
    text = "; ".join(f"{k}: {v}" for k, v in fields.items() if v)
    return MemoryCandidate(
        candidate_id=stable_id("cand", snapshot, "preference", topic),
        memory_type="preference",
        scope=MemoryScope(project_id="lg", user_id=U),
        key=topic,
        fields=fields,
        text=text,
        embedding=tuple(EMBEDDER.embed_one(text)),
        evidence=Evidence(source="snapshot", ref=snapshot, session_id="s1", text=text, at=utcnow()),
        prompt_version="preference-custom-test",
        created_at=utcnow(),
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "project-config.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
async def seeded(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    store = MemoryStore(mongo[settings.mongodb.database])
    await store.setup()
    await store.reconcile(extracted("seat", "aisle", "snap-1"))
    await store.reconcile(extracted("seat", "window", "snap-2"))  # the extractor's UPDATE
    await store.reconcile(extracted("meal", "vegetarian", "snap-2", note="no nuts either"))


@pytest.fixture
def memory(settings: Settings, config_file: Path, seeded: None) -> Iterator[Memory]:
    configured = settings.model_copy(update={"project_config": config_file})
    with Memory(project_id="lg", settings=configured, embedder=EMBEDDER) as m:
        yield m


def test_a_custom_type_reads_like_a_built_in_one(memory: Memory) -> None:
    store = MongomemStore(memory)
    item = store.get(PREF, "seat")
    assert item is not None
    assert (item.namespace, item.key) == (PREF, "seat")
    assert item.value == {"topic": "seat", "value": "window", "note": None}  # the current one
    assert store.get(PREF, "shoes") is None
    listed = store.search(PREF)
    assert {i.key: i.value["value"] for i in listed} == {"seat": "window", "meal": "vegetarian"}
    assert [i.key for i in store.search(PREF, filter={"value": "vegetarian"})] == ["meal"]
    hits = store.search(PREF, query="which seat, window or aisle")
    assert hits[0].key == "seat"
    assert hits[0].score is not None
    # a user-wide search covers it beside the built-in types
    store.put((U, "semantic"), "home-airport", {"content": "The user's home airport is Boston."})
    everywhere = store.search((U,), query="seat")
    assert {i.namespace for i in everywhere} == {PREF, (U, "semantic")}
    assert (U, "preference") in store.list_namespaces(prefix=(U,))


def test_a_custom_type_is_put_and_deleted(memory: Memory) -> None:
    store = MongomemStore(memory)
    store.put(PREF, "seat", {"topic": "seat", "value": "middle", "note": None})
    item = store.get(PREF, "seat")
    assert item is not None
    assert item.value == {"topic": "seat", "value": "middle", "note": None}  # an UPDATE
    store.put(PREF, "drink", {"topic": "drink", "value": "tea", "note": "no sugar"})
    drink = store.get(PREF, "drink")
    assert drink is not None
    assert drink.value == {"topic": "drink", "value": "tea", "note": "no sugar"}
    refusals: list[tuple[tuple[tuple[str, ...], str, dict[str, Any]], str]] = [
        ((PREF, "seat", {"topic": "meal", "value": "aisle", "note": None}), "item key is 'seat'"),
        ((PREF, "seat", {"topic": "seat", "value": 3, "note": None}), "non-empty string"),
        ((PREF, "seat", {"topic": "seat", "value": "aisle"}), "exactly"),
        (((U, "route"), "bos/lis", {"origin": "bos", "destination": "lis"}), "more than one"),
    ]
    for (namespace, key, value), why in refusals:
        with pytest.raises(Unmappable, match=why):
            store.put(namespace, key, value)
    seat = store.get(PREF, "seat")
    assert seat is not None
    assert seat.value["value"] == "middle"  # no refusal stored anything
    assert store.get((U, "route"), "bos/lis") is None
    store.delete(PREF, "drink")
    store.delete(PREF, "seat")
    assert store.get(PREF, "seat") is None
    assert [i.key for i in store.search(PREF)] == ["meal"]


def test_a_project_wide_custom_type_is_refused_as_taxonomic_terms_are(memory: Memory) -> None:
    store = MongomemStore(memory)
    for call in (
        lambda: store.get((U, "house-rule"), "no-smoking"),
        lambda: store.search((U, "house-rule")),
    ):
        with pytest.raises(Unmappable, match="project-wide"):
            call()
    assert (U, "house-rule") not in store.list_namespaces(prefix=(U,))


def test_the_types_can_be_given_to_the_store(
    settings: Settings, config_file: Path, seeded: None
) -> None:
    """Over a memory whose settings name no project config, the store maps only the types
    it is told; the memory itself must know them too (over HTTP: the service's
    configuration), else its refusal is the answer, never an empty one."""
    with Memory(project_id="lg", settings=settings, embedder=EMBEDDER) as plain:
        with pytest.raises(Unmappable, match="neither a built-in"):
            MongomemStore(plain).get(PREF, "seat")
        told = MongomemStore(plain, project_config=config_file)
        with pytest.raises(InputError, match="unknown memory type 'preference'"):
            told.get(PREF, "seat")
    configured = settings.model_copy(update={"project_config": config_file})
    with Memory(project_id="lg", settings=configured, embedder=EMBEDDER) as direct:
        item = MongomemStore(direct, project_config=config_file).get(PREF, "seat")
        assert item is not None
        assert item.value["value"] == "window"


async def test_the_sdk_browses_and_counts_a_custom_type_in_its_own_scope(
    settings: Settings, mongo: AsyncMongoClient[Document], config_file: Path, seeded: None
) -> None:
    rule = extracted("no-smoking", "indoors", "snap-3").model_copy(
        update={
            "candidate_id": "cand-rule",
            "memory_type": "house-rule",
            "scope": MemoryScope(project_id="lg"),  # scope: project
            "fields": {"rule": "no-smoking"},
            "text": "rule: no-smoking",
        }
    )
    store = MemoryStore(mongo[settings.mongodb.database])
    await store.reconcile(rule)
    configured = settings.model_copy(update={"project_config": config_file})
    async with AsyncMemory(project_id="lg", settings=configured, embedder=EMBEDDER) as memory:
        chat = memory.bind(MemoryRequestContext(user_id=U))
        page = await chat.browse_memories("preference")
        assert sorted(i.key for i in page.items) == ["meal", "seat"]
        assert await chat.count_memories("preference") == 2
        other = memory.bind(MemoryRequestContext(user_id="user_2"))
        assert await other.count_memories("preference") == 0  # the user's own scope
        assert await other.count_memories("house-rule") == 1  # the project's
    async with AsyncMemory(project_id="lg", settings=settings, embedder=EMBEDDER) as plain:
        with pytest.raises(InputError, match="unknown memory type"):
            await plain.bind(MemoryRequestContext(user_id=U)).count_memories("preference")


async def test_the_sdk_saves_a_custom_type_in_its_own_scope(
    settings: Settings, config_file: Path
) -> None:
    """SPEC C4/C6: a declared type's direct writes work; the key fields are required, the
    others optional, and a save is reconciled (ADD, then UPDATE) as the extractor's are."""
    configured = settings.model_copy(update={"project_config": config_file})
    async with AsyncMemory(project_id="lg", settings=configured, embedder=EMBEDDER) as memory:
        chat = memory.bind(MemoryRequestContext(user_id=U))
        first = await chat.save_custom("preference", {"topic": "seat", "value": "aisle"})
        again = await chat.save_custom("preference", {"topic": "seat", "value": "window"})
        assert (first.action, again.action) == ("ADD", "UPDATE")
        assert again.memory_id == first.memory_id
        seat = await chat.get_custom("preference", "seat")
        assert seat is not None
        assert seat.fields == {"topic": "seat", "value": "window"}  # no note: left out
        assert seat.text == "topic: seat; value: window"
        route = await chat.save_custom("route", {"origin": "BOS", "destination": "LIS"})
        assert route.action == "ADD"
        assert await chat.get_custom("route", "BOS/LIS") is not None
        rule = await chat.save_custom("house-rule", {"rule": "no-smoking"})
        other = memory.bind(MemoryRequestContext(user_id="user_2"))
        shared = await other.get_custom("house-rule", "no-smoking")  # scope: project
        assert shared is not None
        assert shared.memory_id == rule.memory_id
        assert await other.get_custom("preference", "seat") is None  # the user's own
        refusals = [
            ("preference", {"value": "aisle"}, "need a non-empty 'topic'"),
            ("preference", {"topic": "seat", "colour": "red"}, "no field 'colour'"),
            ("shoes", {"size": "42"}, "unknown memory type 'shoes'"),
        ]
        for memory_type, fields, why in refusals:
            with pytest.raises(InputError, match=why):
                await chat.save_custom(memory_type, fields)
        assert await chat.count_memories("preference") == 1  # nothing partial stored
        seat = await chat.get_custom("preference", "seat")
        assert seat is not None
        assert seat.fields["value"] == "window"
