"""The recall guide's examples (docs/guides/recall.md) run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mongomem.settings import Settings

pytestmark = pytest.mark.integration

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "recall.md"


def test_the_recall_guide_runs(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    namespace: dict[str, Any] = {}
    for block in blocks:  # one namespace: the guide's blocks follow on from each other
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert namespace["best"].memory.label == "pet"
    assert namespace["best"].ranks.lexical_rank == 1
    assert namespace["hit"].turn.content == "We booked the kiln workshop in Lisbon."
    assert [t.content for t in namespace["hit"].neighbours] == ["Lovely! When is it?"]
    assert "## From the conversation" in namespace["context"].text
