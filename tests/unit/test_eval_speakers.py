"""The LoCoMo loader and the eval ingestion keep both speakers (SPEC L3).

LoCoMo is two people talking: neither is an assistant. Every turn is recorded
as a ``user`` turn with its own ``speaker``, by the QA harness and by the
retrieval harness alike. The fixture is written here (LoCoMo-shaped, not
LoCoMo's data).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mongomem.errors import NotFound
from mongomem.evaluation import retrieval
from mongomem.evaluation.datasets import read_locomo
from mongomem.evaluation.harness import Checkpoint, _ingest
from mongomem.sdk import MemoryRequestContext

SAMPLE = {
    "sample_id": "two-people",
    "conversation": {
        "speaker_a": "Melanie",
        "speaker_b": "Caroline",
        "session_1_date_time": "4:04 pm on 20 January, 2023",
        "session_1": [
            {"speaker": "Melanie", "dia_id": "D1:1", "text": "I ran a charity race yesterday."},
            {"speaker": "Caroline", "dia_id": "D1:2", "text": "I went to a support group."},
            {"speaker": "Caroline", "dia_id": "D1:3", "text": "It helped a lot."},
            {"speaker": "Melanie", "dia_id": "D1:4", "text": "Glad to hear it!"},
        ],
    },
    "qa": [
        {
            "question": "What did Caroline attend?",
            "answer": "a support group",
            "evidence": ["D1:2"],
            "category": 1,
        },
    ],
}


def fixture(tmp_path: Path) -> Path:
    path = tmp_path / "two_people.json"
    path.write_text(json.dumps([SAMPLE]))
    return path


@dataclass
class Recorder:
    """An SDK double keeping each recorded turn's role and speaker."""

    turns: list[tuple[str, str | None, str]] = field(default_factory=list)

    def bind(self, ctx: MemoryRequestContext) -> Recorder:
        return self

    async def processing_status(self) -> Any:
        if not self.turns:
            raise NotFound("no turn recorded yet")
        return type("Status", (), {"last_turn_seq": len(self.turns)})()

    async def record_turn(
        self, role: str, content: str, meta: Any = None, *, speaker: str | None = None, **_: Any
    ) -> None:
        self.turns.append((role, speaker, content))

    async def end_session(self) -> None:
        return None

    async def wait_until_processed(self, **_: Any) -> Any:
        return await self.processing_status()


def test_both_speakers_are_user_turns_with_their_names(tmp_path: Path) -> None:
    [conv] = read_locomo(fixture(tmp_path))
    turns = conv.sessions[0].turns
    assert [t.role for t in turns] == ["user"] * 4  # no speaker is recorded as "assistant"
    assert [t.speaker for t in turns] == ["Melanie", "Caroline", "Caroline", "Melanie"]
    assert turns[1].content == "Caroline: I went to a support group."
    assert "assistant" not in conv.transcript()
    assert "Caroline: I went to a support group." in conv.transcript()


async def test_the_qa_harness_records_each_speaker(tmp_path: Path) -> None:
    [conv] = read_locomo(fixture(tmp_path))
    memory = Recorder()
    await _ingest(memory, conv, "u", Checkpoint(tmp_path / "cp.jsonl"), 5.0)  # type: ignore[arg-type]
    assert [(role, speaker) for role, speaker, _ in memory.turns] == [
        ("user", "Melanie"),
        ("user", "Caroline"),
        ("user", "Caroline"),
        ("user", "Melanie"),
    ]


async def test_the_retrieval_harness_records_each_speaker(tmp_path: Path) -> None:
    [conv] = read_locomo(fixture(tmp_path))
    memory = Recorder()
    await retrieval._ingest(memory, conv, "u")  # type: ignore[arg-type]
    assert [speaker for _, speaker, _ in memory.turns] == [
        "Melanie",
        "Caroline",
        "Caroline",
        "Melanie",
    ]
    assert {role for role, _, _ in memory.turns} == {"user"}
