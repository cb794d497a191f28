"""The judge that settles what the deterministic rules leave open.

:func:`decide` plans with :func:`~mongomem.ltm.plan.plan_reconcile` and,
when the plan says ``needs_judge``, builds a :class:`JudgeQuestion` — both
statements, both keys, the memory type, the dates of the existing memory's
evidence, the candidate's snapshot time, the event dates of each (when the
fact holds or the event happened, as the conversation said it: SPEC L1) and
the value differences found — and plans again with the verdict. The two
clocks are labelled apart, so the judge can tell an older event told later
from a change. The store (direct saves and the reconciler
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
from mongomem.models import Action, EventTime, Frozen, MemoryCandidate

__all__ = [
    "BATCH_SYSTEM_PROMPT",
    "BatchJudge",
    "ExistingTimes",
    "Judge",
    "JudgeAnswer",
    "JudgeBatchAnswer",
    "JudgeQuestion",
    "JudgeVerdict",
    "LLMJudge",
    "MeterFor",
    "Prefetched",
    "ScriptedJudge",
    "StatedTimes",
    "StructuredLLM",
    "decide",
    "prefetch",
    "question_for",
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
    #: When the existing memory's fact holds or its event happened (SPEC L1), if said.
    existing_event: EventTime | None = None
    new_key: str
    new_text: str
    #: When the new statement was made (its snapshot's time, or the direct save's).
    new_stated_at: AwareDatetime
    #: When the new statement's fact holds or its event happened (SPEC L1), if said.
    new_event: EventTime | None = None
    #: Value differences found deterministically (:func:`mongomem.ltm.values.value_changes`).
    differences: tuple[str, ...] = ()
    #: The key the extraction model said the new statement corrects, if any (a hint).
    model_says_corrects: str | None = None
    #: Not shown to the judge: the candidate, and what its calls are accounted to (the
    #: candidate's snapshot, or direct save, its project, user and session).
    candidate_id: str = ""
    source_ref: str = ""
    project_id: str = ""
    #: Whose statement it is (the accounting record carries it, so an erasure finds it).
    user_id: str | None = None
    session_id: str | None = None

    @classmethod
    def of(
        cls,
        candidate: MemoryCandidate,
        existing: Neighbour,
        decision: Decision,
        evidence_at: Iterable[datetime] = (),
        existing_event: EventTime | None = None,
    ) -> JudgeQuestion:
        return cls(
            memory_type=candidate.memory_type,
            memory_id=existing.memory_id,
            same_key=normalize_key(existing.key) == normalize_key(candidate.key),
            existing_key=existing.key,
            existing_text=existing.text,
            existing_evidence_at=tuple(sorted(evidence_at)),
            existing_event=_given(existing_event),
            new_key=candidate.key,
            new_text=candidate.text,
            new_stated_at=candidate.evidence.at,
            new_event=_given(candidate.event),
            differences=decision.differences,
            model_says_corrects=candidate.corrects,
            candidate_id=candidate.candidate_id,
            source_ref=candidate.evidence.ref,
            project_id=candidate.scope.project_id,
            user_id=candidate.scope.user_id or candidate.evidence.user_id,
            session_id=candidate.evidence.session_id,
        )

    def render(self) -> str:
        """The question as the JSON document :class:`LLMJudge` sends (stable key order)."""
        return json.dumps(self.body(), ensure_ascii=False, indent=1)

    def body(self) -> dict[str, Any]:
        """What the judge is shown of this question: every per-candidate field, the same in a
        question asked alone and in a batch (:meth:`LLMJudge.judge_many`)."""
        return {
            "memory_type": self.memory_type,
            "same_key": self.same_key,
            "existing": {
                "key": self.existing_key,
                "text": self.existing_text,
                "evidence_dates": [d.isoformat() for d in self.existing_evidence_at],
                "event_dates": _event_body(self.existing_event),
            },
            "new": {
                "key": self.new_key,
                "text": self.new_text,
                "stated_at": self.new_stated_at.isoformat(),
                "event_dates": _event_body(self.new_event),
            },
            "detected_value_differences": list(self.differences),
            "extraction_model_says_it_corrects": self.model_says_corrects,
        }


def _given(event: EventTime | None) -> EventTime | None:
    """``event``, or ``None`` when it says nothing (so equal questions compare equal)."""
    return None if event is None or event.empty else event


def _event_body(event: EventTime | None) -> dict[str, str | None] | None:
    """An event time as the judge reads it: ISO dates and the conversation's phrase;
    ``None`` when the conversation gave no date."""
    if event is None:
        return None
    return {
        "valid_from": None if event.valid_from is None else event.valid_from.isoformat(),
        "valid_to": None if event.valid_to is None else event.valid_to.isoformat(),
        "phrase": event.phrase,
    }


class Judge(Protocol):
    """Says whether a candidate adds, updates or reinforces one existing memory."""

    async def judge(self, question: JudgeQuestion) -> Verdict: ...


class BatchJudge(Judge, Protocol):
    """A judge that can also answer many questions in one call (SPEC I6).

    :meth:`judge_many` returns a verdict per question it could answer, by
    position; a question missing from the answer (or answered invalidly) is
    simply absent, and the caller asks it alone with :meth:`judge`.
    """

    async def judge_many(self, questions: Sequence[JudgeQuestion]) -> dict[int, Verdict]: ...


class Prefetched:
    """A :class:`Judge` that first answers from verdicts given in advance for the very same
    questions (asked in a batch), and asks ``inner`` alone for anything else.

    A verdict is used only for a question equal to the one it was given for (same
    statements, keys, dates and differences): the decision is the one the judge
    would have made asked alone.
    """

    def __init__(self, inner: Judge, verdicts: Mapping[JudgeQuestion, Verdict]) -> None:
        self._inner = inner
        self._verdicts = dict(verdicts)
        self.reused = 0

    async def judge(self, question: JudgeQuestion) -> Verdict:
        verdict = self._verdicts.pop(question, None)
        if verdict is not None:
            self.reused += 1
            return verdict
        return await self._inner.judge(question)


async def prefetch(judge: Judge | None, questions: Sequence[JudgeQuestion]) -> Judge | None:
    """``judge`` primed with one batched call per candidates' snapshot (all its memory types
    together: each question names its type) of two or more ``questions``; ``judge`` itself
    when it cannot batch or there is nothing to batch.

    A failed batch only means asking each question alone later.
    """
    judge_many = getattr(judge, "judge_many", None)
    if judge is None or judge_many is None:
        return judge
    groups: dict[str, list[JudgeQuestion]] = {}
    for question in dict.fromkeys(questions):  # the same question once
        groups.setdefault(question.source_ref, []).append(question)
    verdicts: dict[JudgeQuestion, Verdict] = {}
    for group in groups.values():
        if len(group) < 2:
            continue  # asked alone anyway: one call either way
        try:
            answered = await judge_many(group)
        except MongomemError as exc:
            log.warning("batched judge call failed (%s); asking one question at a time", exc)
            continue
        for index, verdict in answered.items():
            verdicts[group[index]] = verdict
    return Prefetched(judge, verdicts) if verdicts else judge


class StatedTimes(Frozen):
    """The two clocks of the version the judge is asked about (SPEC L1): when its
    evidence was said, and when its fact holds or its event happened (if said)."""

    evidence_at: tuple[AwareDatetime, ...] = ()
    event: EventTime | None = None


#: Given the neighbour the judge is asked about, the :class:`StatedTimes` of its version.
ExistingTimes = Callable[[Neighbour], Awaitable[StatedTimes]]


async def _no_times(_: Neighbour) -> StatedTimes:
    return StatedTimes()


async def question_for(
    candidate: MemoryCandidate,
    neighbours: Sequence[Neighbour],
    thresholds: Thresholds,
    existing_times: ExistingTimes = _no_times,
) -> JudgeQuestion | None:
    """The question :func:`decide` would ask the judge about ``candidate``, if any."""
    decision = plan_reconcile(candidate, neighbours, thresholds)
    if not decision.needs_judge:
        return None
    return await _question(candidate, neighbours, decision, existing_times)


async def _question(
    candidate: MemoryCandidate,
    neighbours: Sequence[Neighbour],
    decision: Decision,
    existing_times: ExistingTimes,
) -> JudgeQuestion | None:
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
        return None
    target = max(
        (n for n in neighbours if n.memory_id == target.memory_id), key=lambda n: n.version
    )
    times = await existing_times(target)
    return JudgeQuestion.of(candidate, target, decision, times.evidence_at, times.event)


async def decide(
    candidate: MemoryCandidate,
    neighbours: Sequence[Neighbour],
    thresholds: Thresholds,
    judge: Judge | None,
    existing_times: ExistingTimes = _no_times,
) -> Decision:
    """Plan against ``neighbours``, asking ``judge`` when the plan leaves it open."""
    decision = plan_reconcile(candidate, neighbours, thresholds)
    if not decision.needs_judge or judge is None:
        return decision
    question = await _question(candidate, neighbours, decision, existing_times)
    if question is None:
        return decision
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


class JudgeVerdict(BaseModel):
    """One verdict of a batched answer, tied to its question by ``id``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    action: Literal["ADD", "UPDATE", "REINFORCE"]
    reason: str


