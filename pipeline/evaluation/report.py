"""The eval report: per category, memory beside the full-context baseline.

``report.json`` and ``report.md`` in the output folder, both written from the
checkpoint's lines. When any answer or verdict came from the rule-based
stand-in (its model name says ``NOT a real model``), the first line of both
says that the numbers are **not a quality score**.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from mongomem.evaluation.context_recall import context_summary
from mongomem.settings import Settings

__all__ = ["NOT_A_SCORE", "percentile", "summarize", "write_report"]

NOT_A_SCORE = (
    "NOT A QUALITY SCORE: the LLM was the rule-based stand-in (NOT a model); "
    "these numbers only show that the harness runs."
)
STAND_IN_MARK = "NOT a real model"
ARMS = ("memory", "full")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` (0..1) percentile by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def _arm(rows: list[dict[str, Any]], arm: str) -> dict[str, Any]:
    n = len(rows)
    correct = sum(r[arm]["label"] == "CORRECT" for r in rows)
    return {
        "j": round(100.0 * correct / n, 2) if n else 0.0,
        "correct": correct,
        "answer_tokens_per_query": round(sum(r[arm]["answer_tokens"] for r in rows) / n, 1),
        "context_tokens_per_query": round(sum(r[arm]["context_tokens"] for r in rows) / n, 1),
        "judge_tokens_per_query": round(sum(r[arm]["judge_tokens"] for r in rows) / n, 1),
        "llm_calls": sum(r[arm]["calls"] for r in rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per category (and ``all``): questions, J and tokens per arm, search p50/p95 in ms."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["category"])].append(row)
    out: dict[str, Any] = {}
    for name, group in [*sorted(groups.items()), ("all", rows)]:
        if not group:
            continue
        searches = [1000.0 * r["search_s"] for r in group]
        out[name] = {
            "questions": len(group),
            "search_ms_p50": round(percentile(searches, 0.50), 1),
            "search_ms_p95": round(percentile(searches, 0.95), 1),
            **{arm: _arm(group, arm) for arm in ARMS},
        }
    return out


def _models(rows: list[dict[str, Any]]) -> list[str]:
    found = {r[arm][k] for r in rows for arm in ARMS for k in ("model", "judge_model")}
    return sorted(found - {"-"})  # "-": no judge was asked (an empty answer)


def write_report(
    header: dict[str, Any],
    conversations: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    out: Path,
    *,
    settings: Settings,
    llm_name: str,
    finished_at: datetime,
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.md`` into ``out``; the JSON written."""
    models = _models(rows)
    stand_in = STAND_IN_MARK in llm_name or any(STAND_IN_MARK in m for m in models)
    stand_in = stand_in or any(
        STAND_IN_MARK in m for c in conversations for m in c["extraction"].get("models", ())
    )
    extraction = {c["id"]: c["extraction"] for c in conversations}
    extracted_by = sorted({m for c in conversations for m in c["extraction"].get("models", ())})
    report: dict[str, Any] = {
        "not_a_quality_score": stand_in,
        "benchmark": header["benchmark"],
        "data": header["data"],
        "data_sha256": header["data_sha256"],
        "command": header["command"],
        "run_id": header["id"],
        "started_at": header["started_at"],
        "finished_at": finished_at.isoformat(),
        "llm": llm_name,
        "answer_and_judge_models": models,
        # what answered the extraction calls (from llm_usage), not what settings name:
        # under the stand-in that is the stand-in's own "NOT a real model" name
        "extraction_model": ", ".join(extracted_by) or "(no extraction call recorded)",
        "embedding": settings.embedding.provider,
        "answer_prompt": header["answer_prompt"],
        "judge_prompt": header["judge_prompt"],
        "conversations": len(conversations),
        "categories": summarize(rows),
        # SPEC M3: questions whose context holds a memory citing a gold turn
        "context_evidence": context_summary(rows),
        "extraction_per_conversation": extraction,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(
        json.dumps({"first_line": NOT_A_SCORE if stand_in else None, **report}, indent=2) + "\n"
    )
    (out / "report.md").write_text(_markdown(report, stand_in))
    return report


def _markdown(report: dict[str, Any], stand_in: bool) -> str:
    lines = [NOT_A_SCORE if stand_in else f"# mongomem eval: {report['benchmark']}", ""]
    if stand_in:
        lines += [f"# mongomem eval: {report['benchmark']}", ""]
    lines += [
        f"- command: `{report['command']}`",
        f"- data: {report['data']} (sha256 {report['data_sha256'][:16]}…)",
        f"- date: {report['finished_at']} (started {report['started_at']})",
        f"- answer and judge model(s): {', '.join(report['answer_and_judge_models']) or '-'}",
        f"- extraction model: {report['extraction_model']}; embeddings: {report['embedding']}",
        f"- prompts: {report['answer_prompt']}, {report['judge_prompt']}",
        "",
        "J = % of answers the judge graded CORRECT. Context tokens = prompt tokens of the "
        "answer call; answer tokens = its completion tokens. Search = build_context time.",
        "",
        "| category | n | J memory | J full | ctx tok memory | ctx tok full | ans tok memory "
        "| ans tok full | search p50 ms | search p95 ms | LLM calls memory | LLM calls full |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in report["categories"].items():
        m, f = c["memory"], c["full"]
        lines.append(
            f"| {name} | {c['questions']} | {m['j']} | {f['j']} | {m['context_tokens_per_query']} "
            f"| {f['context_tokens_per_query']} | {m['answer_tokens_per_query']} "
            f"| {f['answer_tokens_per_query']} | {c['search_ms_p50']} | {c['search_ms_p95']} "
            f"| {m['llm_calls']} | {f['llm_calls']} |"
        )
    if report["context_evidence"]:
        lines += [
            "",
            "## Context evidence recall (SPEC M3)",
            "",
            "Share of questions with gold evidence whose `build_context` holds a memory "
            "whose evidence cites a gold turn (cited), or comes from a snapshot that "
            "holds one (snapshot).",
            "",
            "| category | questions | cited | snapshot |",
            "|---|---|---|---|",
        ]
        for name, c in report["context_evidence"].items():
            lines.append(
                f"| {name} | {c['questions']} | {100 * c['cited']:.1f}% "
                f"| {100 * c['snapshot']:.1f}% |"
            )
    lines += [
        "",
        "## Extraction per conversation (from llm_usage)",
        "",
        "| conversation | snapshots | LLM calls | prompt tokens | completion tokens |",
        "|---|---|---|---|---|",
    ]
    for cid, e in report["extraction_per_conversation"].items():
        lines.append(
            f"| {cid} | {e['snapshots']} | {e['calls']} | {e['prompt_tokens']} "
            f"| {e['completion_tokens']} |"
        )
    return "\n".join(lines) + "\n"
