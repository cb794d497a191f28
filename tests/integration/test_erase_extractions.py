"""Erasure removes the stored extraction answers by lineage (SPEC J2, I6), and only those."""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.llm import LLMResult, LLMUsage
from mongomem.adapters.mongo import EXTRACTIONS, TURNS, Document, database
from mongomem.erasure.erase import Target, erase
from mongomem.models import Snapshot, utcnow
from mongomem.settings import Settings
from mongomem.stages.extractor.results import ExtractionResults, ResultKey, schema_version
from mongomem.stages.extractor.types import builtin_spec
from mongomem.testing import make_snapshot

pytestmark = pytest.mark.integration


async def keep(results: ExtractionResults, snapshot: Snapshot) -> ResultKey:
    spec = builtin_spec("semantic")
    key = ResultKey(
        snapshot_id=snapshot.snapshot_id,
        memory_type=spec.name,
        prompt_version=spec.full_prompt_version,
        schema_version=schema_version(spec.output_model),
        model="fake-model",
        mode="auto",
    )
    value = spec.output_model.model_validate({"items": [{"label": "l", "fact": "a fact"}]})
    answer = LLMResult(value=value, model="fake-model", usage=LLMUsage(10, 2), latency_s=0.1)
    await results.keep(key, snapshot, answer, utcnow())
    return key


@pytest.mark.parametrize(
    ("target", "left"),
    [
        (Target(project_id="travel", user_id="ana"), {"ben/s1"}),
        (Target(project_id="travel", user_id="ana", session_id="s1"), {"ana/s2", "ben/s1"}),
        (Target(project_id="travel"), set()),
    ],
)
async def test_erasure_removes_the_stored_answers_of_what_it_erases(
    settings: Settings, mongo: AsyncMongoClient[Document], target: Target, left: set[str]
) -> None:
    db = database(mongo, settings.mongodb)
    results = ExtractionResults(db[EXTRACTIONS])
    await results.ensure_index()
    for user, session in (("ana", "s1"), ("ana", "s2"), ("ben", "s1")):
        snapshot = make_snapshot(
            [("user", f"{user} talks")], project_id="travel", user_id=user, session_id=session
        )
        await db[TURNS].insert_one(  # something for the erasure to find
            {"project_id": "travel", "user_id": user, "session_id": session, "seq": 1}
        )
        await keep(results, snapshot)
    other = make_snapshot([("user", "x")], project_id="other", user_id="ana", session_id="s1")
    await keep(results, other)

    result = await erase(db, target, actor="test")

    assert result.erased
    docs = await db[EXTRACTIONS].find({"project_id": "travel"}).to_list()
    assert {f"{d['user_id']}/{d['session_id']}" for d in docs} == left
    assert result.removed[EXTRACTIONS] == 3 - len(left)
    assert await db[EXTRACTIONS].count_documents({"project_id": "other"}) == 1
