"""``/docs`` renders offline from the package's Swagger UI, under ``/ui``'s CSP (issue 25).

A real headless Chromium (the system's, driven by Playwright) opens ``/docs`` with
every request that is not to the service refused, as on a machine with no network;
the page must render the service's operations with no script error and no CSP
violation. Before, the page loaded Swagger UI from a CDN (unpinned, no integrity)
and was blank offline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient
from test_inspector import ARTIFACTS, EMBEDDER, chromium_path, with_keys

from mongomem.adapters.mongo import Document
from mongomem.service import make_app, start_server
from mongomem.service.docs import SWAGGER_UI_VERSION
from mongomem.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    running = await start_server(make_app(with_keys(settings), embedder=EMBEDDER))
    try:
        yield running.url
    finally:
        await running.stop()


@pytest.fixture
async def chromium() -> AsyncIterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium: `make setup` installs Debian's chromium (as root)")
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def test_the_docs_page_and_its_assets_are_the_packages_under_the_uis_csp(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        page = await client.get("/docs")
        ui = await client.get("/ui")
        bundle = await client.get("/docs/swagger-ui-bundle.js")
        css = await client.get("/docs/swagger-ui.css")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == ui.headers["content-security-policy"]
    assert "'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text  # every asset is the service's own
    assert "<script>" not in page.text  # no inline script: the CSP allows none
    assert bundle.status_code == css.status_code == 200
    assert bundle.headers["content-security-policy"] == ui.headers["content-security-policy"]
    assert len(bundle.content) > 500_000  # Swagger UI itself, not a stub
    assert SWAGGER_UI_VERSION.startswith("5.")  # OpenAPI 3.1 needs Swagger UI 5


async def test_the_docs_page_renders_in_chromium_with_no_network(url: str, chromium: Any) -> None:
    context = await chromium.new_context(viewport={"width": 1280, "height": 900})
    outside: list[str] = []

    async def offline(route: Any) -> None:
        if route.request.url.startswith(url):
            await route.continue_()
        else:  # as on a machine with no network
            outside.append(route.request.url)
            await route.abort()

    await context.route("**/*", offline)
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on(
        "console",
        lambda msg: problems.append(msg.text) if msg.type in ("error", "warning") else None,
    )
    await page.goto(f"{url}/docs")
    await page.wait_for_selector(".opblock", timeout=30_000)  # the operations are listed
    title = await page.inner_text(".info .title")
    assert "mongomem memory service" in title
    operations = await page.locator(".opblock").count()
    assert operations > 40
    assert (
        "import_user" in await page.content()
        or await page.locator(
            ".opblock-summary-path[data-path='/v1/users/{user_id}/import']"
        ).count()
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "docs.png"))
    assert outside == []
    assert [p for p in problems if "Content Security Policy" in p or "Refused" in p] == []
    await context.close()
