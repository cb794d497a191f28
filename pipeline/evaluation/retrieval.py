"""``mongomem eval … --retrieval-only``: evidence recall of turn search, no LLM (SPEC M3).

Per conversation, under its own user in a project of its own per run
(``eval-<run id>-r``), every turn is recorded with its own time and its
dataset id in its metadata (``metadata.dataset_id``: LoCoMo's ``dia_id``,
LongMemEval's ``<session id>#<index>``) and its speaker (``metadata.speaker``).
No pipeline stage is needed and nothing is extracted. Then each question with
gold evidence asks :meth:`~mongomem.sdk.AsyncBoundMemory.search_turns` for
the top :data:`DEPTH` turns, and the ranks of the gold turns among them are
kept.

Measured per category and overall:

- ``recall@k`` (k = 5, 10, 20): the share of questions with at least one gold
  turn in the top k (a question is *found*);
- ``evidence@k``: the mean share of a question's gold turns in the top k;
- ``mrr``: the mean of 1 / rank of the first gold turn (0 when none in the top
  :data:`DEPTH`).

Questions with no evidence (LoCoMo has a few) are counted apart and not
scored. The turn search's embedder is the one configured
(``MONGOMEM_EMBEDDING_*``; with none set, the local e5 model when installed).
"""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mongomem.evaluation.datasets import Benchmark, EvalConversation
from mongomem.models import utcnow
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

__all__ = [
    "DEPTH",
    "KS",
    "RetrievalOptions",
    "recall_summary",
    "run_retrieval",
    "turn_metadata",
]

#: The recall cut-offs reported.
KS: tuple[int, ...] = (5, 10, 20)
#: How many turns each question asks turn search for.
DEPTH = max(KS)


@dataclass(frozen=True)
class RetrievalOptions:
    out: Path
    data: Path
    command: Sequence[str]
    console: TextIO = field(default=sys.stderr)


def first_gold_rank(found: Sequence[str | None], gold: set[str]) -> int | None:
    """The 1-based rank of the first gold id in ``found``, or ``None``."""
    return next((i for i, d in enumerate(found, start=1) if d is not None and d in gold), None)


def recall_summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per category (and ``all``): questions, recall@k, evidence@k and MRR of ``rows``
    (each ``{"category", "found": [dataset ids, best first], "gold": [...]}``)."""
    groups: dict[str, list[dict[str, Any]]] = {"all": []}
    for row in rows:
        groups["all"].append(row)
        groups.setdefault(str(row["category"]), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for name, group in groups.items():
        scored = [r for r in group if r["gold"]]
        n = len(scored)
        summary: dict[str, Any] = {"questions": n, "no_evidence": len(group) - n}
        for k in KS:
            found = [r for r in scored if first_gold_rank(r["found"][:k], set(r["gold"]))]
            share = [
                len(set(r["found"][:k]) & set(r["gold"])) / len(set(r["gold"])) for r in scored
            ]
            summary[f"recall@{k}"] = round(len(found) / n, 4) if n else None
            summary[f"evidence@{k}"] = round(sum(share) / n, 4) if n else None
        ranks = [first_gold_rank(r["found"], set(r["gold"])) for r in scored]
        summary["mrr"] = round(sum(1.0 / r for r in ranks if r) / n, 4) if n else None
        out[name] = summary
    return out


def turn_metadata(dataset_id: str | None, speaker: str | None) -> dict[str, Any] | None:
    """The metadata a dataset turn is recorded with: its dataset id and its speaker."""
    meta: dict[str, Any] = {}
    if dataset_id is not None:
        meta["dataset_id"] = dataset_id
    if speaker is not None:
        meta["speaker"] = speaker
    return meta or None


async def _ingest(memory: AsyncMemory, conv: EvalConversation, user: str) -> None:
    for session in conv.sessions:
        chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session.name))
        for turn in session.turns:
            meta = turn_metadata(turn.dataset_id, turn.speaker)
            await chat.record_turn(turn.role, turn.content, meta, at=turn.at, speaker=turn.speaker)


async def run_retrieval(
    benchmark: Benchmark,
    conversations: list[EvalConversation],
    settings: Settings,
    options: RetrievalOptions,
) -> dict[str, Any]:
    """Record, search, score; write ``retrieval.json`` and ``retrieval.md``; the JSON."""
    run = uuid.uuid4().hex[:12]
    project = f"eval-{run}-r"
    rows: list[dict[str, Any]] = []
    memory = AsyncMemory(project_id=project, settings=settings)
    embedder = "?"
    try:
        for index, conv in enumerate(conversations):
            user = f"conv-{index}-{conv.conversation_id}"[:120]
            options.console.write(f"\rrecording {conv.conversation_id} ")
            await _ingest(memory, conv, user)
            chat = memory.bind(MemoryRequestContext(user_id=user))
            for q in conv.questions:
                hits = await chat.search_turns(q.question[:2000], DEPTH)
                found = [h.turn.metadata.get("dataset_id") for h in hits]
                rows.append(
                    {
                        "id": q.question_id,
                        "category": q.category,
                        "gold": list(q.evidence),
                        "found": found,
                    }
                )
            options.console.write(f"\r{conv.conversation_id}: {len(rows)} questions so far ")
        transport = memory.transport
        turn_search = getattr(transport, "turn_search", None)
        if turn_search is not None:
            embedder = (await turn_search()).embedder.name
    finally:
        options.console.write("\n")
        await memory.close()
    report = {
        "benchmark": benchmark,
        "mode": "retrieval-only (no LLM)",
        "data": options.data.name,
        "command": shlex.join(options.command),
        "run_id": run,
        "finished_at": utcnow().isoformat(),
        "embedder": embedder,
        "ranker": "turn search: BM25 + cosine, reciprocal-rank fusion",
        "conversations": len(conversations),
        "categories": recall_summary(rows),
    }
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "retrieval.json").write_text(json.dumps(report, indent=2) + "\n")
    (options.out / "retrieval-questions.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    )
    (options.out / "retrieval.md").write_text(render(report))
    return report


def render(report: dict[str, Any]) -> str:
    """The retrieval report as Markdown."""
    lines = [
        f"# Evidence recall of turn search: {report['benchmark']} ({report['data']})",
        "",
        f"- mode: {report['mode']}; embedder: {report['embedder']}",
        f"- ranker: {report['ranker']}",
        f"- command: `{report['command']}`",
        f"- conversations: {report['conversations']}; finished {report['finished_at']}",
        "",
        "| category | questions | " + " | ".join(f"recall@{k}" for k in KS) + " | mrr |",
        "|---|---|" + "---|" * len(KS) + "---|",
    ]
    for name, s in report["categories"].items():
        cells = [_pct(s[f"recall@{k}"]) for k in KS]
        mrr = "-" if s["mrr"] is None else f"{s['mrr']:.3f}"
        lines.append(f"| {name} | {s['questions']} | " + " | ".join(cells) + f" | {mrr} |")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
