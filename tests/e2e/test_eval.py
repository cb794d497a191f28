"""``mongomem eval`` end to end on the tiny synthetic datasets (issue 16 items 2-3; SPEC K5).

The pipeline's stages run as processes (:class:`mongomem.testing.harness.Pipeline`)
and the LLM is the rule-based stand-in (NOT a model) behind the fake
OpenAI-compatible server, so this proves the mechanics only: ingestion
with the sessions' own times, waiting for extraction, both arms answered
and judged, the report, and resuming from the checkpoint. The report says in
its first line that it is not a quality score.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mongomem.adapters.mongo import TURNS
from mongomem.evaluation.report import NOT_A_SCORE
from mongomem.stm.turns import NOT_AN_EVENT
from mongomem.testing import FakeOpenAIServer
from mongomem.testing.harness import Pipeline, client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DATA = Path(__file__).parent.parent / "data" / "eval"


def run_eval(pipe: Pipeline, benchmark: str, data: Path, out: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mongomem.cli",
            "eval",
            benchmark,
            "--data",
            str(data),
            "--out",
            str(out),
            "--wait-timeout",
            "60",
        ],
        env=pipe.env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "questions" in done.stderr  # the progress bar
    return done.stdout


def eval_requests(llm: FakeOpenAIServer) -> int:
    return len(llm.requests_for("eval_answer")) + len(llm.requests_for("eval_judge"))


async def test_locomo_end_to_end_then_resume(
    pipeline: Pipeline, llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    stdout = run_eval(pipeline, "locomo", DATA / "locomo_tiny.json", out)
    assert stdout.startswith("NOT A QUALITY SCORE")

    md = (out / "report.md").read_text()
    print(md)  # shown with -s: the mechanics' numbers on the stand-in
    assert md.splitlines()[0] == NOT_A_SCORE
    report = json.loads((out / "report.json").read_text())
    assert report["first_line"] == NOT_A_SCORE
    assert report["not_a_quality_score"] is True
    assert "eval locomo --data" in report["command"]
    assert report["finished_at"]
    cats = report["categories"]
    assert set(cats) == {"1", "2", "3", "4", "all"}  # category 5 (adversarial) left out
    assert cats["all"]["questions"] == 5
    for arm in ("memory", "full"):
        assert cats["all"][arm]["llm_calls"] == 10  # one answer and one judge call each
        assert cats["all"][arm]["context_tokens_per_query"] > 0
    # The stand-in's word overlap finds "Boston" both in memory and in the transcript.
    assert cats["4"]["full"]["j"] > 0
    assert cats["4"]["memory"]["j"] > 0
    extraction = report["extraction_per_conversation"]
    assert set(extraction) == {"tiny-1", "tiny-2"}
    assert all(e["snapshots"] >= 2 and e["calls"] > 0 for e in extraction.values())

    async with client(pipeline) as mongo:
        turns = [d async for d in mongo[pipeline.database][TURNS].find(NOT_AN_EVENT)]
    assert len(turns) == 9
    first = next(t for t in turns if "Boston" in t["content"])
    assert first["created_at"] == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # the session's own time

    # A crash after two questions: drop the rest from the checkpoint and run again.
    checkpoint = out / "checkpoint.jsonl"
    lines = checkpoint.read_text().splitlines()
    kept = [ln for ln in lines if json.loads(ln)["kind"] != "question"]
    questions = [ln for ln in lines if json.loads(ln)["kind"] == "question"]
    checkpoint.write_text("\n".join(kept + questions[:2]) + "\n" + questions[2][:20])
    before = eval_requests(llm)
    run_eval(pipeline, "locomo", DATA / "locomo_tiny.json", out)
    assert eval_requests(llm) - before == 3 * 4  # only the three left, both arms
    async with client(pipeline) as mongo:
        again = await mongo[pipeline.database][TURNS].count_documents(NOT_AN_EVENT)
    assert again == 9  # nothing ingested twice
    assert json.loads((out / "report.json").read_text())["categories"]["all"]["questions"] == 5


async def test_longmemeval_end_to_end(pipeline: Pipeline, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_eval(pipeline, "longmemeval", DATA / "longmemeval_tiny.json", out)
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().splitlines()[0] == NOT_A_SCORE
    cats = report["categories"]
    assert set(cats) == {
        "single-session-user",
        "single-session-user (abstention)",
        "knowledge-update",
        "all",
    }
    assert cats["all"]["questions"] == 3
    assert cats["single-session-user"]["full"]["j"] == 100.0
