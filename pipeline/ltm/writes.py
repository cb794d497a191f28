"""The MongoDB updates a decision turns into, shared by the one-at-a-time and
the batched apply paths.

Every update here is filtered on ``_id`` alone and is idempotent:

* a REINFORCE adds the candidate's id and evidence with ``$addToSet``, so
  applying it twice changes nothing; the reinforcement count *is* the number of
  candidate ids on the version (see :mod:`mongomem.ltm.documents`);
* superseding version *n* is done only by the writer that inserted version
  *n + 1* — whose ``_id`` is unique — so it needs no condition;
* the ledger moves ``pending`` → ``done``; ``pending`` is written before the
  first memory write, so a candidate that is absent from the ledger has
  not touched any memory since its entry last expired (see below). ``done``
  is set after the decision-log entry (which holds the outcome) is written.
  The entry of a direct save made with an idempotency key also keeps that
  request's ``fingerprint``, so a reuse of the key for a different request can
  be refused.

**Ledger expiry.** A ``done`` entry carries ``expires_at`` (its settle time plus
the store's ``ledger_ttl_s``, none when that is ``None``); a TTL index deletes
it then, and :func:`ledger_expired` makes it count as absent from that moment
on, since MongoDB deletes only about once a minute. The expiry is fixed when
an entry settles: changing the setting changes the entries settled afterwards.
A ``pending`` entry has no expiry (see :mod:`mongomem.ltm.store`). When a
candidate is applied again after its entry expired, the decision-log entry of
the earlier application (:func:`outlived`) is kept under
:func:`archived_decision_id` and the new one takes the candidate id.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mongomem.ltm.plan import Decision, Outcome, evidence_rank
from mongomem.models import MemoryCandidate, MemoryType

__all__ = [
    "DONE",
    "EXPIRES",
    "HEAD",
    "OBSERVED_RANK",
    "PENDING",
    "SUPERSEDES",
    "archived_decision_id",
    "decision_entry",
    "done_update",
    "head_update",
    "ledger_expired",
    "outlived",
    "pending_entry",
    "reinforce_update",
    "supersede_update",
]

Doc = dict[str, Any]
PENDING = "pending"
DONE = "done"
EXPIRES = "expires_at"
#: Stored on a version: the :func:`~mongomem.ltm.plan.evidence_rank` of its latest evidence.
OBSERVED_RANK = "observed_rank"
#: Stored on a current version: the memory's highest version number, when history
#: versions were written after it (SPEC L2).
HEAD = "head"
#: Stored on a version an UPDATE wrote: the id of the version it superseded (or, for a
#: history version, the current one it was written under), so an interrupted apply is
#: completed against the right version.
SUPERSEDES = "supersedes"


def reinforce_update(candidate: MemoryCandidate, now: datetime) -> Doc:
    """Add the candidate's evidence; the version's evidence time (``observed_at`` and
    its rank) moves to the candidate's if that is later (SPEC L1, L2)."""
    add: Doc = {
        "candidate_ids": candidate.candidate_id,
        "evidence": candidate.evidence.model_dump(mode="python"),
    }
    definition = candidate.fields.get("definition")
    if candidate.memory_type == MemoryType.TAXONOMIC and isinstance(definition, str):
        add["variants"] = definition
    latest = {
        OBSERVED_RANK: evidence_rank(candidate.evidence),
        "observed_at": candidate.evidence.at,
    }
    return {"$addToSet": add, "$set": {"updated_at": now}, "$max": latest}


def head_update(version: int) -> Doc:
    """Note on the current version that the memory now has a version numbered ``version``
    (a history version written after it, SPEC L2), so the next version is numbered past it."""
    return {"$max": {HEAD: version}}


def supersede_update(by: str, now: datetime) -> Doc:
    return {
        "$set": {
            "status": "superseded",
            "superseded_at": now,
            "superseded_by": by,
            "updated_at": now,
        }
    }


def pending_entry(candidate_id: str, now: datetime, fingerprint: str | None = None) -> Doc:
    """A new ledger entry; ``fingerprint`` (a keyed direct save's request hash) is kept with it."""
    entry: Doc = {"_id": candidate_id, "state": PENDING, "at": now}
    if fingerprint is not None:
        entry["fingerprint"] = fingerprint
    return entry


def done_update(now: datetime, ttl_s: float | None) -> Doc:
    """Mark ledger entries done (the outcome itself is in the decision log), to expire
    ``ttl_s`` seconds from ``now`` (never when ``None``)."""
    fields: Doc = {"state": DONE, "at": now}
    if ttl_s is not None:
        fields[EXPIRES] = now + timedelta(seconds=ttl_s)
    return {"$set": fields}


def ledger_expired(entry: Doc, now: datetime) -> bool:
    """Whether ledger ``entry`` has expired at ``now``; it then counts as absent."""
    expires = entry.get(EXPIRES)
    return isinstance(expires, datetime) and _utc(expires) <= now


def outlived(settled: datetime, now: datetime, ttl_s: float | None) -> bool:
    """Whether an application that settled at ``settled`` is one whose ledger entry has
    expired by ``now`` — a different application than one under way at ``now``."""
    return ttl_s is not None and _utc(settled) + timedelta(seconds=ttl_s) <= now


def archived_decision_id(candidate_id: str, settled: datetime) -> str:
    """Where the decision-log entry of the application of ``candidate_id`` that settled
    at ``settled`` is kept once a later application of the candidate takes its id."""
    return f"{candidate_id}@{_utc(settled).isoformat()}"


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


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
        "model_says_corrects": candidate.corrects,
        "observed_at": candidate.evidence.at,
        # whose content it came from: an erasure finds the user's decisions by it
        "evidence": candidate.evidence.model_dump(mode="python"),
        "attempts": outcome.attempts,
        "outcome": outcome.model_dump(mode="python"),
        "at": now,
    }
    entry["action"] = decision.action.value
    return entry
