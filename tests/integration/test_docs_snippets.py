"""Every python block of README.md and docs/ runs as written (doc_snippets.py says how).

Each block runs on its own, in a reader's fresh folder with a database of its own;
then the README's and the getting-started page's blocks run in order, in one folder
on one database, as a reader follows them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from doc_snippets import (
    GETTING_STARTED,
    PRINTS,
    README,
    Ran,
    Snippet,
    all_snippets,
    missing_extra,
    reader_folder,
    run_snippet,
    snippets,
)
from pydantic import SecretStr

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.service import make_app, start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings

pytestmark = pytest.mark.integration

KEY = "docs-snippet-key-0123456789abcdef"


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[str]:
    """`mongomem serve` as the HTTP guide starts it, with a key of the snippet's project."""
    served = settings.model_copy(
        update={
            "service": settings.service.model_copy(
                update={"api_keys": (SecretStr(f"travel-agent:{KEY}"),)}
            ),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
        }
    )
    runner = await start_server(make_app(served, embedder=HashingEmbedder(64)))
    try:
        yield f"http://127.0.0.1:{runner.port}"
    finally:
        await runner.stop()


def _case(snippet: Snippet) -> Any:
    """``snippet`` as a test case, skipped (saying which extra it needs) where that extra is
    not installed, before any server is started for it."""
    reason = missing_extra(snippet)
    skipped = pytest.mark.skipif(reason is not None, reason=reason or "")
    return pytest.param(snippet, id=snippet.name, marks=skipped)


def _cases(*, over_http: bool) -> list[Any]:
    return [_case(s) for s in all_snippets() if s.needs_service == over_http]


def _passed(snippet: Snippet, ran: Ran) -> None:
    assert ran.returncode == 0, f"{snippet.name} failed:\n{ran.stderr}"
    assert ran.warnings == [], f"{snippet.name} warned:\n{ran.stderr}"
    for marker, (first, last) in PRINTS.items():
        if marker in snippet.code:
            lines = ran.stdout.splitlines()
            assert lines[: len(first)] == first, ran.stdout
            assert not last or lines[-len(last) :] == last, ran.stdout


def test_the_docs_have_snippets_to_run() -> None:
    found = all_snippets()
    assert snippets(README), "the README's agent snippet"
    assert len(snippets(GETTING_STARTED)) >= 2
    assert len(found) >= 9
    assert any(s.needs_service for s in found)  # the HTTP guide's
    assert len({s.name for s in found}) == len(found)


@pytest.mark.parametrize("snippet", _cases(over_http=False))
async def test_each_snippet_runs_as_written(
    snippet: Snippet, settings: Settings, tmp_path: Path
) -> None:
    _passed(snippet, await run_snippet(snippet, reader_folder(settings, tmp_path)))


@pytest.mark.parametrize("snippet", _cases(over_http=True))
async def test_each_http_snippet_runs_against_the_service(
    snippet: Snippet, settings: Settings, tmp_path: Path, service: str
) -> None:
    folder = reader_folder(settings, tmp_path)
    _passed(snippet, await run_snippet(snippet, folder, service_url=service, key=KEY))


async def test_readme_then_getting_started_in_order_in_one_folder(
    settings: Settings, tmp_path: Path
) -> None:
    """Issue 25: a reader runs every snippet of both, one after the other, and all pass."""
    folder = reader_folder(settings, tmp_path)
    ordered = snippets(README) + snippets(GETTING_STARTED)
    for snippet in ordered:
        assert not snippet.needs_service
        assert missing_extra(snippet) is None  # a newcomer's path needs no extra extra
        _passed(snippet, await run_snippet(snippet, folder))
