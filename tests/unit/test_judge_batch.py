"""One judge call per snapshot and type (SPEC I6): batched questions, verdicts by id."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import SecretStr

from mongomem.adapters.llm import OpenAILLM
from mongomem.ltm.judge import (
    BATCH_SYSTEM_PROMPT,
    JudgeQuestion,
    LLMJudge,
    Prefetched,
    ScriptedJudge,
    prefetch,
)
from mongomem.models import Action
from mongomem.settings import LLMSettings
from mongomem.testing import Answer, FakeOpenAIServer

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def question(n: int, snapshot: str = "snap-1", memory_type: str = "semantic") -> JudgeQuestion:
    return JudgeQuestion(
        memory_type=memory_type,
        memory_id=f"mem-{n}",
        same_key=True,
        existing_key=f"key-{n}",
        existing_text=f"old text {n}",
        new_key=f"key-{n}",
        new_text=f"new text {n}",
        new_stated_at=AT,
        candidate_id=f"cand-{n}",
        source_ref=snapshot,
        project_id="p",
    )


def verdict(qid: str, action: str) -> dict[str, str]:
    return {"id": qid, "action": action, "reason": "r"}


async def test_one_call_answers_every_question_each_verdict_tied_by_id() -> None:
    questions = [question(n) for n in range(3)]
    with FakeOpenAIServer() as server:
        server.script(  # out of order: the ids, not the positions, tie them
            Answer(
                {
                    "verdicts": [
                        verdict("q3", "ADD"),
                        verdict("q1", "UPDATE"),
                        verdict("q2", "REINFORCE"),
                    ]
                }
            )
        )
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
        try:
            verdicts = await LLMJudge(llm).judge_many(questions)
        finally:
            await llm.close()
        (request,) = server.chat_requests
    assert request.schema_name == "reconcile_verdicts"
    assert request.messages[0]["content"].startswith(BATCH_SYSTEM_PROMPT)
    sent = json.loads(request.messages[1]["content"])["questions"]
    # every per-candidate field the single question shows, under its id
    assert sent[1] == {"id": "q2", **questions[1].body()}
    assert {i: v.action for i, v in verdicts.items()} == {
        0: Action.UPDATE,
        1: Action.REINFORCE,
        2: Action.ADD,
    }
    assert [verdicts[i].memory_id for i in range(3)] == ["mem-0", "mem-1", "mem-2"]


async def test_missing_unknown_and_repeated_verdicts_are_left_out() -> None:
    questions = [question(n) for n in range(3)]
    answer = {
        "verdicts": [
            verdict("q1", "ADD"),
            verdict("q2", "ADD"),
            verdict("q2", "UPDATE"),  # two verdicts for one question: neither counts
            verdict("q9", "ADD"),  # no such question
        ]
    }
    with FakeOpenAIServer() as server:
        server.script(Answer(answer))
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
        try:
            verdicts = await LLMJudge(llm).judge_many(questions)
        finally:
            await llm.close()
    assert list(verdicts) == [0]  # q3 missing, q2 ambiguous, q9 unknown


async def test_prefetch_batches_per_snapshot_and_falls_back_alone() -> None:
    judge = ScriptedJudge(lambda q: Action.UPDATE)
    batch = [question(0), question(1), question(2, memory_type="episodic"), question(3, "snap-2")]
    batch.append(question(4, "snap-2"))
    batch.append(question(5, "snap-3"))
    primed = await prefetch(judge, batch)
    assert isinstance(primed, Prefetched)
    # snap-1 (three questions of two types) and snap-2 (two) in one call each; the lone
    # question of snap-3 is not batched (one call either way)
    assert [len(b) for b in judge.batches] == [3, 2]
    for q in batch:
        assert (await primed.judge(q)).action is Action.UPDATE
    assert primed.reused == 5
    assert judge.questions == [batch[5]]  # asked alone
    # a question that changed since the batch (another text) is asked alone too
    changed = batch[0].model_copy(update={"existing_text": "changed"})
    await primed.judge(changed)
    assert judge.questions[-1] == changed
    assert judge.round_trips == 4  # two batches, two questions alone


async def test_a_failed_batch_means_asking_alone() -> None:
    class Failing(ScriptedJudge):
        async def judge_many(self, questions: object) -> dict[int, object]:  # type: ignore[override]
            from mongomem.errors import ExtractionError

            raise ExtractionError("the batch failed")

    judge = Failing(lambda q: Action.ADD)
    primed = await prefetch(judge, [question(0), question(1)])
    assert primed is judge  # nothing prefetched


async def test_every_judge_call_is_recorded_with_purpose_judge() -> None:
    from mongomem.operations.usage import MemoryUsageRecorder, judge_meters

    usage = MemoryUsageRecorder()
    with FakeOpenAIServer() as server:
        server.script(
            Answer({"action": "UPDATE", "reason": "changed"}),
            Answer({"verdicts": [verdict("q1", "ADD"), verdict("q2", "ADD")]}),
        )
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key=SecretStr("k")))
        judge = LLMJudge(llm, meter_for=judge_meters(usage))
        try:
            await judge.judge(question(0))
            await judge.judge_many([question(1, "snap-2"), question(2, "snap-2")])
        finally:
            await llm.close()
        received = [r.call_id for r in server.chat_requests]
    assert usage.call_ids == received  # each request the endpoint received, once
    assert [(k.purpose, k.ref, k.name) for k in usage.started] == [
        ("judge", "snap-1", "semantic"),
        ("judge", "snap-2", "semantic"),
    ]
    assert len(usage.answers) == 2


async def test_the_stand_in_answers_a_batch_as_it_answers_each_question() -> None:
    from mongomem.adapters.llm import StandInLLM

    questions = [question(0), question(1).model_copy(update={"new_text": "old text 1"})]
    questions.append(question(2).model_copy(update={"new_key": "other"}))
    llm = StandInLLM(LLMSettings(use_stand_in=True))
    try:
        judge = LLMJudge(llm)
        alone = [(await judge.judge(q)).action for q in questions]
        together = await judge.judge_many(questions)
    finally:
        await llm.close()
    assert alone == [Action.UPDATE, Action.REINFORCE, Action.ADD]
    assert [together[i].action for i in range(3)] == alone
