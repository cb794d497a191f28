"""The web inspector (SPEC G6; issue 15 item 6), in a real headless Chromium.

The service runs on a loopback port over the test servers; data is seeded
through the SDK, the memory store, the windowing's snapshot document, a real
dead-letter topic and memory spaces. The browser is the system's Chromium
(``make setup`` installs Debian's ``chromium``), driven by Playwright; each
view's screenshot is saved under ``tests/artifacts/inspector/`` (git-ignored).

The JSON routes the page adds are checked directly too: each is scoped to
the key's project.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from chromium import chromium_path as chromium_path  # test_docs_page imports it here
from pydantic import SecretStr
from pymongo import AsyncMongoClient

from mongomem import AsyncMemory, MemoryRequestContext
from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.kafka import (
    DeadLetter,
    ensure_topics,
    make_producer,
    pipeline_topics,
)
from mongomem.adapters.mongo import Document
from mongomem.codec import encode
from mongomem.errors import BrokerError, MessageDecodeError
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import Role, SessionKey, Snapshot, SnapshotTurn, Turn, utcnow
from mongomem.operations.restarts import record_restart
from mongomem.service import make_app, start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings
from mongomem.spaces import AsyncSpaces, RecallSettings, SearchKey
from mongomem.stages.runtime import PublishedDeadLetters
from mongomem.stages.runtime.kafka import KafkaPublisher
from mongomem.stages.windowing.sinks import snapshot_document

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EMBEDDER = HashingEmbedder(64)  # a stand-in embedder, not a model
KEY = "inspector-env-key-0123456789abcdef"
OTHER_KEY = "inspector-other-key-0123456789abcd"
PROJECT = "travel"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "inspector"
TRIP = SessionKey(project_id=PROJECT, user_id="ada", session_id="trip-1")
SNAP = Snapshot.make_id(TRIP, 1, 2)
SNAP_2 = Snapshot.make_id(TRIP, 3, 3)


def with_keys(settings: Settings) -> Settings:
    keys = (SecretStr(f"{PROJECT}:{KEY}"), SecretStr(f"elsewhere:{OTHER_KEY}"))
    return settings.model_copy(
        update={
            "service": settings.service.model_copy(update={"api_keys": keys}),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
        }
    )


def _snapshot(turns: list[Turn], snapshot_id: str) -> Document:
    snap = Snapshot(
        snapshot_id=snapshot_id,
        project_id=PROJECT,
        user_id="ada",
        session_id="trip-1",
        first_seq=turns[0].seq,
        last_seq=turns[-1].seq,
        reason="count",
        closed_at=utcnow(),
        turns=tuple(
            SnapshotTurn(
                turn_id=t.turn_id,
                seq=t.seq,
                role=t.role,
                content=t.content,
                created_at=t.created_at,
            )
            for t in turns
        ),
    )
    return snapshot_document(snap)


async def seed(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    """Turns, two snapshots, a memory with two versions, a space of each kind, dead letters."""
    db = mongo[settings.mongodb.database]
    async with AsyncMemory(project_id=PROJECT, settings=settings, embedder=EMBEDDER) as memory:
        ada = memory.bind(MemoryRequestContext(user_id="ada", session_id="trip-1"))
        said = [
            await ada.record_turn("user", "I live in Lisbon and fly from LIS."),
            await ada.record_turn("assistant", "Noted: Lisbon, LIS."),
            await ada.record_turn("user", "I moved to Porto, so OPO now."),
        ]
        await memory.bind(MemoryRequestContext(user_id="bob", session_id="s-bob")).record_turn(
            "user", "Hello there."
        )
    await db["snapshots"].insert_many([_snapshot(said[:2], SNAP), _snapshot(said[2:], SNAP_2)])
    store = MemoryStore(db)
    await store.setup(probe=False)
    first = utcnow() - timedelta(minutes=5)
    await store.reconcile(
        candidate(
            "semantic",
            project_id=PROJECT,
            user_id="ada",
            snapshot=SNAP,
            label="home-airport",
            text="Flies from LIS (Lisbon).",
            at=first,
        )
    )
    await store.reconcile(
        candidate(
            "semantic",
            project_id=PROJECT,
            user_id="ada",
            snapshot=SNAP_2,
            label="home-airport",
            text="Flies from OPO (Porto).",
            position=1,
        )
    )
    await store.reconcile(
        candidate(
            "semantic",
            project_id="elsewhere",
            user_id="eve",
            snapshot="snap-eve",
            label="secret",
            text="Eve's secret.",
        )
    )
    async with AsyncSpaces(settings, project_id=PROJECT, embedder=EMBEDDER, client=mongo) as spaces:
        keys = [SearchKey(argument="question", weight=3)]
        await spaces.create_space("refunds", keys=keys, recall=RecallSettings(threshold=0.1))
        for question, outcome in [
            ("refund for a damaged blender", "refund approved"),
            ("reset the router password", "sent the reset guide"),
        ]:
            await spaces.add_item("refunds", inputs={"question": question}, outcome=outcome)
        await spaces.create_space(
            "escalations", keys=keys, kind="escalation", recall=RecallSettings(threshold=0.1)
        )
        await spaces.resolve_escalation(
            "escalations",
            inputs={"question": "blender arrived broken"},
            resolution="send a new blender",
            outcome="replaced",
        )
    await record_restart(settings, "reconciler", BrokerError("broker went away"))
    await record_restart(settings, "reconciler", BrokerError("broker went away again"))
    kafka = settings.kafka
    await ensure_topics(kafka, pipeline_topics(kafka, ["reconciler"]))
    producer = make_producer(kafka)
    await producer.start()
    try:
        for project, error in [(PROJECT, "the travel letter"), ("elsewhere", "eve's letter")]:
            where = SessionKey(project_id=project, user_id="u", session_id="s")
            when = utcnow()
            turn = SnapshotTurn(turn_id="t-1", seq=1, role=Role.USER, content="x", created_at=when)
            original = Snapshot(
                snapshot_id=Snapshot.make_id(where, 1, 1),
                **where.model_dump(),
                first_seq=1,
                last_seq=1,
                reason="end",
                closed_at=when,
                turns=(turn,),
            )
            letter = DeadLetter.of(
                stage="reconciler",
                topic="t",
                partition=0,
                offset=7,
                key=None,
                value=encode(original),
                error=MessageDecodeError(error),
                attempts=3,
            )
            await PublishedDeadLetters(KafkaPublisher(producer), kafka).send(letter, None)
    finally:
        await producer.stop()


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    configured = with_keys(settings)
    await seed(configured, mongo)
    running = await start_server(make_app(configured, embedder=EMBEDDER))
    try:
        yield running.url
    finally:
        await running.stop()


async def get(url: str, path: str, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        return await client.get(path)


async def test_the_routes_answer_for_the_keys_project_only(url: str) -> None:
    answer = await get(url, "/v1/inspector/users")
    assert answer.status_code == 200, answer.text
    users = answer.json()["result"]
    assert {u["user_id"]: (u["sessions"], u["turns"], u["memories"]) for u in users} == {
        "ada": (1, 3, 1),
        "bob": (1, 1, 0),
    }
    assert (await get(url, "/v1/inspector/users", OTHER_KEY)).json()["result"] == [
        {
            "user_id": "eve",
            "turns": 0,
            "sessions": 0,
            "memories": 1,
            "project_memories": 0,
            "last_activity": None,
        }
    ]
    assert (await get(url, "/v1/inspector/users", None)).status_code == 401
    assert (await get(url, f"/v1/inspector/snapshots/{SNAP}", OTHER_KEY)).status_code == 404
    snap = (await get(url, f"/v1/inspector/snapshots/{SNAP}")).json()["result"]
    assert [t["content"] for t in snap["turns"]] == [
        "I live in Lisbon and fly from LIS.",
        "Noted: Lisbon, LIS.",
    ]
    status = (await get(url, "/v1/inspector/pipeline")).json()["result"]
    assert [d["error"] for d in status["dead_letters"]] == ["the travel letter"]
    assert status["hidden_dead_letters"] == 1
    [restarts] = status["restarts"]
    assert (restarts["stage"], restarts["restarts"]) == ("reconciler", 2)
    assert restarts["last_error"] == "BrokerError: broker went away again"
    assert status["dead_letter_counts"]["reconciler"] == 2
    assert {g["group"].rsplit(".", 1)[-1] for g in status["groups"]} >= {"windowing", "reconciler"}


async def test_the_page_is_static_and_confined(url: str) -> None:
    page = await get(url, "/ui", None)
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from another origin
    script = await get(url, "/ui/app.js", None)
    assert script.headers["content-type"].startswith("text/javascript")
    assert "sessionStorage" in script.text
    assert "/ui" not in json.dumps((await get(url, "/openapi.json", None)).json()["paths"])


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium: `make setup` installs Debian's chromium (as root)")
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def test_every_view_in_chromium(url: str, browser: Any) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    page = await context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    async def ready(hash_: str) -> None:
        await page.wait_for_selector(f'#view[data-ready="{hash_}"]', timeout=20_000)

    async def shot(name: str) -> None:
        await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    # a wrong key is refused and forgotten; the right one opens the project
    await page.goto(f"{url}/ui")
    await page.fill("#key", "not-a-key")
    await page.click("#login button")
    await page.wait_for_selector("#login-error:has-text('not accepted')")
    await page.fill("#key", KEY)
    await page.click("#login button")
    await ready("#/users")
    assert await page.evaluate("sessionStorage.getItem('mongomem.inspector.key')") == KEY
    users = await page.inner_text("#users")  # the list ("every" of the note has "eve" in it)
    assert "ada" in users
    assert "bob" in users
    assert "eve" not in users
    await shot("users")

    await page.click("text=ada")
    await ready("#/user/ada")
    text = await page.inner_text("#view")
    assert "trip-1" in text
    assert "Flies from OPO (Porto)." in text
    await page.fill("#search-query", "Porto OPO")
    await page.click("#search button")
    await page.wait_for_selector("#search-results table")
    assert "home-airport" in await page.inner_text("#search-results")
    await shot("user")

    await page.click("text=trip-1")
    await ready("#/session/ada/trip-1")
    assert "I moved to Porto, so OPO now." in await page.inner_text("#view")
    await page.go_back()
    await ready("#/user/ada")

    await page.click("#view td a:has-text('home-airport')")
    await page.wait_for_selector('#view[data-ready^="#/memory/ada/"]')
    assert await page.locator(".version").count() == 2
    memory = await page.inner_text("#view")
    assert "I live in Lisbon and fly from LIS." in memory  # the first version's evidence turns
    assert "I moved to Porto, so OPO now." in memory
    assert "ambiguous at ≥ 0.8" in memory  # the thresholds of the decision log
    assert "ADD" in memory
    assert "UPDATE" in memory
    await shot("memory")

    await page.click("text=Pipeline")
    await ready("#/pipeline")
    status = await page.inner_text("#view")
    assert "the travel letter" in status
    assert "eve's letter" not in status
    assert "reconciler" in status
    assert "BrokerError: broker went away again" in status  # the stage restarts
    await shot("pipeline")

    await page.click("text=Playground")
    await ready("#/playground")
    await page.select_option("#space", "refunds")
    await page.fill("#inputs", '{"question": "my blender is damaged, refund?"}')
    await page.click("#recall")
    await page.wait_for_selector("#playground-results table")
    results = await page.inner_text("#playground-results")
    assert "refund approved" in results
    assert any(c.isdigit() for c in results.split("Near misses")[0])  # scores shown
    await page.select_option("#space", "escalations")
    await page.click("#check-escalation")
    await page.wait_for_selector("#playground-results .escalation")
    assert "apply: replaced" in await page.inner_text("#playground-results")
    await shot("playground")

    assert errors == []
    assert all(KEY not in u for u in urls)  # the key never travels in a URL
    await context.close()


async def test_search_counts_and_recall_in_chromium(
    url: str, browser: Any, settings: Settings
) -> None:
    """Issue 25: search covers every type by default (the type is a filter); the users
    page counts what a user's page lists (the project's terms too); no stray "null"."""
    async with AsyncMemory(
        project_id=PROJECT, settings=with_keys(settings), embedder=EMBEDDER
    ) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="ada"))
        await chat.save_taxonomic("airline", "red-eye", "An overnight flight.")  # the project's
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{url}/ui")
    await page.fill("#key", KEY)
    await page.click("#login button")
    await page.wait_for_selector('#view[data-ready="#/users"]', timeout=20_000)
    row = await page.inner_text("#view tr:has(a:text-is('ada'))")
    assert row.split("\t")[3] == "2 (1 shared by the project)"  # the rule, said
    await page.click("text=ada")
    await page.wait_for_selector('#view[data-ready="#/user/ada"]', timeout=20_000)
    listed = await page.locator("#view td a[href^='#/memory/']").count()  # before a search
    assert listed == 2  # home-airport and the project's red-eye
    heading = await page.inner_text("#memory-count")
    assert heading == "Memories: 2, 1 shared by the project (taxonomic terms)"

    assert await page.input_value("#search-type") == ""  # "all types" is the default
    await page.fill("#search-query", "overnight flight red-eye")
    await page.click("#search button")
    await page.wait_for_selector("#search-results table")
    found = await page.inner_text("#search-results")
    assert "taxonomic" in found
    assert "semantic" in found  # both types, ranked together
    await page.select_option("#search-type", "semantic")  # the type as a filter
    await page.click("#search button")
    for _ in range(200):  # the filtered answer replaces the results (no eval: the CSP)
        if "taxonomic" not in await page.inner_text("#search-results"):
            break
        await page.wait_for_timeout(50)
    assert "taxonomic" not in await page.inner_text("#search-results")
    assert "home-airport" in await page.inner_text("#search-results")

    await page.click("text=Playground")
    await page.wait_for_selector('#view[data-ready="#/playground"]', timeout=20_000)
    await page.select_option("#space", "refunds")
    await page.fill("#inputs", '{"question": "my blender is damaged, refund?"}')
    await page.click("#recall")
    await page.wait_for_selector("#playground-results table")
    assert "null" not in await page.inner_text("#playground-results")
    assert errors == []
    await context.close()
