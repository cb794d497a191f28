"""The example of docs/concepts/time-and-speakers.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mongomem.settings import Settings

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "time-and-speakers.md"


def test_the_time_and_speakers_example_runs(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    namespace: dict[str, Any] = {}
    exec(compile(example, str(PAGE), "exec"), namespace)
    memory, chat = namespace["memory"], namespace["chat"]
    try:
        assert namespace["then"].text == "The user prefers aisle seats."
        assert [h.memory.text for h in namespace["old"]] == ["The user prefers aisle seats."]
        assert "aisle seats. (said " in namespace["context"].text
        assert namespace["nothing_yet"] == []
        turns = chat.recent_turns(10)
        assert [t.speaker for t in turns] == ["Melanie", "Caroline"]
        assert chat.search_semantic("seat", subject="Melanie") == []  # the user's seat
    finally:
        memory.close()
