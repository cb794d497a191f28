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
    UsageKey,
    UsageMeter,
    UsageRecord,
    UsageRow,
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


async def test_the_meter_counts_each_call_before_and_each_answer_after() -> None:
    recorder = MemoryUsageRecorder()
    key = UsageKey.snapshot("snap-meter", "meter-type", "proj")
    meter = UsageMeter(recorder, key)
    calls_before = sample("mongomem_llm_calls_total", {"memory_type": "meter-type"})
    await meter.call_started()
    assert recorder.started == [key]  # stored before any answer exists
    await meter.answered(LLMUsage(prompt_tokens=100, completion_tokens=20), "m")
    await meter.call_started()  # a second call that never answers (timeout, crash)
    meter.finished()
    assert (meter.calls, meter.prompt_tokens, meter.completion_tokens) == (2, 100, 20)
    assert recorder.answers == [(key, LLMUsage(100, 20), "m")]
    calls_after = sample("mongomem_llm_calls_total", {"memory_type": "meter-type"})
    assert calls_after - calls_before == 2
    labels = {"memory_type": "meter-type", "kind": "prompt"}
    assert sample("mongomem_llm_tokens_total", labels) == 100
    assert sample("mongomem_llm_snapshot_tokens_sum", {"memory_type": "meter-type"}) == 120


async def test_a_query_meter_counts_per_purpose() -> None:
    recorder = MemoryUsageRecorder()
    meter = UsageMeter(recorder, UsageKey.query("q-1", "meter-answer", "proj"))
    await meter.call_started()
    await meter.answered(LLMUsage(prompt_tokens=7, completion_tokens=3), "m")
    meter.finished()
    assert sample("mongomem_llm_query_calls_total", {"purpose": "meter-answer"}) == 1
    assert sample("mongomem_llm_query_tokens_sum", {"purpose": "meter-answer"}) == 10
    assert sample("mongomem_llm_query_tokens_count", {"purpose": "meter-answer"}) == 1
    assert (
        UsageKey.query("q-1", "answer", "p").doc_id
        != UsageKey.snapshot("q-1", "answer", "p").doc_id
    )


class BrokenRecorder(MemoryUsageRecorder):
    async def call_started(self, key: UsageKey, at: datetime) -> None:
        raise StorageError("MongoDB is down")

    async def answered(self, key: UsageKey, usage: LLMUsage, model: str, at: datetime) -> None:
        raise StorageError("MongoDB is down")

    async def record(self, usage: UsageRecord) -> None:
        raise StorageError("MongoDB is down")


async def test_a_storage_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    meter = UsageMeter(BrokenRecorder(), UsageKey.snapshot("snap-x", "t", "p"))
    await meter.call_started()
    await meter.answered(LLMUsage(1, 1), "m")
    assert meter.calls == 1
    assert sum("not recorded" in r.getMessage() for r in caplog.records) == 2
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_the_status_table_shows_cost_only_with_prices() -> None:
    rows = [
        UsageRow(
            "procedural",
            calls=3,
            prompt_tokens=900,
            completion_tokens=90,
            dead_letters=1,
            cost=None,
        ),
        UsageRow(
            "semantic",
            calls=12,
            prompt_tokens=3400,
            completion_tokens=800,
            dead_letters=0,
            cost=0.0012,
        ),
    ]
    priced = usage_table(rows, title="LLM usage", priced=True)
    assert priced[0] == "LLM usage:"
    assert "dead letters" in priced[1]
    assert priced[2].split() == ["procedural", "3", "900", "90", "1", "no", "price"]
    assert priced[3].split() == ["semantic", "12", "3400", "800", "0", "0.001200"]
    plain = usage_table(rows, title="LLM usage", priced=False)
    assert plain[3].split()[-1] == "-"
    assert "MONGOMEM_LLM_PRICES" in plain[-1]
    assert usage_table([], title="LLM usage", priced=False) == ["LLM usage: no LLM calls"]


def test_unset_prices_price_nothing() -> None:
    assert LLMSettings().price_of("gpt-4o-mini") is None
