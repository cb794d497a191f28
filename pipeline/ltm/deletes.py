"""Deleting a memory (SPEC J1): a ``DELETE`` version closes its history.

:func:`delete_memory` writes version *n + 1* of the memory — status
``deleted``, action ``DELETE``, with the time (``created_at``), the ``actor``
and the ``reason``, the key and text of the current version (which is not
version *n* when an older statement entered history after it, SPEC L2) — and
supersedes every version still current, then bumps the scope log, so:

* **Everywhere at once.** Every read filters ``status: current`` (get, list,
  ``$vectorSearch``), and the exact-search cache of *every* process checks the
  scope log before each search and neighbour lookup
  (:meth:`~mongomem.ltm.index.IndexCache.fresh`): the next read in any process
  after :func:`delete_memory` returns no longer sees the memory. The bounded
  time is zero — there is no time-based cache anywhere.
* **Conflict-safe, no transactions.** The ``DELETE`` version's ``_id`` is
  ``make_version_id(memory_id, n + 1)``, the id an UPDATE of version *n* would
  take: of a delete and an UPDATE racing on one version, one insert wins, and
  the other re-reads and goes on from the new version (an UPDATE that loses
  re-plans and, finding no current memory, ADDs afresh).
* **Idempotent.** Deleting a deleted memory answers the earlier deletion and
  changes nothing (it also completes one that was interrupted between the
  insert and the supersede, during which the memory still read as current).
* **No resurrection.** A later ADD of the same key gets a *new* memory id
  (:func:`~mongomem.ltm.plan.memory_id_for` with the next ``incarnation``,
  chosen by :meth:`~mongomem.ltm.store.MemoryStore.decide`): the deleted
  memory's versions stay as they are, in its history only.

A decision-log entry (action ``DELETE``) records the deletion as well.

**Expiry** (SPEC J8, :mod:`mongomem.ltm.retention`) is the same write with
status ``expired`` and action ``EXPIRE`` (``expire=True``): it closes the
history just as a deletion does, with every guarantee above, so history says
why the memory is gone and a later extraction of the key is a fresh ADD.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import DESCENDING
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongomem.errors import StorageError, WriteConflict
from mongomem.ltm.documents import from_document, scope_filter
from mongomem.ltm.host import StoreCollections
from mongomem.ltm.index import bump_scope
from mongomem.ltm.writes import supersede_update
from mongomem.models import (
    CLOSED_STATUSES,
    Action,
    MemoryScope,
    MemoryStatus,
    MemoryVersion,
    stable_id,
)

__all__ = ["Deleted", "delete_memory", "deletion_id"]

Doc = dict[str, Any]
_ATTEMPTS = 16


def deletion_id(memory_id: str, version: int) -> str:
    """The candidate id (and decision-log id) of the deletion that wrote ``version``."""
    return stable_id("del", memory_id, version)


@dataclass(frozen=True)
class Deleted:
    """The ``DELETE`` version a deletion wrote (or found), and whether it was there before."""

    version: MemoryVersion
    already: bool


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB operation failed: {exc}") from exc


async def delete_memory(
    store: StoreCollections,
    memory_id: str,
    scopes: Sequence[MemoryScope],
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    expire: bool = False,
    still: Callable[[Doc], bool] | None = None,
) -> Deleted | None:
    """Delete the memory ``memory_id`` if it lives in one of ``scopes`` (``None`` if not).

    ``expire``: write an ``EXPIRE`` version (status ``expired``) instead. ``still``:
    a last check of the latest version just before the write (``False``: nothing is
    written and ``None`` returned — e.g. it was reinforced since it was chosen).
    """
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # what BSON keeps
    ors = [scope_filter(s.project_id, s.user_id) for s in scopes]
    query: Doc = {"memory_id": memory_id, "$or": ors}
    for _ in range(_ATTEMPTS):
        latest = await _run(
            store.memories.find_one(query, {"embedding": 0}, sort=[("version", DESCENDING)])
        )
        if latest is None:
            return None
        if latest.get("status") in CLOSED_STATUSES:
            await _complete(store, latest, now)
            return Deleted(from_document(latest), already=True)
        # The version the deletion closes is the current one, which is not the highest
        # when an older statement entered history after it (SPEC L2).
        closes = latest
        if latest.get("status") != MemoryStatus.CURRENT.value:
            current = await _run(
                store.memories.find_one(
                    {**query, "status": MemoryStatus.CURRENT.value},
                    {"embedding": 0},
                    sort=[("version", DESCENDING)],
                )
            )
            closes = current or latest
        if still is not None and not still(closes):
            return None
        version = int(latest["version"]) + 1
        cid = deletion_id(memory_id, version)
        tombstone = {
            **{k: v for k, v in closes.items() if k not in _NOT_COPIED},
            "_id": MemoryVersion.make_version_id(memory_id, version),
            "version": version,
            "status": (MemoryStatus.EXPIRED if expire else MemoryStatus.DELETED).value,
            "action": (Action.EXPIRE if expire else Action.DELETE).value,
            "evidence": [],
            "candidate_id": cid,
            "candidate_ids": [cid],
            "created_at": now,
            "updated_at": now,
            "reason": reason,
            "actor": actor,
        }
        try:
            await store.memories.insert_one(tombstone)
        except DuplicateKeyError:
            continue  # an UPDATE (or another delete) took version n + 1: look again
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
        await _complete(store, tombstone, now)
        return Deleted(from_document(tombstone), already=False)
    raise WriteConflict(f"memory {memory_id} kept changing while it was being deleted")


#: Fields of the version before that a ``DELETE`` version does not take over.
_NOT_COPIED = frozenset(
    {
        "embedding",
        "superseded_at",
        "superseded_by",
        "variants",
        "candidate_ids",
        "evidence",
        "head",
    }
)


async def _complete(store: StoreCollections, tombstone: Doc, now: datetime) -> None:
    """Supersede every version below the ``DELETE`` one still current, bump the scope log,
    log the deletion.

    Every step is idempotent, so a repeat completes an interrupted deletion.
    """
    memory_id, version = tombstone["memory_id"], int(tombstone["version"])
    scope = MemoryScope.model_validate(tombstone["scope"])
    memory_type = tombstone["memory_type"]
    cid = tombstone["candidate_id"]
    # Every version below still marked current: the one before, and any a crash left
    # current beside it (readers take the higher of two; none may outlive the deletion).
    below = await _run(
        store.memories.find(
            {
                "memory_id": memory_id,
                "status": MemoryStatus.CURRENT.value,
                "version": {"$lt": version},
            },
            {"_id": 1, "version": 1},
        ).to_list()
    )
    superseded = False
    for doc in below:
        result = await _run(
            store.memories.update_one(
                {"_id": doc["_id"], "status": MemoryStatus.CURRENT.value},
                supersede_update(tombstone["_id"], now),
            )
        )
        superseded = superseded or bool(result.modified_count)
    # the version before is named even when it was superseded already (by an
    # interrupted attempt): the scope log must still tell other caches to drop it
    before = (
        [{"_id": MemoryVersion.make_version_id(memory_id, version - 1), "version": version - 1}]
        if version > 1
        else []
    )
    dropped = list({d["_id"]: d for d in [*below, *before]}.values())
    changed = [tombstone["_id"], *(d["_id"] for d in dropped)]
    logged = await _run(store.decisions.find_one({"_id": cid}, {"_id": 1}))
    if logged is not None and not superseded:
        return  # completed before
    rev = await _run(bump_scope(store.scope_log, scope, memory_type, changed, deleted=1))
    gone = [tombstone] + [
        {
            "_id": d["_id"],
            "memory_id": memory_id,
            "version": int(d["version"]),
            "key": "",
            "text": "",
            "status": MemoryStatus.SUPERSEDED.value,
        }
        for d in dropped
    ]
    store.cache.note_write(scope, memory_type, rev, gone)
    if logged is None:
        try:
            await store.decisions.insert_one(
                {
                    "_id": cid,
                    "candidate_id": cid,
                    "action": tombstone["action"],
                    "memory_id": memory_id,
                    "version": version,
                    "base_version": version - 1,
                    "memory_type": memory_type,
                    "scope": scope.model_dump(),
                    "key": tombstone["key"],
                    "reason": tombstone.get("reason"),
                    "actor": tombstone.get("actor"),
                    "at": tombstone["created_at"],
                }
            )
        except DuplicateKeyError:
            pass
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
