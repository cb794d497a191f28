"""Context evidence recall (SPEC M3): does ``build_context`` bring back memories learned
from the turns that answer the question?

With extraction on, a memory's versions carry their evidence: the snapshot
they were extracted from (``ref``, with its session) and, since SPEC L4, the
seqs of that session's turns the item cites (``seqs``). The harness recorded
every dataset turn itself, in order, so a gold turn's place is known: session
name and seq (its 1-based index in the session). For one question, over the
memories in its context (every version's evidence, so a value that replaced
an older one still counts what it was learned from):

- **cited**: some evidence cites a gold turn by its seq — the strict measure;
- **snapshot**: some evidence comes from a snapshot that holds a gold turn
  (its session and seq range), cited or not — what a reader of the memory's
  lineage can reach.

A question without gold evidence is not scored. Both shares are reported per
category beside J (:mod:`mongomem.evaluation.report`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mongomem.evaluation.datasets import EvalConversation, EvalQuestion
from mongomem.models import Evidence

__all__ = ["GoldTurns", "Snapshots", "context_found", "context_summary", "gold_positions"]

#: A dataset turn id -> (session name, seq).
GoldTurns = Mapping[str, tuple[str, int]]
#: A snapshot id -> (session name, first seq, last seq).
Snapshots = Mapping[str, tuple[str, int, int]]


def gold_positions(conv: EvalConversation) -> dict[str, tuple[str, int]]:
    """Where the harness recorded each dataset turn: its session and seq (index + 1)."""
    out: dict[str, tuple[str, int]] = {}
    for session in conv.sessions:
        for index, turn in enumerate(session.turns, start=1):
            if turn.dataset_id is not None:
                out[turn.dataset_id] = (session.name, index)
    return out


def context_found(
    question: EvalQuestion,
    evidence: Iterable[Evidence],
    where: GoldTurns,
    snapshots: Snapshots,
) -> dict[str, bool] | None:
    """``{"cited", "snapshot"}`` for one question (see the module docstring); ``None``
    when the question has no gold turn the harness recorded."""
    gold = {where[g] for g in question.evidence if g in where}
    if not gold:
        return None
    cited = snapshot = False
    for e in evidence:
        if e.source != "snapshot" or e.session_id is None:
            continue
        if any((e.session_id, seq) in gold for seq in e.seqs):
            cited = True
        span = snapshots.get(e.ref)
        if span is not None and any(
            session == span[0] and span[1] <= seq <= span[2] for session, seq in gold
        ):
            snapshot = True
    return {"cited": cited, "snapshot": snapshot or cited}


def context_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per category (and ``all``): scored questions and the shares found ``cited`` and
    through their ``snapshot`` (rows without ``context_evidence`` are not scored)."""
    groups: dict[str, list[Mapping[str, bool]]] = defaultdict(list)
    for row in rows:
        found = row.get("context_evidence")
        if found is None:
            continue
        groups[str(row["category"])].append(found)
        groups["all"].append(found)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(groups, key=lambda n: (n == "all", n)):
        group = groups[name]
        n = len(group)
        out[name] = {
            "questions": n,
            "cited": round(sum(g["cited"] for g in group) / n, 4),
            "snapshot": round(sum(g["snapshot"] for g in group) / n, 4),
        }
    return out
