"""The examples of docs/guides/integrations.md run as written (against the test servers)."""

from __future__ import annotations

import asyncio
import gc
import re
from pathlib import Path
from typing import Any

import pytest

from mongomem.models import Action
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "integrations.md"


def example(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    (found,) = [b for b in blocks if marker in b]
    return str(found)


@pytest.fixture
def env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `make run` gives the examples: the servers, an embedder (the stand-in here)."""
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")


def run(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "guide"}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    return namespace


async def test_the_langgraph_example_runs(env: None) -> None:
    pytest.importorskip("langgraph")
    # the sync SDK runs its own loop: keep the example off this test's loop
    done = await asyncio.to_thread(run, example("MongomemStore(memory)"))
    assert done["item"].value == {"content": "The user's home airport is Boston."}
    assert done["hits"][0].key == "home-airport"
    assert [v.action for v in done["versions"]] == [Action.ADD, Action.UPDATE]


async def test_the_openai_agents_example_runs(env: None) -> None:
    pytest.importorskip("agents")
    done = await asyncio.to_thread(run, example("MongomemSession("))
    items = done["items"]
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[1]["call_id"] == "call_1"


def open_sqlite_connections() -> list[Any]:
    """The aiosqlite connections of this process not closed yet (after a collection)."""
    import aiosqlite

    gc.collect()
    live = [o for o in gc.get_objects() if isinstance(o, aiosqlite.Connection)]
    return [c for c in live if c._connection is not None]  # what its close() clears


async def test_the_llamaindex_example_runs(env: None, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_index.core")
    before = open_sqlite_connections()
    await asyncio.to_thread(run, example("MongomemMemoryBlock("))
    assert "The user prefers aisle seats." in capsys.readouterr().out
    # it closes LlamaIndex's chat store: no aiosqlite connection is left for a later test
    # to find deleted unclosed (a ResourceWarning there)
    left = [c for c in open_sqlite_connections() if all(c is not b for b in before)]
    assert left == []


async def test_the_crewai_example_runs(env: None) -> None:
    pytest.importorskip("crewai", reason="crewai has an environment of its own (see the guide)")
    done = await asyncio.to_thread(run, example("MongomemStorage("))
    assert done["found"]