class JudgeBatchAnswer(BaseModel):
    """The JSON the LLM must answer a batch of questions with: one verdict per id."""

    model_config = ConfigDict(extra="forbid")

    verdicts: list[JudgeVerdict]


class StructuredLLM(Protocol):
    """The part of :class:`mongomem.adapters.llm.LLM` the judge needs (``meter`` is the
    :class:`~mongomem.adapters.llm.CallMeter` of the call, or ``None``)."""

    async def structured(
        self,
        messages: Sequence[Mapping[str, str]],
        schema: Any,
        *,
        schema_name: str,
        meter: Any = None,
    ) -> Any: ...


#: Given a question (the first of a batch), the meter its call is accounted with, or None.
MeterFor = Callable[[JudgeQuestion], Any]


SYSTEM_PROMPT = (
    "You maintain a long-term memory. You are shown an EXISTING memory and a NEW statement "
    "of the same kind and owner, as JSON: their keys (labels), their texts, when the existing "
    "memory was learned and confirmed (evidence_dates), when the new statement was made "
    "(stated_at), when each one's fact holds or its event happened as the conversation said "
    "it (event_dates: ISO valid_from/valid_to and the conversation's own phrase; null when "
    "it gave no date), value differences a deterministic check found (numbers, dates, "
    "units, negations, names, alternatives), and which known memory the extracting model "
    "said NEW corrects, if any. "
    "Answer REINFORCE only if NEW states the same fact with the same values as EXISTING "
    "(a paraphrase). Answer UPDATE if NEW is about the same subject but changes, corrects, "
    "extends or negates it (a changed number, date, place, name, unit or preference is an "
    "UPDATE, and so is adding detail). Answer ADD if NEW is about a different subject, even "
    "under the same key or with similar wording. Listed differences usually mean the value "
    "changed; check that they are real. The dates are when each was said in the "
    "conversation (not when it was processed): a NEW statement said before EXISTING's "
    "latest evidence never replaces it — UPDATE then only records it in history. "
    "The event dates are the other clock: a statement said later can tell of an earlier "
    "event. If NEW's event dates lie before EXISTING's, NEW tells an older event told "
    "later, not a change of EXISTING: answer ADD if it is another event, REINFORCE if it "
    "is the same event told again, and UPDATE only if NEW corrects EXISTING itself "
    "(its value or its own dates). "
    "Give a one-sentence reason."
)


