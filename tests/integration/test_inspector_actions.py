"""The inspector's lists, deletions and erasures, counts and recall (issue 25 item 7),
in a real headless Chromium against the real service on the test servers.

* every list is paged by the server: more rows than a page, next and previous;
* a memory is deleted, a session and a user erased, from the page, each behind a
  confirmation (the user id typed for a user); cancel sends nothing; what the page
  did is seen through HTTP and the erasure register, as any other deletion;
* the users page and a user's page count a user's memories by one rule and say it;
* no view shows a stray "null"; a recall with no match says why.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from chromium import goto, headless_chromium, open_inspector, until
from pymongo import AsyncMongoClient
from test_inspector import EMBEDDER, KEY, PROJECT, with_keys

from mongomem import AsyncMemory, MemoryRequestContext
from mongomem.adapters.kafka import DeadLetter, ensure_topics, make_producer, pipeline_topics
from mongomem.adapters.mongo import Document, database
from mongomem.codec import encode
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import InputError, MessageDecodeError
from mongomem.models import Role, SessionKey, Snapshot, SnapshotTurn, utcnow
from mongomem.service import make_app, start_server
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces, RecallSettings, SearchKey
from mongomem.stages.runtime import PublishedDeadLetters
from mongomem.stages.runtime.kafka import KafkaPublisher

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The rows a page of the inspector shows (``PAGE`` in app.js).
PAGE = 25
#: More than a page of each list.
MORE = PAGE + 3
CITIES = [f"city number {n} of the atlas, {'x' * n}" for n in range(MORE)]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with headless_chromium() as launched:
        yield launched


@pytest.fixture
async def configured(settings: Settings) -> Settings:
    return with_keys(settings)


@pytest.fixture
async def url(configured: Settings) -> AsyncIterator[str]:
    running = await start_server(make_app(configured, embedder=EMBEDDER))
    try:
        yield running.url
    finally:
        await running.stop()


async def http(url: str, method: str, path: str) -> Any:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        answer = await client.request(method, path)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


async def rows(page: Any, box: str, row: str) -> list[str]:
    return [" ".join(t.split()) for t in await page.locator(f"#{box} {row}").all_inner_texts()]


async def walk(page: Any, box: str, row: str = "tbody tr") -> list[str]:
    """Every row of the paged list ``box``: a full first page, then next to the last
    page (next disabled there), then previous back to the same first page."""
    await page.wait_for_selector(f'#{box}[data-page="1"]', timeout=30_000)
    first = await rows(page, box, row)
    assert len(first) == PAGE, (box, first)
    assert await page.locator(f"#{box} button.prev").is_disabled()
    seen = list(first)
    shown = 1
    while not await page.locator(f"#{box} button.next").is_disabled():
        await page.click(f"#{box} button.next")
        shown += 1
        await page.wait_for_selector(f'#{box}[data-page="{shown}"]', timeout=30_000)
        seen += await rows(page, box, row)
    assert shown >= 2, box
    for back in range(shown - 1, 0, -1):
        await page.click(f"#{box} button.prev")
        await page.wait_for_selector(f'#{box}[data-page="{back}"]', timeout=30_000)
    assert await rows(page, box, row) == first
    assert len(set(seen)) == len(seen), (box, "a row shown on two pages")
    return seen


async def letters(settings: Settings, n: int) -> None:
    """``n`` dead letters of the project on the reconciler's dead-letter topic."""
    kafka = settings.kafka
    await ensure_topics(kafka, pipeline_topics(kafka, ["reconciler"]))
    producer = make_producer(kafka)
    await producer.start()
    try:
        for i in range(n):
            where = SessionKey(project_id=PROJECT, user_id="u", session_id=f"s{i}")
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
                offset=i,
                key=None,
                value=encode(original),
                error=MessageDecodeError(f"letter {i:02}"),
                attempts=1,
            )
            await PublishedDeadLetters(KafkaPublisher(producer), kafka).send(letter, None)
    finally:
        await producer.stop()


