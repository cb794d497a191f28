"""The README's SDK example runs as written (against the test servers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pipeline.settings import Settings

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_sdk_example_runs(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "from pipeline.sdk import Memory" in b]
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
