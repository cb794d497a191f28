"""The eval harness's ingestion against an SDK double (SPEC K5).

The processing status of a session in which no turn was recorded raises
``NotFound``; the harness asks it before recording (to resume a session cut
short), so a first run must read that as "nothing stored yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mongomem.errors import NotFound
from mongomem.evaluation.datasets import EvalConversation, EvalSession, EvalTurn
from mongomem.evaluation.harness import Checkpoint, _ingest
from mongomem.sdk import MemoryRequestContext

AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@dataclass
class Status:
    last_turn_seq: int


@dataclass
class FakeMemory:
    """Sessions as lists of recorded turns; the status raises NotFound as the real one does."""

    turns: dict[str, list[str]] = field(default_factory=dict)
    ends: list[str] = field(default_factory=list)
    waited: list[str] = field(default_factory=list)

    def bind(self, ctx: MemoryRequestContext) -> FakeBound:
        assert ctx.session_id is not None
        return FakeBound(self, ctx.session_id)


@dataclass
class FakeBound:
    memory: FakeMemory
    session: str

    async def processing_status(self) -> Status:
        if not self.memory.turns.get(self.session):
            raise NotFound(f"no session {self.session!r}: no turn was recorded in it")
        return Status(last_turn_seq=len(self.memory.turns[self.session]))

    async def record_turn(self, role: str, content: str, meta: Any, **_: Any) -> None:
        self.memory.turns.setdefault(self.session, []).append(content)

    async def end_session(self) -> None:
        self.memory.ends.append(self.session)

    async def wait_until_processed(self, **_: Any) -> Status:
        self.memory.waited.append(self.session)
        return await self.processing_status()  # NotFound for a session never recorded


def conversation() -> EvalConversation:
    def session(name: str, *texts: str) -> EvalSession:
        turns = tuple(EvalTurn(role="user", content=t, at=AT) for t in texts)
        return EvalSession(name=name, at=AT, turns=turns)

    return EvalConversation(
        conversation_id="c",
        sessions=(session("s1", "a", "b"), session("s2", "c"), session("empty")),
        questions=(),
    )


async def test_first_run_records_every_session_then_waits_only_on_recorded_ones(
    tmp_path: Path,
) -> None:
    memory = FakeMemory()
    cp = Checkpoint(tmp_path / "checkpoint.jsonl")
    await _ingest(memory, conversation(), "u", cp, 5.0)  # type: ignore[arg-type]
    assert memory.turns == {"s1": ["a", "b"], "s2": ["c"]}
    assert memory.ends == ["s1", "s2"]
    assert memory.waited == ["s1", "s2"]  # the empty session is never asked about
    assert cp.done("session") == {"c/s1", "c/s2"}


async def test_a_session_cut_short_gets_only_its_missing_turns(tmp_path: Path) -> None:
    memory = FakeMemory(turns={"s1": ["a"]})  # a crash after s1's first turn
    cp = Checkpoint(tmp_path / "checkpoint.jsonl")
    await _ingest(memory, conversation(), "u", cp, 5.0)  # type: ignore[arg-type]
    assert memory.turns == {"s1": ["a", "b"], "s2": ["c"]}
    assert memory.ends == ["s1", "s2"]