BATCH_SYSTEM_PROMPT = (
    f"{SYSTEM_PROMPT}\n\nYou are given several such questions at once, as a JSON list; each "
    "has an id. Judge each one on its own, exactly as if it were the only one: the questions "
    "are independent. Answer with one verdict per question, with its id."
)


class LLMJudge:
    """A :class:`BatchJudge` backed by an OpenAI-compatible model
    (see :mod:`mongomem.adapters.llm`); each call is accounted with ``meter_for``'s meter."""

    def __init__(self, llm: StructuredLLM, *, meter_for: MeterFor | None = None) -> None:
        self._llm = llm
        self.meter_for = meter_for

    async def judge(self, question: JudgeQuestion) -> Verdict:
        user = question.render()
        result = await self._llm.structured(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            JudgeAnswer,
            schema_name="reconcile_verdict",
            meter=self._meter(question),
        )
        answer = JudgeAnswer.model_validate(result.value)
        return Verdict(
            memory_id=question.memory_id,
            action=Action(answer.action),
            reason=answer.reason,
            input_chars=len(SYSTEM_PROMPT) + len(user),
        )

    async def judge_many(self, questions: Sequence[JudgeQuestion]) -> dict[int, Verdict]:
        """One call for all ``questions``; verdicts by position (see :class:`BatchJudge`).

        Questions get the ids ``q1``, ``q2`` …; a verdict for an unknown id, or a
        second verdict for an id, is ignored (that question is then asked alone).
        """
        if not questions:
            return {}
        body = [{"id": f"q{n}", **q.body()} for n, q in enumerate(questions, 1)]
        user = json.dumps({"questions": body}, ensure_ascii=False, indent=1)
        result = await self._llm.structured(
            [
                {"role": "system", "content": BATCH_SYSTEM_PROMPT},
                {"role": "user", "content": user},
            ],
            JudgeBatchAnswer,
            schema_name="reconcile_verdicts",
            meter=self._meter(questions[0]),
        )
        answer = JudgeBatchAnswer.model_validate(result.value)
        share = (len(BATCH_SYSTEM_PROMPT) + len(user)) // len(questions)
        by_index: dict[int, list[JudgeVerdict]] = {}
        for verdict in answer.verdicts:
            index = _index_of(verdict.id, len(questions))
            if index is not None:
                by_index.setdefault(index, []).append(verdict)
        return {
            index: Verdict(
                memory_id=questions[index].memory_id,
                action=Action(only.action),
                reason=only.reason,
                input_chars=share,
            )
            for index, (only, *more) in by_index.items()
            if not more  # two verdicts for one question: neither is trusted
        }

    def metered(self, meter_for: MeterFor) -> LLMJudge:
        """This judge (the same LLM) with each call accounted with ``meter_for``'s meter."""
        return LLMJudge(self._llm, meter_for=meter_for)

    def _meter(self, question: JudgeQuestion) -> Any:
        return None if self.meter_for is None else self.meter_for(question)


