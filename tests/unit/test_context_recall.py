"""Context evidence recall (SPEC M3): a question counts when a context memory's
evidence cites a gold turn (cited) or comes from the snapshot holding it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mongomem.evaluation.context_recall import context_found, context_summary, gold_positions
from mongomem.evaluation.datasets import read_locomo
from mongomem.evaluation.report import write_report
from mongomem.models import Evidence
from mongomem.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data" / "eval"
AT = datetime(2023, 6, 27, tzinfo=UTC)


def ev(ref: str, session: str, seqs: tuple[int, ...] = ()) -> Evidence:
    return Evidence(source="snapshot", ref=ref, session_id=session, at=AT, seqs=seqs)


def test_gold_turns_are_placed_by_session_and_seq() -> None:
    [conv, _] = read_locomo(DATA / "locomo_tiny.json")
    where = gold_positions(conv)
    names = [s.name for s in conv.sessions]
    assert where["D1:1"] == (names[0], 1)
    assert where["D2:1"] == (names[1], 1)
    assert where["D1:3"] == (names[0], 3)


def test_cited_is_strict_snapshot_is_the_lineage() -> None:
    [conv, _] = read_locomo(DATA / "locomo_tiny.json")
    where = gold_positions(conv)
    s1, s2 = (s.name for s in conv.sessions)
    snapshots = {"snap-a": (s1, 1, 2), "snap-b": (s1, 3, 3), "snap-c": (s2, 1, 2)}
    airport = conv.questions[0]  # gold D1:1 = (s1, 1)
    assert context_found(airport, [ev("snap-a", s1, (1,))], where, snapshots) == {
        "cited": True,
        "snapshot": True,
    }
    # from the right snapshot, citing another of its turns: reachable, not cited
    assert context_found(airport, [ev("snap-a", s1, (2,))], where, snapshots) == {
        "cited": False,
        "snapshot": True,
    }
    # the same seq in another session is another turn
    assert context_found(airport, [ev("snap-c", s2, (1,))], where, snapshots) == {
        "cited": False,
        "snapshot": False,
    }
    direct = Evidence(source="direct", ref="c1", at=AT)
    assert context_found(airport, [direct], where, snapshots) == {
        "cited": False,
        "snapshot": False,
    }
    assert context_found(airport, [], where, snapshots) == {"cited": False, "snapshot": False}
    # no gold turn the harness recorded: not scored
    unknown = replace(airport, evidence=("D9:9",))
    assert context_found(unknown, [ev("snap-a", s1, (1,))], where, snapshots) is None


def test_the_summary_and_the_report_count_scored_questions_only(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"category": "single-hop", "context_evidence": {"cited": True, "snapshot": True}},
        {"category": "single-hop", "context_evidence": {"cited": False, "snapshot": True}},
        {"category": "temporal", "context_evidence": {"cited": False, "snapshot": False}},
        {"category": "temporal"},  # no gold evidence: not scored
    ]
    summary = context_summary(rows)
    assert list(summary) == ["single-hop", "temporal", "all"]
    assert summary["single-hop"] == {"questions": 2, "cited": 0.5, "snapshot": 1.0}
    assert summary["all"] == {"questions": 3, "cited": round(1 / 3, 4), "snapshot": round(2 / 3, 4)}
    assert context_summary([{"category": "x"}]) == {}
    header = {
        "kind": "run",
        "id": "r1",
        "benchmark": "locomo",
        "data": "d.json",
        "data_sha256": "0",
        "started_at": "2024-01-01T00:00:00+00:00",
        "command": "mongomem eval locomo --data d.json",
        "answer_prompt": "answer_v1",
        "judge_prompt": "judge_v1",
    }
    arm: dict[str, Any] = {
        "label": "CORRECT",
        "answer_tokens": 1,
        "context_tokens": 1,
        "judge_tokens": 1,
    }
    arm |= {"model": "double (not a model)", "judge_model": "double (not a model)"}
    full = [
        r | {"search_s": 0.01, "memory": arm | {"calls": 2}, "full": arm | {"calls": 2}}
        for r in rows
    ]
    extraction = {"snapshots": 1, "calls": 1, "prompt_tokens": 1, "completion_tokens": 1}
    report = write_report(
        header,
        [{"id": "c", "extraction": extraction}],
        full,
        tmp_path,
        settings=Settings(),
        llm_name="double (not a model)",
        finished_at=datetime.now(UTC),
    )
    assert report["context_evidence"]["all"]["questions"] == 3
    text = (tmp_path / "report.md").read_text()
    assert "## Context evidence recall (SPEC M3)" in text
    assert "| single-hop | 2 | 50.0% | 100.0% |" in text
