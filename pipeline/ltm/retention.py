"""Retention (SPEC J8): a memory of a type with a retention that was not reinforced for
``expire_after_days`` expires.

*Not reinforced* means: no evidence of its current version is at or after the
cut-off (``now - expire_after_days``). Every ADD, UPDATE and REINFORCE adds
evidence with its time (a snapshot's close time, or a direct save's), so this
is the last time anything confirmed the memory — for turns recorded with their
own past time (``record_turn(at=)``) that is their time, not the import's.

**Expired, kept in history.** An expired memory gets an ``EXPIRE`` version
(status ``expired``), written exactly as a deletion's ``DELETE`` version is
(:mod:`mongomem.ltm.deletes`, ``expire=True``): it stops being current everywhere
at once, its history says why it went and when, and a later extraction of the
same key is a fresh ADD under a new memory id, never a resurrection. Deleting
its documents instead would lose the audit trail and let the key's old id be
taken again; keeping them costs only storage, which an erasure still removes.

**Who runs it.** :func:`expire_unreinforced` is one sweep over every scope of
the database, for the types the project config gives a retention
(``memory.retention``); ``mongomem expire`` runs it (a cron job, or a
Kubernetes CronJob, once a day is plenty). A sweep is:

* *bounded*: at most ``limit`` memories expire per run (``more`` says there
  were others; the next run takes them);
* *idempotent*: a memory already expired (or deleted) is left as it is, and
  every write is the deletion's idempotent one, so two sweeps at once, or a
  sweep after a crash, expire each memory once;
* *safe against a late reinforcement*: the latest version is read again just
  before the write, and one reinforced since it was chosen is left current.

The sweep's query (type, ``status: current``, no evidence at or after the
cut-off) is served by the ``retention`` index it creates.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING
from pymongo.errors import PyMongoError

from mongomem.errors import InputError, StorageError
from mongomem.ltm.deletes import delete_memory
from mongomem.models import MemoryScope, MemoryStatus, utcnow
from mongomem.project_config import load_project_config
from mongomem.settings import Settings

if TYPE_CHECKING:
    from mongomem.ltm.store import MemoryStore

__all__ = [
    "RETENTION_INDEX",
    "ExpiryResult",
    "expire_unreinforced",
    "last_evidence",
    "retention_rules",
]

RETENTION_INDEX = "retention"
Doc = dict[str, Any]


def retention_rules(settings: Settings) -> dict[str, float]:
    """Memory type → days, from the project config (empty: nothing expires)."""
    if settings.project_config is None:
        return {}
    config = load_project_config(settings.project_config)
    return {t: r.expire_after_days for t, r in config.memory.retention.items()}


class ExpiryResult(BaseModel):
    """What one sweep expired, by type; ``more``: the limit stopped it before the end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    expired: int
    by_type: dict[str, int]
    more: bool


def last_evidence(doc: Doc) -> datetime | None:
    """The time of the newest evidence of a stored version (``None``: none has a time)."""
    times = []
    for item in doc.get("evidence", ()):
        at = item.get("at") if isinstance(item, dict) else None
        if isinstance(at, datetime):
            times.append(at if at.tzinfo else at.replace(tzinfo=UTC))
    return max(times, default=None)


def _stale(cutoff: datetime) -> Any:
    def still(latest: Doc) -> bool:
        newest = last_evidence(latest)
        return latest.get("status") == MemoryStatus.CURRENT and (newest is None or newest < cutoff)

    return still


async def expire_unreinforced(
    store: MemoryStore,
    rules: Mapping[str, float],
    *,
    now: datetime | None = None,
    limit: int = 1000,
    actor: str = "retention",
) -> ExpiryResult:
    """Expire the current memories of each type in ``rules`` (type → days) not reinforced
    within its days, at most ``limit`` in all (module docstring)."""
    if limit < 1:
        raise InputError("limit must be at least 1", field="limit")
    now = now or utcnow()
    memories = store.memories
    try:
        await memories.create_index(
            [("memory_type", ASCENDING), ("status", ASCENDING), ("evidence.at", ASCENDING)],
            name=RETENTION_INDEX,
        )
    except PyMongoError as exc:
        raise StorageError(f"could not create the retention index: {exc}") from exc
    by_type: dict[str, int] = {}
    more = False
    left = limit
    for memory_type, days in sorted(rules.items()):
        if left <= 0:
            more = True
            break
        cutoff = now - timedelta(days=days)
        query = {
            "memory_type": memory_type,
            "status": MemoryStatus.CURRENT.value,
            "evidence.at": {"$not": {"$gte": cutoff}},
        }
        try:
            found = await memories.find(
                query, {"memory_id": 1, "scope": 1}, limit=left + 1
            ).to_list()
        except PyMongoError as exc:
            raise StorageError(f"MongoDB failed (retention): {exc}") from exc
        if len(found) > left:
            more, found = True, found[:left]
        reason = f"not reinforced for {days:g} days (the retention of {memory_type})"
        done = 0
        for doc in found:
            scope = MemoryScope.model_validate(doc["scope"])
            expired = await delete_memory(
                store,
                doc["memory_id"],
                [scope],
                actor=actor,
                reason=reason,
                now=now,
                expire=True,
                still=_stale(cutoff),
            )
            if expired is not None and not expired.already:
                done += 1
        left -= len(found)
        if done:
            by_type[memory_type] = done
    return ExpiryResult(expired=sum(by_type.values()), by_type=by_type, more=more)
