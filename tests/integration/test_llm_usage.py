"""``llm_usage`` in MongoDB and the last hour of it in ``mongomem status`` (issue 16 item 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.llm import LLMUsage
from mongomem.adapters.mongo import Document
from mongomem.cli.operate import llm_usage_lines
from mongomem.models import utcnow
from mongomem.operations.usage import (
    LLM_USAGE,
    MongoUsageRecorder,
    UsageKey,
    UsageRecord,
    recent_usage,
)
from mongomem.settings import LLMSettings, ModelPrice, Settings, load_settings

pytestmark = pytest.mark.integration


def finished(key: UsageKey, outcome: str, at: object) -> UsageRecord:
    return UsageRecord(
        snapshot_id=key.ref,
        memory_type=key.name,
        project_id=key.project_id,
        model="gpt-4o-mini-2024-07-18",
        prompt_version="v1",
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.1,
        calls=1,
        attempts=1,
        candidates=0,
        outcome=outcome,
        at=at,  # type: ignore[arg-type]
    )


async def fill(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    recorder = MongoUsageRecorder(mongo[settings.mongodb.database][LLM_USAGE])
    now = utcnow()
    model = "gpt-4o-mini-2024-07-18"
    semantic = UsageKey.snapshot("snap-1", "semantic", "proj")
    for _ in range(2):  # a retry: two calls, two answers
        await recorder.call_started(semantic, now)
        await recorder.answered(semantic, LLMUsage(1000, 100), model, now)
    await recorder.record(finished(semantic, "ok", now))
    dead = UsageKey.snapshot("snap-2", "episodic", "proj")
    await recorder.call_started(dead, now)  # cut short: counted, no tokens
    await recorder.record(finished(dead, "dead-letter", now))
    query = UsageKey.query("q-1", "answer", "proj")
    await recorder.call_started(query, now)
    await recorder.answered(query, LLMUsage(500, 50), model, now)
    old = UsageKey.snapshot("snap-0", "semantic", "proj")
    earlier = now - timedelta(hours=3)
    await recorder.call_started(old, earlier)
    await recorder.answered(old, LLMUsage(9999, 9999), model, earlier)


async def test_usage_documents_add_up_per_snapshot_and_query(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(settings, mongo)
    usage = mongo[settings.mongodb.database][LLM_USAGE]
    semantic = await usage.find_one({"_id": UsageKey.snapshot("snap-1", "semantic", "proj").doc_id})
    assert semantic is not None
    assert (semantic["calls"], semantic["answers"], semantic["runs"]) == (2, 2, 1)
    assert (semantic["prompt_tokens"], semantic["completion_tokens"]) == (2000, 200)
    assert semantic["snapshot_id"] == "snap-1"
    assert semantic["last_outcome"] == "ok"
    query = await usage.find_one({"kind": "query"})
    assert query is not None
    assert (query["query_id"], query["purpose"], query["calls"]) == ("q-1", "answer", 1)

    llm = LLMSettings(prices={"gpt-4o-mini": ModelPrice(input=0.15, output=0.6)})
    rows = {r.name: r for r in await recent_usage(usage, utcnow() - timedelta(hours=1), llm)}
    assert sorted(rows) == ["episodic", "query:answer", "semantic"]  # snap-0 is 3 h old
    assert (rows["semantic"].calls, rows["semantic"].prompt_tokens) == (2, 2000)
    assert rows["semantic"].cost == pytest.approx((2000 * 0.15 + 200 * 0.6) / 1e6)
    assert (rows["episodic"].calls, rows["episodic"].dead_letters) == (1, 1)
    assert rows["episodic"].cost == 0.0  # no tokens, nothing to price
    assert rows["query:answer"].completion_tokens == 50


async def test_status_shows_the_last_hour_per_type_with_cost(
    settings: Settings, mongo: AsyncMongoClient[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(settings, mongo)
    monkeypatch.setenv("MONGOMEM_LLM_PRICES", '{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}')
    priced = settings.model_copy(update={"llm": load_settings().llm})
    lines = await llm_usage_lines(priced)
    assert lines[0] == "LLM usage, last 1 hour (from llm_usage):"
    table = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert table["semantic"] == ["2", "2000", "200", "0", "0.000420"]
    assert table["episodic"] == ["1", "0", "0", "1", "0.000000"]
    assert table["query:answer"][:4] == ["1", "500", "50", "0"]
    assert len(table) == 3


async def test_status_says_when_usage_cannot_be_read(settings: Settings) -> None:
    unreachable = settings.model_copy(
        update={
            "mongodb": settings.mongodb.model_copy(
                update={"uri": "mongodb://127.0.0.1:9/?directConnection=true"}
            )
        }
    )
    (line,) = await llm_usage_lines(unreachable)
    assert line.startswith("LLM usage, last 1 hour (from llm_usage): unavailable (")
