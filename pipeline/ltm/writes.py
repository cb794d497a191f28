"""The MongoDB updates a decision turns into, shared by the one-at-a-time and
the batched apply paths.

Every update here is filtered on ``_id`` alone and is idempotent:

* a REINFORCE adds the candidate's id and evidence with ``$addToSet``, so
  applying it twice changes nothing; the reinforcement count *is* the number of
  candidate ids on the version (see :mod:`pipeline.ltm.documents`);
* superseding version *n* is done only by the writer that inserted version
  *n + 1* — whose ``_id`` is unique — so it needs no condition;
* the ledger moves ``pending`` → ``done``; ``pending`` is written before the
  first memory write, so a candidate that is absent from the ledger has
  certainly not touched any memory. ``done`` is set after the decision-log
  entry (which holds the outcome) is written. The entry of a direct save made
  with an idempotency key also keeps that request's ``fingerprint``, so a
  reuse of the key for a different request can be refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline.ltm.plan import Decision
from pipeline.models import MemoryCandidate, MemoryType

if TYPE_CHECKING:
    from pipeline.ltm.store import Outcome

__all__ = [
    "DONE",
    "PENDING",
    "decision_entry",
    "done_update",
    "pending_entry",
    "reinforce_update",
    "supersede_update",
]

Doc = dict[str, Any]
PENDING = "pending"
DONE = "done"


def reinforce_update(candidate: MemoryCandidate, now: datetime) -> Doc:
    add: Doc = {
        "candidate_ids": candidate.candidate_id,
        "evidence": candidate.evidence.model_dump(mode="python"),
    }
    definition = candidate.fields.get("definition")
    if candidate.memory_type == MemoryType.TAXONOMIC and isinstance(definition, str):
        add["variants"] = definition
    return {"$addToSet": add, "$set": {"updated_at": now}}


def supersede_update(by: str, now: datetime) -> Doc:
    return {"$set": {"status": "superseded", "superseded_at": now, "superseded_by": by,
                     "updated_at": now}}  # fmt: skip


def pending_entry(candidate_id: str, now: datetime, fingerprint: str | None = None) -> Doc:
    """A new ledger entry; ``fingerprint`` (a keyed direct save's request hash) is kept with it."""
    entry: Doc = {"_id": candidate_id, "state": PENDING, "at": now}
    if fingerprint is not None:
        entry["fingerprint"] = fingerprint
    return entry


def done_update(now: datetime) -> Doc:
    """Mark ledger entries done (the outcome itself is in the decision log)."""
    return {"$set": {"state": DONE, "at": now}}


def decision_entry(
    candidate: MemoryCandidate, decision: Decision, outcome: Outcome, now: datetime
) -> Doc:
    """The decision-log document of one applied candidate."""
    entry = {
        **decision.model_dump(mode="python"),
        "_id": candidate.candidate_id,
        "memory_type": candidate.memory_type,
        "scope": candidate.scope.model_dump(),
        "key": candidate.key,
        "attempts": outcome.attempts,
        "outcome": outcome.model_dump(mode="python"),
        "at": now,
    }
    entry["action"] = decision.action.value
    return entry
