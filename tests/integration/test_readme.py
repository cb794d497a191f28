"""The README's SDK examples run as written (against the test servers)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.service import make_app, start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_sdk_example_runs(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    (example,) = [b for b in python_blocks() if "context = chat.build_context" in b]
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    namespace: dict[str, Any] = {}
    exec(compile(example, str(README), "exec"), namespace)
    memory, chat, context = namespace["memory"], namespace["chat"], namespace["context"]
    try:
        assert chat.get_taxonomic_term("airline", "red-eye") is not None
        assert "home airport" in context.text.lower()
    finally:
        memory.close()


async def test_readme_http_example_runs(settings: Settings) -> None:
    """The "Over HTTP" example, against the service started as the README says."""
    (example,) = [b for b in python_blocks() if "base_url=" in b]
    key = "travel-agent-readme-key-0123456789"
    served = settings.model_copy(
        update={
            "service": settings.service.model_copy(
                update={"api_keys": (SecretStr(f"travel-agent:{key}"),)}
            ),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
        }
    )
    runner = await start_server(make_app(served, embedder=HashingEmbedder(64)))
    host, port = "127.0.0.1", runner.port
    namespace: dict[str, Any] = {"KEY": key}
    code = example.replace("http://127.0.0.1:8080", f"http://{host}:{port}")
    try:
        # The sync SDK runs its own event loop: keep it off this test's loop.
        await asyncio.to_thread(exec, compile(code, str(README), "exec"), namespace)
        chat = namespace["chat"]
        found = await asyncio.to_thread(chat.get_semantic, "home-airport")
        assert found is not None
        assert "Boston" in found.text
    finally:
        await asyncio.to_thread(namespace["memory"].close)
        await runner.stop()


def test_readme_lifecycle_example_runs(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    (example,) = [b for b in python_blocks() if "chat.delete_memory(" in b]
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    namespace: dict[str, Any] = {}
    exec(compile(example, str(README), "exec"), namespace)
    assert namespace["done"].reason == "the user asked"
    assert [i.key for i in namespace["page"].items] == ["seat"]
    assert namespace["status"].state == "done"  # no snapshot yet: nothing pending


def test_readme_export_example_runs(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (example,) = [b for b in python_blocks() if "memory.export_user(" in b]
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(example, str(README), "exec"), namespace)
    assert (namespace["exported"].versions, namespace["imported"].memories) == (1, 1)
    assert (tmp_path / "user_1.jsonl").read_text().count("\n") == 4  # header, 1, 1, end
