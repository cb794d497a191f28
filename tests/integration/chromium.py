"""The system Chromium for the inspector's browser tests, driven by Playwright.

``make setup`` installs Debian's ``chromium``; ``MONGOMEM_CHROMIUM`` names another
binary. Without one the browser tests skip with how to get it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest


def chromium_path() -> str | None:
    """The system Chromium (``make setup`` installs it), or ``MONGOMEM_CHROMIUM``."""
    given = os.environ.get("MONGOMEM_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@asynccontextmanager
async def headless_chromium() -> AsyncIterator[Any]:
    """A launched headless Chromium (skips the test when there is none)."""
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


async def open_inspector(browser: Any, url: str, key: str) -> tuple[Any, Any, list[str]]:
    """A new page signed in to the inspector at ``url`` with ``key``: (context, page,
    the page's script errors as they come)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{url}/ui")
    await page.fill("#key", key)
    await page.click("#login button")
    await page.wait_for_selector('#view[data-ready="#/users"]', timeout=30_000)
    return context, page, errors


async def goto(page: Any, hash_: str) -> None:
    """Open a view by its address and wait until it is shown."""
    await page.goto(page.url.split("#")[0] + hash_)
    await page.wait_for_selector(f'#view[data-ready="{hash_}"]', timeout=30_000)


async def until(read: Callable[[], Awaitable[Any]], wanted: Any, timeout_s: float = 30.0) -> Any:
    """Read until the value is ``wanted`` (or ``wanted(value)`` holds), polled every 50 ms
    (no ``wait_for_function``: the page's CSP allows no evaluated script); the last value."""
    check = wanted if callable(wanted) else (lambda value: value == wanted)
    value = await read()
    for _ in range(int(timeout_s / 0.05)):
        if check(value):
            return value
        await asyncio.sleep(0.05)
        value = await read()
    raise AssertionError(f"still {value!r} after {timeout_s} s")
