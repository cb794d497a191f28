"""The optional judge that settles the ambiguous similarity band.

:class:`Judge` is the seam; :class:`LLMJudge` asks any object with the
``structured(messages, schema, schema_name=...)`` method of
:mod:`mongomem.llm` (the OpenAI-compatible adapter) and
:class:`ScriptedJudge` is the test double. The judge is consulted only when
:func:`~mongomem.ltm.plan.plan_reconcile` says ``needs_judge``; its answer is
recorded in the decision log with the scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from mongomem.ltm.plan import Neighbour, Verdict
from mongomem.models import Action, MemoryCandidate

__all__ = ["Judge", "JudgeAnswer", "LLMJudge", "ScriptedJudge", "StructuredLLM"]


class Judge(Protocol):
    """Says whether a candidate adds, updates or reinforces one existing memory."""

    async def judge(self, candidate: MemoryCandidate, existing: Neighbour) -> Verdict: ...


class JudgeAnswer(BaseModel):
    """The JSON the LLM must answer with."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["ADD", "UPDATE", "REINFORCE"]
    reason: str


class _Result(Protocol):
    @property
    def value(self) -> Any: ...


class StructuredLLM(Protocol):
    """The part of :class:`mongomem.llm.LLM` the judge needs."""

    async def structured(
        self, messages: Sequence[Mapping[str, str]], schema: Any, *, schema_name: str
    ) -> Any: ...


_SYSTEM = (
    "You maintain a long-term memory. Compare a NEW memory with an EXISTING one of the "
    "same kind and owner. Answer REINFORCE if NEW says the same thing as EXISTING, UPDATE "
    "if NEW replaces or corrects EXISTING (the same subject, a changed fact), ADD if they "
    "are about different things. Give a one-sentence reason."
)


class LLMJudge:
    """A :class:`Judge` backed by an OpenAI-compatible model (see :mod:`mongomem.llm`)."""

    def __init__(self, llm: StructuredLLM) -> None:
        self._llm = llm

    async def judge(self, candidate: MemoryCandidate, existing: Neighbour) -> Verdict:
        user = (
            f"KIND: {candidate.memory_type}\n"
            f"EXISTING (key {existing.key!r}): {existing.text}\n"
            f"NEW (key {candidate.key!r}): {candidate.text}"
        )
        result = await self._llm.structured(
            [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}],
            JudgeAnswer,
            schema_name="reconcile_verdict",
        )
        answer = JudgeAnswer.model_validate(result.value)
        return Verdict(
            memory_id=existing.memory_id, action=Action(answer.action), reason=answer.reason
        )


class ScriptedJudge:
    """A test double: answers with ``decide(candidate, existing)`` and counts calls."""

    def __init__(self, decide: Callable[[MemoryCandidate, Neighbour], Action]) -> None:
        self._decide = decide
        self.calls = 0

    async def judge(self, candidate: MemoryCandidate, existing: Neighbour) -> Verdict:
        self.calls += 1
        action = self._decide(candidate, existing)
        return Verdict(memory_id=existing.memory_id, action=action, reason="scripted")
