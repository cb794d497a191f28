"""LLM usage accounting without MongoDB: prices, the meter, the status table."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest
from prometheus_client import REGISTRY

from mongomem.adapters.llm import LLMUsage
from mongomem.errors import ConfigError, StorageError
from mongomem.operations.usage import (
    MemoryUsageRecorder,
    RunRow,
    UsageKey,
    UsageMeter,
    UsageRecord,
    UsageRow,
    runs_table,
    usage_table,
)
from mongomem.settings import LLMSettings, ModelPrice, load_settings


def test_a_price_table_from_the_environment_prices_dated_model_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "MONGOMEM_LLM_PRICES",
        '{"gpt-4o-mini": {"input": 0.15, "output": 0.6}, "gpt-4o": {"input": 2.5, "output": 10}}',
    )
    llm = load_settings().llm
    assert llm.price_of("gpt-4o-mini") == ModelPrice(input=0.15, output=0.6)
    assert llm.price_of("gpt-4o-mini-2024-07-18") == ModelPrice(input=0.15, output=0.6)
    assert llm.price_of("gpt-4o-2024-08-06") == ModelPrice(input=2.5, output=10)
    assert llm.price_of("llama3") is None
    assert ModelPrice(input=0.15, output=0.6).cost(1_000_000, 500_000) == pytest.approx(0.45)


@pytest.mark.parametrize(
    "raw", ['{"m": {"input": -1, "output": 1}}', '{"m": {"input": 1}}', "cheap", '{"m": 3}']
)
def test_a_bad_price_table_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("MONGOMEM_LLM_PRICES", raw)
    with pytest.raises(ConfigError, match="MONGOMEM_LLM_PRICES"):
        load_settings()


def test_the_structured_output_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_LLM_STRUCTURED_OUTPUT", "tools")
    assert load_settings().llm.structured_output == "tools"
    monkeypatch.setenv("MONGOMEM_LLM_STRUCTURED_OUTPUT", "grammar")
    with pytest.raises(ConfigError, match="MONGOMEM_LLM_STRUCTURED_OUTPUT"):
        load_settings()


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_the_meter_records_each_call_before_and_completes_it_after() -> None:
    recorder = MemoryUsageRecorder()
    key = UsageKey.snapshot("snap-meter", "meter-type", "proj")
    meter = UsageMeter(recorder, key)
    calls_before = sample("mongomem_llm_calls_total", {"memory_type": "meter-type"})
    extract_before = sample("mongomem_llm_requests_total", {"purpose": "extract"})
    first = await meter.call_started()
    assert recorder.started == [key]  # stored before any answer exists
    assert recorder.call_ids == [first]
    await meter.answered(first, LLMUsage(prompt_tokens=100, completion_tokens=20), "m")
    second = await meter.call_started()  # a second call that never answers (timeout, crash)
    assert second != first  # every request has its own record
    await meter.failed(second, "timeout")
    meter.finished()
    assert (meter.calls, meter.prompt_tokens, meter.completion_tokens) == (2, 100, 20)
    assert recorder.answers == [(key, LLMUsage(100, 20), "m")]
    assert recorder.failures == [(key, "timeout")]
    calls_after = sample("mongomem_llm_calls_total", {"memory_type": "meter-type"})
    assert calls_after - calls_before == 2
    extract_after = sample("mongomem_llm_requests_total", {"purpose": "extract"})
    assert extract_after - extract_before == 2
    labels = {"memory_type": "meter-type", "kind": "prompt"}
    assert sample("mongomem_llm_tokens_total", labels) == 100
    assert sample("mongomem_llm_snapshot_tokens_sum", {"memory_type": "meter-type"}) == 120


async def test_a_query_meter_counts_per_purpose() -> None:
    recorder = MemoryUsageRecorder()
    meter = UsageMeter(recorder, UsageKey.query("q-1", "meter-answer", "proj"))
    call = await meter.call_started()
    await meter.answered(call, LLMUsage(prompt_tokens=7, completion_tokens=3), "m")
    meter.finished()
    assert sample("mongomem_llm_query_calls_total", {"purpose": "meter-answer"}) == 1
    assert sample("mongomem_llm_query_tokens_sum", {"purpose": "meter-answer"}) == 10
    assert sample("mongomem_llm_query_tokens_count", {"purpose": "meter-answer"}) == 1
    assert sample("mongomem_llm_requests_total", {"purpose": "meter-answer"}) == 1
    labels = {"purpose": "meter-answer", "kind": "completion"}
    assert sample("mongomem_llm_request_tokens_total", labels) == 3
    assert (
        UsageKey.query("q-1", "answer", "p").doc_id
        != UsageKey.snapshot("q-1", "answer", "p").doc_id
    )


def test_each_key_names_its_purpose() -> None:
    assert UsageKey.snapshot("s", "semantic", "p").purpose == "extract"
    assert UsageKey.judge("s", "semantic", "p").purpose == "judge"
    assert UsageKey.query("q", "eval-answer", "p").purpose == "eval-answer"
    assert UsageKey.judge("s", "semantic", "p").label == "judge:semantic"


class BrokenRecorder(MemoryUsageRecorder):
    async def call_started(self, key: UsageKey, call_id: str, at: datetime) -> None:
        raise StorageError("MongoDB is down")

    async def call_finished(self, *args: object) -> None:
        raise StorageError("MongoDB is down")

    async def record(self, usage: UsageRecord) -> None:
        raise StorageError("MongoDB is down")


class FinishFails(MemoryUsageRecorder):
    async def call_finished(self, *args: object) -> None:
        raise StorageError("MongoDB is down")


async def test_no_request_is_sent_without_its_record() -> None:
    meter = UsageMeter(BrokenRecorder(), UsageKey.snapshot("snap-x", "t", "p"))
    with pytest.raises(StorageError):
        await meter.call_started()
    assert meter.calls == 0


async def test_a_failure_to_complete_a_record_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    meter = UsageMeter(FinishFails(), UsageKey.snapshot("snap-x", "t", "p"))
    call = await meter.call_started()
    await meter.answered(call, LLMUsage(1, 1), "m")
    await meter.failed(call, "timeout")
    assert meter.calls == 1
    assert sum("not completed" in r.getMessage() for r in caplog.records) == 2
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_the_status_table_shows_cost_only_with_prices() -> None:
    rows = [
        UsageRow(
            "extract:procedural",
            calls=3,
            unfinished=1,
            prompt_tokens=900,
            completion_tokens=90,
            cost=None,
        ),
        UsageRow(
            "judge:semantic",
            calls=12,
            unfinished=0,
            prompt_tokens=3400,
            completion_tokens=800,
            cost=0.0012,
        ),
    ]
    priced = usage_table(rows, title="LLM usage", priced=True)
    assert priced[0] == "LLM usage:"
    assert "unfinished" in priced[1]
    assert priced[2].split() == ["extract:procedural", "3", "1", "900", "90", "no", "price"]
    assert priced[3].split() == ["judge:semantic", "12", "0", "3400", "800", "0.001200"]
    assert "process died" in priced[4]
    plain = usage_table(rows, title="LLM usage", priced=False)
    assert plain[3].split()[-1] == "-"
    assert "MONGOMEM_LLM_PRICES" in plain[-1]
    assert usage_table([], title="LLM usage", priced=False) == ["LLM usage: no LLM calls"]


def test_the_runs_table_shows_fresh_calls_and_reuse() -> None:
    lines = runs_table([RunRow("semantic", runs=5, fresh=2, reused=3, dead_letters=1)])
    assert "reused" in lines[0]
    assert lines[1].split() == ["semantic", "2", "3", "1", "-"]
    assert runs_table([]) == []


def test_the_runs_table_says_why_the_llm_was_asked() -> None:
    row = RunRow("semantic", runs=4, fresh=3, reused=1, dead_letters=0)
    row = RunRow(**{**row.__dict__, "why": {"new": 1, "prompt": 2}})
    lines = runs_table([row])
    assert "why asked" in lines[0]
    assert lines[1].split() == ["semantic", "3", "1", "0", "new", "1,", "prompt", "2"]
    assert "re-extract = --re-extract" in lines[-1]


def test_unset_prices_price_nothing() -> None:
    assert LLMSettings().price_of("gpt-4o-mini") is None
