"""The inspector's turn search (SPEC M2): a user's whole conversation searched with the
filters of ``search_turns``, each hit with its session, date, speaker, ranks and, on
request, its neighbours, in a real headless Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from chromium import goto, open_inspector
from pymongo import AsyncMongoClient
from test_inspector import ARTIFACTS, EMBEDDER, KEY, PROJECT, browser, with_keys

from mongomem import AsyncMemory, MemoryRequestContext
from mongomem.adapters.mongo import Document
from mongomem.models import utcnow
from mongomem.service import make_app, start_server
from mongomem.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

__all__ = ["browser"]  # the Chromium fixture of the inspector tests

LISBON = datetime(2024, 5, 6, 9, 0, tzinfo=UTC)
PORTO = datetime(2024, 9, 10, 9, 0, tzinfo=UTC)
HEADERS = ["score", "ranks", "session", "said", "speaker", "turn"]
WEATHER = "Rain all day again, awful weather."


async def seed(settings: Settings) -> None:
    """Ana and Ben in two sessions months apart; the same small talk two weeks ago and
    yesterday."""
    now = utcnow()
    sessions: dict[str, list[tuple[str, str, str, datetime]]] = {
        "lisbon": [
            ("user", "Ana", "We booked the kiln workshop in Lisbon.", LISBON),
            ("assistant", "Ben", "Lovely! When is it?", LISBON + timedelta(minutes=1)),
            ("user", "Ana", "On Thursday, after the pottery class.", LISBON + timedelta(minutes=2)),
        ],
        "porto": [
            ("user", "Ana", "The kiln in Porto was closed, no workshop.", PORTO),
            ("assistant", "Ben", "Try the pottery studio in Gaia.", PORTO + timedelta(minutes=1)),
        ],
        "weather-old": [("user", "Ana", WEATHER, now - timedelta(days=14))],
        "weather-new": [("user", "Ana", WEATHER, now - timedelta(days=1))],
    }
    async with AsyncMemory(project_id=PROJECT, settings=settings, embedder=EMBEDDER) as memory:
        for session, turns in sessions.items():
            chat = memory.bind(MemoryRequestContext(user_id="ana", session_id=session))
            for role, speaker, text, at in turns:
                await chat.record_turn(role, text, speaker=speaker, at=at)


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    configured = with_keys(settings)
    await seed(configured)
    running = await start_server(make_app(configured, embedder=EMBEDDER))
    try:
        yield running.url
    finally:
        await running.stop()


async def search(page: Any, query: str, **fields: str) -> None:
    """Fill the form (every filter given or cleared) and wait for its answer."""
    await page.fill("#turns-query", query)
    for name in ("sessions", "speaker", "since", "until"):
        await page.fill(f"#turns-{name}", fields.get(name, ""))
    await page.select_option("#turns-neighbours", fields.get("neighbours", "0"))
    await page.click("#turn-search button[type=submit]")
    await page.wait_for_selector('#turns-results[data-done="yes"]', timeout=30_000)


async def rows(page: Any) -> list[list[str]]:
    """The result table's cells, row by row."""
    found: list[list[str]] = []
    for row in await page.locator("#turns-results tbody tr").all():
        found.append([c.strip() for c in await row.locator("td").all_inner_texts()])
    return found


