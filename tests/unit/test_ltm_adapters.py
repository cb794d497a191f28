"""The judge and the ``$vectorSearch`` adapter against test doubles (no servers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from mongomem.errors import LLMUnavailable
from mongomem.ltm import AtlasVectorSearch, LLMJudge, MemoryStore, Neighbour, ScriptedJudge
from mongomem.ltm.judge import JudgeAnswer
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
        self, messages: Sequence[Mapping[str, str]], schema: Any, *, schema_name: str
    ) -> _Result:
        self.prompts.append(messages)
        if isinstance(self.answer, Exception):
            raise self.answer
        assert schema is JudgeAnswer
        return _Result(self.answer)


def neighbour(sim: float) -> Neighbour:
    return Neighbour(
        memory_id="mem_1", version=1, memory_type="semantic", scope=ME, key="home-airport",
        text="The user's home airport is Boston.", similarity=sim,
    )  # fmt: skip


async def test_llm_judge_asks_about_both_texts_and_returns_a_verdict() -> None:
    llm = FakeLLM(JudgeAnswer(action="REINFORCE", reason="same airport"))
    c = candidate("semantic", label="home-airport", text="User flies from Boston.")
    verdict = await LLMJudge(llm).judge(c, neighbour(0.85))
    assert (verdict.memory_id, verdict.action) == ("mem_1", Action.REINFORCE)
    prompt = llm.prompts[0][-1]["content"]
    assert "User flies from Boston." in prompt
    assert "The user's home airport is Boston." in prompt


class _NoDB:
    def __getitem__(self, name: str) -> Any:
        return None


async def test_a_failing_judge_falls_back_to_the_default() -> None:
    store = MemoryStore(_NoDB(), judge=LLMJudge(FakeLLM(LLMUnavailable("down"))))  # type: ignore[arg-type]
    c = candidate("semantic", label="home-airport", text="User flies from Boston.")
    decision = await store.decide(c, [neighbour(0.85)])
    assert decision.action is Action.UPDATE
    assert "judge failed: LLMUnavailable" in decision.reason
    scripted = ScriptedJudge(lambda *_: Action.REINFORCE)
    store = MemoryStore(_NoDB(), judge=scripted, thresholds=Thresholds())  # type: ignore[arg-type]
    assert (await store.decide(c, [neighbour(0.85)])).action is Action.REINFORCE
    assert (await store.decide(c, [neighbour(0.10)])).action is Action.UPDATE
    assert scripted.calls == 1  # only the ambiguous band reaches the judge


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
        return _Cursor([
            {"_id": "v1", "memory_id": "m1", "version": 1, "key": "airline/red-eye",
             "text": "t1", "score": 0.95},
            {"_id": "v2", "memory_id": "m2", "version": 3, "key": "hotel/late-checkout",
             "text": "t2", "score": 0.60},
        ])  # fmt: skip

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
        "scope.project_id": "p1", "scope.user_id": "u1", "memory_type": "taxonomic",
        "status": "current",
    }  # fmt: skip
    assert stage["limit"] == 5
    only_airline = await search.search(ME, "taxonomic", np.ones(4, dtype=np.float32), 5, "airline/")
    assert [h[0] for h in only_airline] == ["v1"]
    c = candidate("taxonomic", domain="airline", term="red-eye", definition="overnight")
    assert [n.memory_id for n in await search.neighbours(c, 5)] == ["m1", "m2"]
