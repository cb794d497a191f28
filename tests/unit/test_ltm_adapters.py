"""The judge and the ``$vectorSearch`` adapter against test doubles (no servers)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from mongomem.errors import LLMUnavailable
from mongomem.ltm import AtlasVectorSearch, LLMJudge, Neighbour, ScriptedJudge
from mongomem.ltm.judge import JudgeAnswer, StatedTimes, decide
from mongomem.ltm.plan import Thresholds
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryScope

ME = MemoryScope(project_id="p1", user_id="u1")


@dataclass
class _Result:
    value: Any


class FakeLLM:
    def __init__(self, answer: JudgeAnswer | Exception) -> None:
        self.answer = answer
        self.prompts: list[Sequence[Mapping[str, str]]] = []

    async def structured(
        self,
        messages: Sequence[Mapping[str, str]],
        schema: Any,
        *,
        schema_name: str,
        meter: Any = None,
    ) -> _Result:
        self.prompts.append(messages)
        if isinstance(self.answer, Exception):
            raise self.answer
        assert schema is JudgeAnswer
        return _Result(self.answer)


def neighbour(sim: float) -> Neighbour:
    return Neighbour(
        memory_id="mem_1",
        version=1,
        memory_type="semantic",
        scope=ME,
        key="home-airport",
        text="The user's home airport is Boston.",
        similarity=sim,
    )


LEARNED = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
STATED = datetime(2026, 3, 2, 18, 0, tzinfo=UTC)


async def learned(_: Neighbour) -> StatedTimes:
    return StatedTimes(evidence_at=(LEARNED,))


async def test_llm_judge_sees_both_statements_keys_type_and_dates() -> None:
    llm = FakeLLM(JudgeAnswer(action="UPDATE", reason="moved"))
    c = candidate("semantic", label="departure-airport", text="User flies from Denver.", at=STATED)
    c = c.model_copy(update={"corrects": "home-airport"})  # the extraction model's hint
    decision = await decide(c, [neighbour(0.85)], Thresholds(), LLMJudge(llm), learned)
    assert (decision.action, decision.judged) == (Action.UPDATE, True)
    assert decision.reason == "judge: moved"
    prompt = llm.prompts[0][-1]["content"]
    question = json.loads(prompt)
    assert question["memory_type"] == "semantic"
    assert question["same_key"] is False
    assert question["existing"] == {
        "key": "home-airport",
        "text": "The user's home airport is Boston.",
        "evidence_dates": [LEARNED.isoformat()],
        "event_dates": None,
    }
    assert question["new"] == {
        "key": "departure-airport",
        "text": "User flies from Denver.",
        "stated_at": STATED.isoformat(),
        "event_dates": None,
    }
    assert question["detected_value_differences"] == ["name: boston → denver"]
    assert question["extraction_model_says_it_corrects"] == "home-airport"
    # the decision log gets the judge's input size and latency
    system = llm.prompts[0][0]["content"]
    assert decision.judge_input_chars == len(system) + len(prompt)
    assert decision.judge_latency_ms is not None
    assert decision.judge_latency_ms >= 0


async def test_a_failing_judge_falls_back_to_the_default() -> None:
    failing = LLMJudge(FakeLLM(LLMUnavailable("down")))
    c = candidate("semantic", label="home-airport", text="User flies from Boston.")
    decision = await decide(c, [neighbour(0.85)], Thresholds(), failing, learned)
    assert decision.action is Action.UPDATE
    assert "judge failed: LLMUnavailable" in decision.reason
    assert decision.judge_latency_ms is None


async def test_every_key_match_that_is_not_equivalent_reaches_the_judge() -> None:
    scripted = ScriptedJudge(lambda q: Action.REINFORCE)
    c = candidate("semantic", label="home-airport", text="User flies from Boston.")
    for sim in (0.99, 0.85, 0.10):  # similarity does not decide: all three are asked
        assert (await decide(c, [neighbour(sim)], Thresholds(), scripted)).judged
    same = candidate("semantic", label="home-airport", text="the user's home airport: Boston")
    assert (await decide(same, [neighbour(0.2)], Thresholds(), scripted)).action is (
        Action.REINFORCE
    )
    assert scripted.calls == 3  # the equivalent statement needed no judge
    assert scripted.questions[0].same_key


class _Cursor:
    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs

    async def to_list(self) -> list[dict[str, Any]]:
        return self.docs


class FakeAtlas:
    """Answers ``$vectorSearch`` like Atlas: scores as (1 + cosine) / 2."""

    def __init__(self) -> None:
        self.pipelines: list[list[dict[str, Any]]] = []

    async def aggregate(self, pipeline: list[dict[str, Any]]) -> _Cursor:
        self.pipelines.append(pipeline)
        return _Cursor(
            [
                {
                    "_id": "v1",
                    "memory_id": "m1",
                    "version": 1,
                    "key": "airline/red-eye",
                    "text": "t1",
                    "score": 0.95,
                },
                {
                    "_id": "v2",
                    "memory_id": "m2",
                    "version": 3,
                    "key": "hotel/late-checkout",
                    "text": "t2",
                    "score": 0.60,
                },
            ]
        )

    async def find_one(self, *args: Any, **kwargs: Any) -> None:
        return None


async def test_vector_search_filters_to_the_scope_and_returns_cosine() -> None:
    fake = FakeAtlas()
    search = AtlasVectorSearch(fake)  # type: ignore[arg-type]
    hits = await search.search(ME, "taxonomic", np.ones(4, dtype=np.float32), 5)
    assert [h[0] for h in hits] == ["v1", "v2"]
    assert [h[1] for h in hits] == pytest.approx([0.9, 0.2])
    stage = fake.pipelines[0][0]["$vectorSearch"]
    assert stage["filter"] == {
        "scope.project_id": "p1",
        "scope.user_id": "u1",
        "memory_type": "taxonomic",
        "status": "current",
    }
    assert stage["limit"] == 5
    only_airline = await search.search(ME, "taxonomic", np.ones(4, dtype=np.float32), 5, "airline/")
    assert [h[0] for h in only_airline] == ["v1"]
    c = candidate("taxonomic", domain="airline", term="red-eye", definition="overnight")
    assert [n.memory_id for n in await search.neighbours(c, 5)] == ["m1", "m2"]
