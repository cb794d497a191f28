"""The judge that settles what the deterministic rules leave open.

:func:`decide` plans with :func:`~mongomem.ltm.plan.plan_reconcile` and,
when the plan says ``needs_judge``, builds a :class:`JudgeQuestion` — both
statements, both keys, the memory type, the dates of the existing memory's
evidence, the candidate's snapshot time and the value differences found — and
plans again with the verdict. The store (direct saves and the reconciler
stage alike) and the decision benchmark all decide through it.

:class:`Judge` is the seam; :class:`LLMJudge` asks any object with the
``structured(messages, schema, schema_name=...)`` method of
:mod:`mongomem.adapters.llm` (the OpenAI-compatible adapter) and
:class:`ScriptedJudge` is the test double. A judge that fails leaves the
judge-less default in place (the stream never stalls on it); the decision
log records the verdict, its reason, the judge's input size and its latency.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import AwareDatetime, BaseModel, ConfigDict

from mongomem.errors import MongomemError
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.plan import Decision, Neighbour, Thresholds, Verdict, plan_reconcile
from mongomem.models import Action, MemoryCandidate

__all__ = [
    "EvidenceDates",
    "Judge",
    "JudgeAnswer",
    "JudgeQuestion",
    "LLMJudge",
    "ScriptedJudge",
    "StructuredLLM",
    "decide",
]

log = logging.getLogger(__name__)


class JudgeQuestion(BaseModel):
    """Everything the judge is shown about one candidate and one existing memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_type: str
    memory_id: str
    same_key: bool
    existing_key: str
    existing_text: str
    #: When the existing memory was learned and each time it was confirmed.
    existing_evidence_at: tuple[AwareDatetime, ...] = ()
    new_key: str
    new_text: str
    #: When the new statement was made (its snapshot's time, or the direct save's).
    new_stated_at: AwareDatetime
    #: Value differences found deterministically (:func:`mongomem.ltm.values.value_changes`).
    differences: tuple[str, ...] = ()
    #: The key the extraction model said the new statement corrects, if any (a hint).
    model_says_corrects: str | None = None

    @classmethod
    def of(
        cls,
        candidate: MemoryCandidate,
        existing: Neighbour,
        decision: Decision,
        evidence_at: Iterable[datetime] = (),
    ) -> JudgeQuestion:
        return cls(
            memory_type=candidate.memory_type,
            memory_id=existing.memory_id,
            same_key=normalize_key(existing.key) == normalize_key(candidate.key),
            existing_key=existing.key,
            existing_text=existing.text,
            existing_evidence_at=tuple(sorted(evidence_at)),
            new_key=candidate.key,
            new_text=candidate.text,
            new_stated_at=candidate.evidence.at,
            differences=decision.differences,
            model_says_corrects=candidate.corrects,
        )

    def render(self) -> str:
        """The question as the JSON document :class:`LLMJudge` sends (stable key order)."""
        body = {
            "memory_type": self.memory_type,
            "same_key": self.same_key,
            "existing": {
                "key": self.existing_key,
                "text": self.existing_text,
                "evidence_dates": [d.isoformat() for d in self.existing_evidence_at],
            },
            "new": {
                "key": self.new_key,
                "text": self.new_text,
                "stated_at": self.new_stated_at.isoformat(),
            },
            "detected_value_differences": list(self.differences),
            "extraction_model_says_it_corrects": self.model_says_corrects,
        }
        return json.dumps(body, ensure_ascii=False, indent=1)


class Judge(Protocol):
    """Says whether a candidate adds, updates or reinforces one existing memory."""

    async def judge(self, question: JudgeQuestion) -> Verdict: ...


#: Given the neighbour the judge is asked about, when its evidence was recorded.
EvidenceDates = Callable[[Neighbour], Awaitable[Sequence[datetime]]]


async def _no_dates(_: Neighbour) -> Sequence[datetime]:
    return ()


