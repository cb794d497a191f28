"""Splitting a version that an older statement falls inside (SPEC L2).

One pass in the order of the world writes a new version at each change of
value and reinforces the current one while the value stays: said *window*
(day 0), *aisle* (day 1), *window* (day 2), it keeps three versions. Processed
day 0, day 2, day 1, the two *window* statements are one version (the second
reinforced the first) by the time *aisle* arrives between them. Entering
history beside that version would leave two versions — aisle, window — where
the in-order pass has three, so the version list would depend on the
processing order.

So before such a statement is placed, :func:`split_version` divides the
version it falls inside: the evidence said before the statement (and the
candidate ids that brought it) moves to a new version with the same text,
written ``superseded`` like any history version; the evidence said after it
stays. The statement then lies between the two and enters history between
them, and the version list (texts, statuses and evidence, in history order)
is the in-order one.

**Writes, without transactions.** The new version's ``candidate_id`` is
derived from (version, rank), so a repeat finds the half written by an
interrupted attempt instead of writing a second one; the insert comes first
and the ``$set`` of the remaining evidence second, so an interruption between
them leaves evidence counted twice, never lost, and the next attempt completes
it. The new version's ``_id`` is the memory's next number: a writer that took
that number first makes the insert fail with :class:`WriteConflict`, and the
caller plans again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import DESCENDING
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongomem.errors import StorageError, WriteConflict
from mongomem.ltm.host import StoreCollections
from mongomem.ltm.index import bump_scope
from mongomem.ltm.plan import evidence_rank
from mongomem.ltm.values import equivalent
from mongomem.ltm.writes import HEAD, OBSERVED_RANK, SUPERSEDES, head_update
from mongomem.models import (
    CLOSED_STATUSES,
    Evidence,
    MemoryScope,
    MemoryStatus,
    MemoryVersion,
    stable_id,
)

__all__ = ["ranks_of", "spanning", "split_version"]

Doc = dict[str, Any]


def _rank(item: Any) -> str | None:
    try:
        return evidence_rank(Evidence.model_validate(item))
    except ValueError:
        return None  # not readable as evidence: it places nothing


def ranks_of(doc: Doc) -> list[str]:
    """The evidence ranks of a stored version (unreadable items left out)."""
    return [r for r in (_rank(e) for e in doc.get("evidence", ())) if r is not None]


def spanning(docs: Sequence[Doc], rank: str, text: str) -> Doc | None:
    """The stated version whose evidence was said both before and after ``rank`` and whose
    text is not :func:`~mongomem.ltm.values.equivalent` to ``text`` (the version a statement
    of that rank and text falls inside), or ``None``."""
    for doc in docs:
        if doc.get("status") in CLOSED_STATUSES:
            continue
        ranks = ranks_of(doc)
        if ranks and min(ranks) < rank < max(ranks) and not equivalent(doc["text"], text):
            return doc
    return None


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB operation failed: {exc}") from exc


async def _moved_candidates(store: StoreCollections, doc: Doc, rank: str) -> set[str]:
    """The candidate ids of ``doc`` whose evidence was said before ``rank``: read from the
    decision log (each entry keeps its candidate's evidence); a direct save's evidence
    names its candidate (``ref``)."""
    ids = [str(c) for c in doc.get("candidate_ids", ())]
    older = set()
    for entry in await _run(store.decisions.find({"_id": {"$in": ids}}, {"evidence": 1}).to_list()):
        said = _rank(entry.get("evidence"))
        if said is not None and said < rank:
            older.add(str(entry["_id"]))
    for item in doc.get("evidence", ()):
        said = _rank(item)
        if said is not None and said < rank and item.get("ref") in ids:
            older.add(str(item["ref"]))
    return older


async def split_version(store: StoreCollections, version_id: str, rank: str, now: datetime) -> bool:
    """Split version ``version_id`` at ``rank`` (module docstring); ``False`` when there is
    nothing to split (any more)."""
    doc = await _run(store.memories.find_one({"_id": version_id}))
    if doc is None or doc.get("status") in CLOSED_STATUSES:
        return False
    evidence = list(doc.get("evidence", ()))
    before = [e for e in evidence if (_rank(e) or "") < rank]
    after = [e for e in evidence if (_rank(e) or "") > rank]
    if not before or not after:
        return False
    memory_id = str(doc["memory_id"])
    split_id = stable_id("split", version_id, rank)
    moved = await _moved_candidates(store, doc, rank)
    kept_ids = [c for c in doc.get("candidate_ids", ()) if c not in moved]
    # each half keeps at least one id per evidence item (the count is the number of ids)
    kept_ids = kept_ids or [f"evidence:{e.get('ref', '')}" for e in after]
    moved_ids = sorted(moved) or [f"evidence:{e.get('ref', '')}" for e in before]
    current = await _run(
        store.memories.find_one(
            {"memory_id": memory_id, "status": MemoryStatus.CURRENT.value},
            {"_id": 1},
            sort=[("version", DESCENDING)],
        )
    )
    current_id = str(current["_id"]) if current is not None else version_id
    changed = [version_id, current_id]
    found = await _run(
        store.memories.find_one({"memory_id": memory_id, "candidate_id": split_id}, {"_id": 1})
    )
    if found is None:
        highest = await _run(
            store.memories.find_one(
                {"memory_id": memory_id}, {"version": 1}, sort=[("version", DESCENDING)]
            )
        )
        number = int(highest["version"]) + 1 if highest is not None else 1
        ranks = [r for r in (_rank(e) for e in before) if r is not None]
        half = {
            **{k: v for k, v in doc.items() if k not in (HEAD, "superseded_at", "superseded_by")},
            "_id": MemoryVersion.make_version_id(memory_id, number),
            "version": number,
            "status": MemoryStatus.SUPERSEDED.value,
            "superseded_at": now,
            "superseded_by": current_id,
            SUPERSEDES: current_id,
            "evidence": before,
            "candidate_id": split_id,
            "candidate_ids": moved_ids,
            OBSERVED_RANK: max(ranks, default=""),
            "observed_at": max(e["at"] for e in before),
            "updated_at": now,
            "reason": f"split from v{doc['version']}: an older statement was said between "
            "its evidence",
        }
        try:
            await store.memories.insert_one(half)
        except DuplicateKeyError as exc:
            raise WriteConflict(f"version {number} of {memory_id} was taken meanwhile") from exc
        except PyMongoError as exc:
            raise StorageError(f"MongoDB write failed: {exc}") from exc
        await _run(store.memories.update_one({"_id": current_id}, head_update(number)))
        changed.append(str(half["_id"]))
    await _run(
        store.memories.update_one(
            {"_id": version_id}, {"$set": {"evidence": after, "candidate_ids": kept_ids}}
        )
    )
    scope = MemoryScope.model_validate(doc["scope"])
    await _run(bump_scope(store.scope_log, scope, str(doc["memory_type"]), changed))
    return True