async def test_every_list_is_paged_in_chromium(
    url: str, browser: Any, configured: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        for i in range(MORE):  # users, and ada's sessions
            who = MemoryRequestContext(user_id=f"u{i:02}", session_id="s")
            await memory.bind(who).record_turn("user", "hello")
            await memory.bind(
                MemoryRequestContext(user_id="ada", session_id=f"s{i:02}")
            ).record_turn("user", f"session {i}")
        long = memory.bind(MemoryRequestContext(user_id="ada", session_id="long"))
        for i in range(MORE):
            await long.record_turn("user", f"turn {i}")
        ada = memory.bind(MemoryRequestContext(user_id="ada"))
        for i in range(MORE):
            await ada.save_semantic(f"fact-{i:02}", f"Fact {i}: {'y' * i}")
        for city in CITIES:  # one memory of many versions and decisions
            saved = await ada.save_semantic("home", f"Lives in {city}.")
        await ada.save_taxonomic("travel", "red-eye", "An overnight flight.")  # the project's
    home = saved.memory_id
    versions = await http(url, "GET", f"/v1/users/ada/memory/{home}/history")
    assert len(versions) > PAGE, [v["action"] for v in versions]
    await letters(configured, MORE)
    async with AsyncSpaces(
        configured, project_id=PROJECT, embedder=EMBEDDER, client=mongo
    ) as spaces:
        for i in range(MORE):
            await spaces.create_space(f"space-{i:02}", keys=[SearchKey(argument="question")])

    context, page, errors = await open_inspector(browser, url, KEY)
    users = await walk(page, "users")
    assert len(users) == MORE + 1  # u00 … and ada
    [ada_row] = [r for r in users if r.startswith("ada ")]
    memories = MORE + 2  # the facts, home and the project's term
    assert f" {memories} (1 shared by the project) " in f"{ada_row} "

    await goto(page, "#/user/ada")
    assert len(await walk(page, "sessions")) == MORE + 1  # s00 … and long
    assert len(await walk(page, "memories")) == memories  # the count the users page said
    heading = await page.inner_text("#memory-count")
    assert heading == f"Memories: {memories}, 1 shared by the project (taxonomic terms)"
    await page.select_option("#memory-type", "taxonomic")  # the list's type filter
    await until(lambda: page.locator("#memories tbody tr").count(), 1)
    assert "red-eye" in await page.inner_text("#memories")

    await goto(page, "#/session/ada/long")
    turns = await walk(page, "turns")
    assert [t.split(" ")[0] for t in turns] == [str(n) for n in range(1, MORE + 1)]

    await goto(page, f"#/memory/ada/{home}")
    shown = await walk(page, "versions", ".version")
    assert len(shown) == len(versions)
    decisions = await walk(page, "decisions")
    log = await http(url, "GET", f"/v1/inspector/memories/{home}/decisions?limit=1000")
    assert len(decisions) == log["total"] == len(log["decisions"]) >= MORE

    await goto(page, "#/pipeline")
    dead = await walk(page, "dead-letters")
    assert sorted(re.search(r"letter \d\d", r).group(0) for r in dead) == [  # type: ignore[union-attr]
        f"letter {i:02}" for i in range(MORE)
    ]

    await goto(page, "#/playground")
    shown_spaces = await walk(page, "spaces")
    assert [r.split(" ")[0] for r in shown_spaces] == [f"space-{i:02}" for i in range(MORE)]
    options = await page.locator("#space option").all_inner_texts()
    assert len(options) == PAGE  # the picker offers the page shown
    assert errors == []
    await context.close()


async def test_the_routes_page_on_the_server(url: str, configured: Settings) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        for i in range(5):
            await memory.bind(MemoryRequestContext(user_id=f"u{i}", session_id="s")).record_turn(
                "user", "hi"
            )
        ada = memory.bind(MemoryRequestContext(user_id="ada"))
        for city in CITIES[:4]:
            saved = await ada.save_semantic("home", f"Lives in {city}.")
    users = await http(url, "GET", "/v1/inspector/users?limit=2&offset=1")
    assert [u["user_id"] for u in users] == ["u0", "u1"]  # by id: ada (memories only) first
    everything = await http(url, "GET", f"/v1/users/ada/memory/{saved.memory_id}/history")
    paged = await http(
        url, "GET", f"/v1/users/ada/memory/{saved.memory_id}/history?limit=2&offset=1"
    )
    assert paged == everything[1:3]
    log = await http(
        url, "GET", f"/v1/inspector/memories/{saved.memory_id}/decisions?limit=1&offset=1"
    )
    assert log["total"] == len(everything)
    assert [d["version"] for d in log["decisions"]] == [2]
    async with AsyncSpaces(configured, project_id=PROJECT, embedder=EMBEDDER) as spaces:
        for name in ("c", "a", "b"):
            await spaces.create_space(name, keys=[SearchKey(argument="q")])
        assert [s.space_id for s in await spaces.list_spaces(limit=2, offset=1)] == ["b", "c"]
        with pytest.raises(InputError) as refused:
            await spaces.list_spaces(limit=0)
        assert refused.value.field == "limit"
    page = await http(url, "GET", "/v1/spaces?limit=2&offset=1")
    assert [s["space_id"] for s in page] == ["b", "c"]
    assert len(await http(url, "GET", "/v1/spaces")) == 3  # no limit: every space
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        for path in (
            "/v1/inspector/users?offset=-1",
            "/v1/inspector/pipeline?limit=0",
            "/v1/spaces?limit=0",
            "/v1/spaces?offset=x",
            "/v1/users/ada/memory/x/history?limit=0",
        ):
            assert (await client.get(path)).status_code == 422
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        spec = (await client.get("/openapi.json")).json()["paths"]
    for path in (
        "/v1/inspector/users",
        "/v1/inspector/pipeline",
        "/v1/inspector/memories/{memory_id}/decisions",
        "/v1/users/{user_id}/memory/{memory_id}/history",
        "/v1/spaces",
    ):
        params = {p["name"] for p in spec[path]["get"]["parameters"]}
        assert {"limit", "offset"} <= params, path
        assert "422" in spec[path]["get"]["responses"], path


async def test_delete_a_memory_from_the_page(url: str, browser: Any, configured: Settings) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        ada = memory.bind(MemoryRequestContext(user_id="ada"))
        saved = await ada.save_semantic("home-airport", "Flies from LIS.")
    path = f"/v1/users/ada/memory/{saved.memory_id}"
    context, page, errors = await open_inspector(browser, url, KEY)
    await goto(page, f"#/memory/ada/{saved.memory_id}")
    assert await page.is_hidden("#delete-memory-panel")

    await page.click("#delete-memory")  # opens the confirmation only
    assert await page.is_visible("#delete-memory-panel")
    assert "DELETE version" in await page.inner_text("#delete-memory-panel")
    await page.fill("#delete-memory-reason", "typed by mistake")
    await page.click("#delete-memory-cancel")
    assert await page.is_hidden("#delete-memory-panel")
    await page.wait_for_timeout(300)
    assert (await http(url, "GET", path))["status"] == "current"  # cancel sent nothing

    await page.click("#delete-memory")
    assert await page.input_value("#delete-memory-reason") == ""  # the cancelled reason is gone
    await page.fill("#delete-memory-reason", "moved away")
    await page.click("#delete-memory-go")
    await page.wait_for_selector("#not-current", timeout=30_000)  # the view, read again
    assert "this memory is deleted" in await page.inner_text("#view")
    assert "DELETE" in await page.inner_text("#versions")

    # the same deletion as any other: a DELETE version with the reason, in the decision log
    assert (await http(url, "GET", path))["status"] == "deleted"
    history = await http(url, "GET", f"{path}/history")
    assert (history[-1]["action"], history[-1]["reason"]) == ("DELETE", "moved away")
    log = await http(url, "GET", f"/v1/inspector/memories/{saved.memory_id}/decisions")
    assert [d["action"] for d in log["decisions"]][-1] == "DELETE"
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        assert (
            await memory.bind(MemoryRequestContext(user_id="ada")).get_semantic("home-airport")
            is None
        )
    assert errors == []
    await context.close()


async def test_erase_a_session_and_a_user_from_the_page(
    url: str, browser: Any, configured: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        for user, session in [("ada", "trip-1"), ("ada", "trip-2"), ("bob", "s-bob")]:
            chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session))
            await chat.record_turn("user", f"said in {session}")
        await memory.bind(MemoryRequestContext(user_id="bob")).save_semantic("pet", "Has a cat.")
    register = ErasureRegister(database(mongo, configured.mongodb))
    turns = "/v1/users/ada/browse/sessions/trip-2/turns"
    context, page, errors = await open_inspector(browser, url, KEY)

    await goto(page, "#/session/ada/trip-2")
    await page.click("#erase-session")
    assert "cannot be undone" in await page.inner_text("#erase-session-panel")
    await page.click("#erase-session-cancel")
    await page.wait_for_timeout(300)
    assert not await register.is_erased(PROJECT, "ada", "trip-2")  # cancel sent nothing
    assert len((await http(url, "GET", turns))["items"]) == 1
    await page.click("#erase-session")
    await page.click("#erase-session-go")
    await page.wait_for_selector("#erase-session-result .done", timeout=30_000)
    assert await register.is_erased(PROJECT, "ada", "trip-2")  # recorded as any erasure
    assert not await register.is_erased(PROJECT, "ada", "trip-1")
    sessions = (await http(url, "GET", "/v1/users/ada/browse/sessions"))["items"]
    assert [s["session_id"] for s in sessions] == ["trip-1"]

    await goto(page, "#/user/bob")
    await page.click("#erase-user")
    go = page.locator("#erase-user-go")
    assert await go.is_disabled()  # nothing typed
    await page.fill("#erase-user-typed", "bo")
    assert await go.is_disabled()  # not the user id
    await page.fill("#erase-user-typed", "Bob")
    assert await go.is_disabled()
    await page.click("#erase-user-cancel")
    await page.wait_for_timeout(300)
    assert not await register.is_erased(PROJECT, "bob")  # cancel sent nothing
    assert await http(url, "GET", "/v1/users/bob/browse/memories/count") == 1
    await page.click("#erase-user")
    assert await page.input_value("#erase-user-typed") == ""
    assert await go.is_disabled()
    await page.fill("#erase-user-typed", "bob")
    assert await go.is_enabled()
    await go.click()
    await page.wait_for_selector("#erase-user-result .done", timeout=30_000)
    assert await register.is_erased(PROJECT, "bob")
    assert not await register.is_erased(PROJECT, "ada")
    db = database(mongo, configured.mongodb)
    left = await db["memories"].count_documents(
        {"scope.project_id": PROJECT, "scope.user_id": "bob"}
    )
    assert left == 0
    await page.click("#erase-user-result a")  # back to the users: bob is gone
    await page.wait_for_selector('#view[data-ready="#/users"]', timeout=30_000)
    assert [r.split(" ")[0] for r in await rows(page, "users", "tbody tr")] == ["ada"]
    assert errors == []
    await context.close()


