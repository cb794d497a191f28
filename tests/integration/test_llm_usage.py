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
    recent_runs,
    recent_usage,
)
from mongomem.settings import LLMSettings, ModelPrice, Settings, load_settings

pytestmark = pytest.mark.integration


def finished(
    key: UsageKey, outcome: str, at: object, *, reused: bool = False, asked: str | None = None
) -> UsageRecord:
    return UsageRecord(
        snapshot_id=key.ref,
        memory_type=key.name,
        project_id=key.project_id,
        model="gpt-4o-mini-2024-07-18",
        prompt_version="v1",
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.1,
        calls=0 if reused else 1,
        attempts=1,
        candidates=0,
        outcome=outcome,
        at=at,  # type: ignore[arg-type]
        reused=reused,
        asked=None if reused else asked or "new",
    )


async def fill(settings: Settings, mongo: AsyncMongoClient[Document]) -> None:
    recorder = MongoUsageRecorder(mongo[settings.mongodb.database][LLM_USAGE])
    now = utcnow()
    model = "gpt-4o-mini-2024-07-18"
    semantic = UsageKey.snapshot("snap-1", "semantic", "proj")
    for n in range(2):  # a retry: two calls, two answers
        await recorder.call_started(semantic, f"call-s{n}", now)
        await recorder.call_finished(
            semantic, f"call-s{n}", "answered", LLMUsage(1000, 100), model, now
        )
    await recorder.record(finished(semantic, "ok", now))
    dead = UsageKey.snapshot("snap-2", "episodic", "proj")
    await recorder.call_started(dead, "call-d", now)  # cut off by a kill: started, never finished
    await recorder.record(finished(dead, "dead-letter", now, asked="prompt+model"))
    again = UsageKey.snapshot("snap-3", "episodic", "proj")
    await recorder.record(finished(again, "ok", now, reused=True))  # a stored answer: no call
    judge = UsageKey.judge("snap-1", "semantic", "proj")
    await recorder.call_started(judge, "call-j", now)
    await recorder.call_finished(judge, "call-j", "http-500", None, None, now)
    query = UsageKey.query("q-1", "answer", "proj")
    await recorder.call_started(query, "call-q", now)
    await recorder.call_finished(query, "call-q", "answered", LLMUsage(500, 50), model, now)
    old = UsageKey.snapshot("snap-0", "semantic", "proj")
    earlier = now - timedelta(hours=3)
    await recorder.call_started(old, "call-old", earlier)
    await recorder.call_finished(old, "call-old", "answered", LLMUsage(9999, 9999), model, earlier)


async def test_one_record_per_request_and_one_per_extraction_run(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(settings, mongo)
    usage = mongo[settings.mongodb.database][LLM_USAGE]
    calls = await usage.find({"kind": "call", "snapshot_id": "snap-1"}).sort("_id").to_list()
    assert [c["_id"] for c in calls] == ["call-j", "call-s0", "call-s1"]
    judge, first, _ = calls
    assert (first["purpose"], first["state"], first["outcome"]) == (
        "extract",
        "finished",
        "answered",
    )
    assert (first["calls"], first["answers"], first["prompt_tokens"]) == (1, 1, 1000)
    assert first["model"] == "gpt-4o-mini-2024-07-18"
    assert (judge["purpose"], judge["outcome"], judge["answers"]) == ("judge", "http-500", 0)
    cut = await usage.find_one({"_id": "call-d"})
    assert cut is not None
    assert cut["state"] == "started"  # recorded as cut off, once
    run = await usage.find_one({"_id": UsageKey.snapshot("snap-1", "semantic", "proj").doc_id})
    assert run is not None
    assert (run["runs"], run["fresh"], run["last_outcome"]) == (1, 1, "ok")
    assert "calls" not in run  # the calls are their own records
    # a second completion of a finished call changes nothing (a call is finished once)
    await MongoUsageRecorder(usage).call_finished(
        UsageKey.snapshot("snap-1", "semantic", "proj"), "call-s0", "timeout", None, None, utcnow()
    )
    again = await usage.find_one({"_id": "call-s0"})
    assert again is not None
    assert again["outcome"] == "answered"

    llm = LLMSettings(prices={"gpt-4o-mini": ModelPrice(input=0.15, output=0.6)})
    since = utcnow() - timedelta(hours=1)
    rows = {r.name: r for r in await recent_usage(usage, since, llm)}
    assert sorted(rows) == ["answer", "extract:episodic", "extract:semantic", "judge:semantic"]
    assert (rows["extract:semantic"].calls, rows["extract:semantic"].prompt_tokens) == (2, 2000)
    assert rows["extract:semantic"].cost == pytest.approx((2000 * 0.15 + 200 * 0.6) / 1e6)
    assert (rows["extract:episodic"].calls, rows["extract:episodic"].unfinished) == (1, 1)
    assert rows["extract:episodic"].cost == 0.0  # no tokens, nothing to price
    assert (rows["judge:semantic"].calls, rows["judge:semantic"].unfinished) == (1, 0)
    assert rows["answer"].completion_tokens == 50
    runs = {r.memory_type: r for r in await recent_runs(usage, since)}
    assert (runs["episodic"].fresh, runs["episodic"].reused, runs["episodic"].dead_letters) == (
        1,
        1,
        1,
    )
    assert (runs["semantic"].fresh, runs["semantic"].reused) == (1, 0)


async def test_status_shows_the_last_hour_per_purpose_with_cost_and_reuse(
    settings: Settings, mongo: AsyncMongoClient[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(settings, mongo)
    monkeypatch.setenv("MONGOMEM_LLM_PRICES", '{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}')
    priced = settings.model_copy(update={"llm": load_settings().llm})
    lines = await llm_usage_lines(priced)
    assert lines[0] == "LLM usage, last 1 hour (from llm_usage):"
    table = {line.split()[0]: line.split()[1:] for line in lines[2:] if not line.startswith("  (")}
    assert table["extract:semantic"] == ["2", "0", "2000", "200", "0.000420"]
    assert table["extract:episodic"] == ["1", "1", "0", "0", "0.000000"]
    assert table["answer"][:4] == ["1", "0", "500", "50"]
    # asked the LLM, reused, dead letters, and why it asked (issue 24)
    assert table["episodic"] == ["1", "1", "1", "prompt+model", "1"]
    assert table["semantic"] == ["1", "0", "0", "new", "1"]


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