def _index_of(question_id: str, count: int) -> int | None:
    """``q3`` → 2 when there are at least 3 questions; ``None`` for anything else."""
    digits = question_id.strip().removeprefix("q")
    if not digits.isdigit():
        return None
    index = int(digits) - 1
    return index if 0 <= index < count else None


class ScriptedJudge:
    """A test double: answers with ``decide(question)`` and keeps every question asked."""

    def __init__(self, decide: Callable[[JudgeQuestion], Action]) -> None:
        self._decide = decide
        self.questions: list[JudgeQuestion] = []  # asked alone
        self.batches: list[list[JudgeQuestion]] = []  # asked together

    @property
    def calls(self) -> int:
        return len(self.questions)

    async def judge_many(self, questions: Sequence[JudgeQuestion]) -> dict[int, Verdict]:
        """All of ``questions`` in one call (counted in :attr:`batches`)."""
        self.batches.append(list(questions))
        return {i: self._verdict(q) for i, q in enumerate(questions)}

    @property
    def round_trips(self) -> int:
        """Calls made: one per question asked alone, one per batch."""
        return len(self.questions) + len(self.batches)

    async def judge(self, question: JudgeQuestion) -> Verdict:
        self.questions.append(question)
        return self._verdict(question)

    def _verdict(self, question: JudgeQuestion) -> Verdict:
        action = self._decide(question)
        return Verdict(
            memory_id=question.memory_id,
            action=action,
            reason="scripted",
            input_chars=len(question.render()),
        )
