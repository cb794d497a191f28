"""``mongomem eval`` with extraction on reports the context's evidence recall (SPEC M3):
a running pipeline (`mongomem run all`) on the real servers, with a scripted
OpenAI-compatible server (NOT a model) extracting, answering and judging, over a tiny
LoCoMo-shaped conversation written here."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mongomem.adapters.llm import make_llm
from mongomem.evaluation.datasets import read_dataset
from mongomem.evaluation.harness import EvalOptions, run_eval
from mongomem.local.supervisor import StageProcess
from mongomem.settings import EmbeddingSettings, ExtractionSettings, LLMSettings, Settings
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPTED = "scripted (NOT a real model)"

CONVERSATION = {
    "sample_id": "ctx-1",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "My home airport is Boston."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "I fly from Denver myself."},
        ],
        "session_2_date_time": "10:37 am on 27 June, 2023",
        "session_2": [
            {"speaker": "Ana", "dia_id": "D2:1", "text": "My favourite hobby is pottery."},
            {"speaker": "Bo", "dia_id": "D2:2", "text": "Pottery sounds relaxing."},
        ],
    },
    "qa": [
        # the airport memory cites D1:1: found, cited
        {
            "question": "What is Ana's home airport?",
            "answer": "Boston",
            "evidence": ["D1:1"],
            "category": 4,
        },
        # D1:2 is in the airport memory's snapshot, not cited by it
        {
            "question": "Where does Bo fly from?",
            "answer": "Denver",
            "evidence": ["D1:2"],
            "category": 4,
        },
        # nothing was extracted from session 2
        {
            "question": "What is Ana's hobby?",
            "answer": "pottery",
            "evidence": ["D2:1"],
            "category": 1,
        },
    ],
}


def scripted(request: ChatRequest) -> Reply:
    """Semantic extraction learns the airport, citing only its turn; answers say
    "Boston"; the judge grades an answer CORRECT when it contains the gold answer."""
    if request.schema_name == "extract_semantic":
        for line in request.text("user").splitlines():
            if line.strip().startswith("{") and "airport" in line:
                seq = json.loads(line)["seq"]
                item = {"label": "home-airport", "fact": "Ana's home airport is Boston."}
                return Answer({"items": [item | {"seqs": [seq]}]})
        return Answer({"items": []})
    if request.schema_name == "eval_answer":
        return Answer({"answer": "Boston"})
    if request.schema_name == "eval_judge":
        text = request.text("user")
        gold = text.split("Gold answer: ")[1].split("\n")[0]
        generated = text.split("Generated answer: ")[1]
        label = "CORRECT" if gold.lower() in generated.lower() else "WRONG"
        return Answer({"label": label, "reason": "scripted"})
    return Answer({"items": []})


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted, model=SCRIPTED) as server:
        yield server


@pytest.fixture
async def pipeline(
    subprocess_env: dict[str, str], tmp_path: Path, llm: FakeOpenAIServer
) -> AsyncIterator[StageProcess]:
    env = {
        **subprocess_env,
        "MONGOMEM_LLM_BASE_URL": llm.base_url,
        "MONGOMEM_LLM_API_KEY": "fake",
        "MONGOMEM_LLM_MODEL": SCRIPTED,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_ENABLED_EXTRACTIONS": "semantic",
        "MONGOMEM_WINDOW_MAX_MESSAGES": "2",
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
    }
    stage = StageProcess(name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env)
    await asyncio.to_thread(stage.start)
    try:
        yield stage
    finally:
        await asyncio.to_thread(stage.stop)


async def test_the_report_counts_questions_whose_context_cites_a_gold_turn(
    settings: Settings, llm: FakeOpenAIServer, pipeline: StageProcess, tmp_path: Path
) -> None:
    data = tmp_path / "ctx.json"
    data.write_text(json.dumps([CONVERSATION]))
    configured = settings.model_copy(
        update={
            "embedding": EmbeddingSettings(provider="stand-in"),
            "extraction": ExtractionSettings(enabled=("semantic",)),
            "llm": LLMSettings(base_url=llm.base_url, api_key="fake", model=SCRIPTED),
        }
    )
    conversations = read_dataset("locomo", data)
    options = EvalOptions(
        out=tmp_path / "out", data=data, command=["test"], wait_timeout_s=120, console=io.StringIO()
    )
    model = make_llm(configured.llm)
    try:
        report = await run_eval("locomo", conversations, configured, model, options)
    finally:
        await model.close()
    assert report["not_a_quality_score"] is True  # the scripted server is labelled
    found = report["context_evidence"]["all"]
    assert found["questions"] == 3
    assert found["cited"] == pytest.approx(1 / 3, abs=1e-3)
    assert found["snapshot"] == pytest.approx(2 / 3, abs=1e-3)
    rows = [
        json.loads(x)
        for x in (tmp_path / "out" / "checkpoint.jsonl").read_text().splitlines()
        if '"question"' in x
    ]
    by_id = {r["question"]: r["context_evidence"] for r in rows if r.get("kind") == "question"}
    assert by_id["What is Ana's home airport?"] == {"cited": True, "snapshot": True}
    assert by_id["Where does Bo fly from?"] == {"cited": False, "snapshot": True}
    assert by_id["What is Ana's hobby?"] == {"cited": False, "snapshot": False}
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.startswith("NOT A QUALITY SCORE")
    assert "## Context evidence recall (SPEC M3)" in text