NULL = re.compile(r"\bnull\b")


# (a test name with "null" in it would be in the topic names the pipeline view shows)
async def test_no_view_shows_a_stray_empty_value_and_recall_says_why(
    url: str, browser: Any, configured: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=configured, embedder=EMBEDDER) as memory:
        ada = memory.bind(MemoryRequestContext(user_id="ada", session_id="trip-1"))
        await ada.record_turn("user", "I fly from LIS.")
        saved = await ada.save_semantic("home-airport", "Flies from LIS.")
    async with AsyncSpaces(
        configured, project_id=PROJECT, embedder=EMBEDDER, client=mongo
    ) as spaces:
        keys = [SearchKey(argument="question", weight=3)]
        await spaces.create_space("refunds", keys=keys, recall=RecallSettings(threshold=0.3))
        await spaces.add_item(
            "refunds", inputs={"question": "refund for a damaged blender"}, outcome=None
        )
        await spaces.create_space(
            "escalations", keys=keys, kind="escalation", recall=RecallSettings(threshold=0.3)
        )
        await spaces.resolve_escalation(
            "escalations",
            inputs={"question": "blender arrived broken"},
            resolution="send a new blender",
            outcome="replaced",
        )
        await spaces.create_space(
            "no-resolutions", keys=keys, kind="escalation", recall=RecallSettings(threshold=0.3)
        )
    context, page, errors = await open_inspector(browser, url, KEY)
    for hash_ in (
        "#/users",
        "#/user/ada",
        "#/session/ada/trip-1",
        f"#/memory/ada/{saved.memory_id}",
        "#/pipeline",
    ):
        await goto(page, hash_)
        assert not NULL.search(await page.inner_text("#view")), hash_

    await goto(page, "#/playground")

    shown = [""]

    async def recall(space: str, question: str) -> str:
        await page.select_option("#space", space)
        await page.fill("#inputs", f'{{"question": "{question}"}}')
        await page.click("#recall")
        # the answer replaces the last one (no script of ours runs: the CSP)
        text: str = await until(
            lambda: page.inner_text("#playground-results"), lambda t: t != shown[0]
        )
        shown[0] = text
        assert not NULL.search(text), (space, text)
        return text

    found = await recall("refunds", "damaged blender refund")  # an item without an outcome
    assert "Matches (1)" in found
    applied = await recall("escalations", "blender arrived broken")  # the escalation's match
    assert "Matches (1)" in applied
    assert "send a new blender" in applied
    assert "apply: replaced" in applied
    missed = await recall("escalations", "quarterly tax filing deadline")
    assert "Matches (0)" in missed
    assert re.search(
        r"no match: the best score -?\d\.\d{3} is below the space's threshold 0\.300", missed
    )
    assert "escalate (no resolution applies)" in missed
    empty = await recall("no-resolutions", "blender arrived broken")
    assert "no match: no resolution is stored in this space yet" in empty
    assert errors == []
    await context.close()
