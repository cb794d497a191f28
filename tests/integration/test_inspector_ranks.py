"""The inspector's search explains its ranking (SPEC M1): each hit shows its place by
words (BM25), by meaning (cosine) and fused, in a real headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from test_inspector import KEY, browser, url  # noqa: F401 (the fixtures, as they are there)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_search_hits_show_their_lexical_dense_and_fused_ranks(
    url: str,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{url}/ui")
    await page.fill("#key", KEY)
    await page.click("#login button")
    await page.wait_for_selector('#view[data-ready="#/users"]', timeout=20_000)
    await page.click("text=ada")
    await page.wait_for_selector('#view[data-ready="#/user/ada"]', timeout=20_000)
    await page.select_option("#search-type", "semantic")
    await page.fill("#search-query", "Porto OPO")
    await page.click("#search button")
    await page.wait_for_selector("#search-results table")
    headers = await page.locator("#search-results th").all_inner_texts()
    assert [h.lower() for h in headers][:2] == ["score", "ranks"]
    row = page.locator("#search-results tbody tr:has-text('home-airport')")
    shown = await row.locator(".ranks").inner_text()
    # the API's ranks for the same search, shown as they are
    answer = await page.evaluate(
        """async (key) => {
          const r = await fetch('/v1/users/ada/memories/semantic/search', {method: 'POST',
            headers: {Authorization: `Bearer ${key}`, 'Content-Type': 'application/json'},
            body: JSON.stringify({query: 'Porto OPO', limit: 10})});
          return (await r.json()).result;
        }""",
        KEY,
    )
    ranks = next(h["ranks"] for h in answer if h["memory"]["key"] == "home-airport")
    assert ranks["lexical_rank"] == 1  # "Porto" and "OPO" are its words
    expected = (
        f"words {ranks['lexical_rank']} · meaning {ranks['dense_rank'] or '–'} · "
        f"fused {ranks['fused_rank']}"
    )
    assert shown == expected
    assert errors == []
    await context.close()
