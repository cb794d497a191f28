"""The inspector shows both clocks, the original phrase, subjects and speakers (SPEC L1, L3),
in Chromium: memory lists, search results, a memory's versions and a session's turns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from test_inspector import EMBEDDER, KEY, PROJECT, browser, with_keys

from mongomem import AsyncMemory, MemoryRequestContext
from mongomem.adapters.mongo import Document
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import EventTime, Evidence, stable_id
from mongomem.service import make_app, start_server
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

__all__ = ["browser"]  # the Chromium fixture of the inspector tests

MAY_8 = datetime(2023, 5, 8, 19, 0, tzinfo=UTC)
JUNE_2 = datetime(2023, 6, 2, 19, 0, tzinfo=UTC)


def said(label: str, text: str, at: datetime, ref: str, **extra: Any) -> Any:
    if "title" in extra:
        fields = {"title": extra.pop("title"), "content": text}
    else:
        fields = {"label": label, "text": text}
    kind = "episodic" if "title" in fields else "semantic"
    made = candidate(kind, project_id=PROJECT, user_id="mel", snapshot=ref, **fields)
    evidence = Evidence(source="snapshot", ref=ref, session_id="club", user_id="mel", at=at)
    cid = stable_id("cand", "dates", ref, label)
    return made.model_copy(update={"evidence": evidence, "candidate_id": cid, **extra})


async def seed(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    async with AsyncMemory(project_id=PROJECT, settings=settings, embedder=EMBEDDER) as memory:
        club = memory.bind(MemoryRequestContext(user_id="mel", session_id="club"))
        await club.record_turn(
            "user", "I ran a charity race yesterday.", speaker="Melanie", at=MAY_8
        )
        await club.record_turn("user", "Well done!", speaker="Caroline", at=MAY_8)
    store = MemoryStore(mongo[settings.mongodb.database])
    await store.setup(probe=False)
    race = EventTime(valid_from=date(2023, 5, 7), valid_to=date(2023, 5, 7), phrase="yesterday")
    since = EventTime(valid_from=date(2020, 1, 1), phrase="since 2020")
    for c in [
        said(
            "race",
            "Melanie ran a charity race.",
            MAY_8,
            "snap-r",
            title="Charity race",
            subject="Melanie",
            event=race,
        ),
        said(
            "caroline-job",
            "Caroline is a counsellor in Leeds.",
            JUNE_2,
            "snap-j2",
            subject="Caroline",
            event=since,
        ),
        # older, processed after: it enters history at its place
        said(
            "caroline-job",
            "Caroline is a counsellor in York.",
            MAY_8,
            "snap-j1",
            subject="Caroline",
            event=since,
        ),
    ]:
        await store.reconcile(c)


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    configured = with_keys(settings)
    await seed(configured, mongo)
    running = await start_server(make_app(configured, embedder=EMBEDDER))
    try:
        yield running.url
    finally:
        await running.stop()


async def test_dates_phrases_subjects_and_speakers_in_chromium(url: str, browser: Any) -> None:
    page = await (await browser.new_context(viewport={"width": 1280, "height": 860})).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    async def ready(hash_: str) -> None:
        await page.wait_for_selector(f'#view[data-ready="{hash_}"]', timeout=20_000)

    await page.goto(f"{url}/ui")
    await page.fill("#key", KEY)
    await page.click("#login button")
    await ready("#/users")
    await page.click("text=mel")
    await ready("#/user/mel")
    listed = await page.inner_text("#view")
    for shown in ("said", "holds / happened", "about"):
        assert shown in listed.lower()  # the column headers (upper-cased by the style)
    assert '2023-05-07 ("yesterday")' in listed  # the event, resolved, with its phrase
    assert "2023-05-08" in listed  # when the race was said
    assert "2023-06-02" in listed  # the current job was said last
    assert 'from 2020-01-01 ("since 2020")' in listed
    assert "Melanie" in listed
    assert "Caroline" in listed

    await page.fill("#search-query", "counsellor")
    await page.click("#search button")
    await page.wait_for_selector("#search-results table")
    found = await page.inner_text("#search-results")
    assert "2023-06-02" in found
    assert "since 2020" in found

    await page.click("text=club")
    await ready("#/session/mel/club")
    session = await page.inner_text("#view")
    assert "speaker" in session.lower()
    assert "Melanie" in session
    assert "Caroline" in session
    await page.go_back()
    await ready("#/user/mel")

    await page.click("#view td a:has-text('caroline-job')")
    await page.wait_for_selector('#view[data-ready^="#/memory/mel/"]')
    dates = [await d.inner_text() for d in await page.query_selector_all(".version .dates")]
    assert len(dates) == 2
    assert any(d.startswith("said 2023-05-08") for d in dates), dates  # York, in history
    assert any(d.startswith("said 2023-06-02") for d in dates), dates  # Leeds, current
    assert all('from 2020-01-01 ("since 2020")' in d and "about Caroline" in d for d in dates)
    assert errors == []