async def api_search(page: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The HTTP route's answer to the same search, asked from the page."""
    answer: list[dict[str, Any]] = await page.evaluate(
        """async ([key, body]) => {
          const r = await fetch('/v1/users/ana/turns/search', {method: 'POST',
            headers: {Authorization: `Bearer ${key}`, 'Content-Type': 'application/json'},
            body: JSON.stringify(body)});
          return (await r.json()).result;
        }""",
        [KEY, body],
    )
    return answer


def shown_ranks(ranks: dict[str, Any]) -> str:
    """How the page writes a hit's ranks ("–": that retriever did not return it)."""
    place = lambda r: "–" if r is None else str(r)  # noqa: E731
    text = (
        f"words {place(ranks['lexical_rank'])} · meaning {place(ranks['dense_rank'])} · "
        f"fused {ranks['fused_rank']}"
    )
    return text + (f" · time {ranks['time_rank']}" if ranks.get("time_rank") else "")


async def test_turn_hits_show_session_date_speaker_and_the_apis_ranks(
    url: str, browser: Any
) -> None:
    context, page, errors = await open_inspector(browser, url, KEY)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    await page.click("text=ana")
    await page.wait_for_selector('#view[data-ready="#/user/ana"]', timeout=30_000)
    await page.click("#turn-search-link")
    await page.wait_for_selector('#view[data-ready="#/turns/ana"]', timeout=30_000)
    await search(page, "kiln workshop")
    headers = await page.locator("#turns-results th").all_inner_texts()
    assert [h.lower() for h in headers] == HEADERS
    found = await rows(page)
    assert found[0][2:] == [
        "lisbon",
        "2024-05-06 09:00 UTC",
        "Ana (user)",
        "We booked the kiln workshop in Lisbon.",
    ]
    assert {r[2] for r in found} >= {"lisbon", "porto"}  # every session is searched
    # the ranks are the API's for the same search, in its order
    answer = await api_search(page, {"query": "kiln workshop", "limit": 10})
    assert [r[1] for r in found] == [shown_ranks(h["ranks"]) for h in answer]
    assert [r[5] for r in found] == [h["turn"]["content"] for h in answer]
    # the session is a link to its turns
    await page.click("#turns-results tbody tr:first-child a")
    await page.wait_for_selector('#view[data-ready="#/session/ana/lisbon"]', timeout=30_000)
    assert all(r.startswith(url) for r in requests), requests  # nothing from elsewhere
    assert errors == []
    await context.close()


async def test_the_filters_narrow_the_hits_and_neighbours_come_on_request(
    url: str, browser: Any
) -> None:
    context, page, errors = await open_inspector(browser, url, KEY)
    await goto(page, "#/turns/ana")

    await search(page, "kiln workshop pottery", speaker="Ben")
    found = await rows(page)
    assert found
    assert {r[4] for r in found} == {"Ben (assistant)"}

    await search(page, "kiln workshop pottery", sessions="porto, weather-old")
    chosen = {r[2] for r in await rows(page)}
    assert "porto" in chosen
    assert chosen <= {"porto", "weather-old"}, chosen

    # whole UTC days, both inclusive: the Porto session's day alone
    await search(page, "kiln workshop pottery", since="2024-09-10", until="2024-09-10")
    assert {r[2] for r in await rows(page)} == {"porto"}
    await search(page, "kiln workshop pottery", until="2024-06-01")
    assert {r[2] for r in await rows(page)} == {"lisbon"}

    # no neighbours unless asked; then the turns around the hit, in session order
    await search(page, "booked the kiln workshop in Lisbon", sessions="lisbon")
    assert await page.locator("#turns-results .around").count() == 0
    await search(page, "booked the kiln workshop in Lisbon", sessions="lisbon", neighbours="1")
    first = page.locator("#turns-results tbody tr:first-child .around .turn")
    assert await first.all_inner_texts() == [
        "1 Ana (user): We booked the kiln workshop in Lisbon.",
        "2 Ben (assistant): Lovely! When is it?",
    ]
    hit = page.locator("#turns-results tbody tr:first-child .around .hit")
    assert await hit.inner_text() == "1 Ana (user): We booked the kiln workshop in Lisbon."
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "turn-search.png"), full_page=True)

    # the service's refusal is shown, not a table
    await search(page, "kiln", since="2024-09-11", until="2024-09-10")
    assert await page.locator("#turns-results table").count() == 0
    refused = await page.inner_text("#turns-results .error")
    assert "since" in refused, refused
    assert errors == []
    await context.close()


async def test_a_time_expression_boosts_the_turns_said_in_its_window(
    url: str, browser: Any
) -> None:
    context, page, errors = await open_inspector(browser, url, KEY)
    await goto(page, "#/turns/ana")
    await search(page, "awful weather two weeks ago")
    found = await rows(page)
    assert found[0][2] == "weather-old"  # said two weeks ago: the same words, boosted
    assert found[0][1].endswith(" · time 1"), found[0]
    assert not any("time" in r[1] for r in found if r[2] == "weather-new")
    assert errors == []
    await context.close()