async def decide(
    candidate: MemoryCandidate,
    neighbours: Sequence[Neighbour],
    thresholds: Thresholds,
    judge: Judge | None,
    evidence_dates: EvidenceDates = _no_dates,
) -> Decision:
    """Plan against ``neighbours``, asking ``judge`` when the plan leaves it open."""
    decision = plan_reconcile(candidate, neighbours, thresholds)
    if not decision.needs_judge or judge is None:
        return decision
    target = next(
        (
            n
            for n in neighbours
            if n.memory_id == decision.ask_about
            and n.scope == candidate.scope
            and n.memory_type == candidate.memory_type
        ),
        None,
    )
    if target is None:
        return decision
    target = max(
        (n for n in neighbours if n.memory_id == target.memory_id), key=lambda n: n.version
    )
    question = JudgeQuestion.of(candidate, target, decision, await evidence_dates(target))
    started = time.perf_counter()
    try:
        verdict = await judge.judge(question)
    except MongomemError as exc:
        # The judge is an optional refinement: never stall the stream on it.
        log.warning("judge failed (%s); using the judge-less default", exc)
        reason = f"{decision.reason}; judge failed: {type(exc).__name__}"
        return decision.model_copy(update={"reason": reason})
    latency_ms = round((time.perf_counter() - started) * 1000.0, 3)
    judged = plan_reconcile(candidate, neighbours, thresholds, verdict)
    return judged.model_copy(
        update={"judge_input_chars": verdict.input_chars, "judge_latency_ms": latency_ms}
    )


class JudgeAnswer(BaseModel):
    """The JSON the LLM must answer with."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["ADD", "UPDATE", "REINFORCE"]
    reason: str


class StructuredLLM(Protocol):
    """The part of :class:`mongomem.adapters.llm.LLM` the judge needs."""

    async def structured(
        self, messages: Sequence[Mapping[str, str]], schema: Any, *, schema_name: str
    ) -> Any: ...


SYSTEM_PROMPT = (
    "You maintain a long-term memory. You are shown an EXISTING memory and a NEW statement "
    "of the same kind and owner, as JSON: their keys (labels), their texts, when the existing "
    "memory was learned and confirmed, when the new statement was made, and value differences "
    "a deterministic check found (numbers, dates, units, negations, names, alternatives), "
    "and which known memory the extracting model said NEW corrects, if any. "
    "Answer REINFORCE only if NEW states the same fact with the same values as EXISTING "
    "(a paraphrase). Answer UPDATE if NEW is about the same subject but changes, corrects, "
    "extends or negates it (a changed number, date, place, name, unit or preference is an "
    "UPDATE, and so is adding detail). Answer ADD if NEW is about a different subject, even "
    "under the same key or with similar wording. Listed differences usually mean the value "
    "changed; check that they are real. The dates are when each was said in the "
    "conversation (not when it was processed): a NEW statement said before EXISTING's "
    "latest evidence never replaces it — UPDATE then only records it in history. "
    "Give a one-sentence reason."
)


class LLMJudge:
    """A :class:`Judge` backed by an OpenAI-compatible model (see :mod:`mongomem.adapters.llm`)."""

    def __init__(self, llm: StructuredLLM) -> None:
        self._llm = llm

    async def judge(self, question: JudgeQuestion) -> Verdict:
        user = question.render()
        result = await self._llm.structured(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            JudgeAnswer,
            schema_name="reconcile_verdict",
        )
        answer = JudgeAnswer.model_validate(result.value)
        return Verdict(
            memory_id=question.memory_id,
            action=Action(answer.action),
            reason=answer.reason,
            input_chars=len(SYSTEM_PROMPT) + len(user),
        )


class ScriptedJudge:
    """A test double: answers with ``decide(question)`` and keeps every question asked."""

    def __init__(self, decide: Callable[[JudgeQuestion], Action]) -> None:
        self._decide = decide
        self.questions: list[JudgeQuestion] = []

    @property
    def calls(self) -> int:
        return len(self.questions)

    async def judge(self, question: JudgeQuestion) -> Verdict:
        self.questions.append(question)
        action = self._decide(question)
        return Verdict(
            memory_id=question.memory_id,
            action=action,
            reason="scripted",
            input_chars=len(question.render()),
        )
