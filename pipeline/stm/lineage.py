"""Which snapshot holds a turn: the snapshot's own session and seq range, no per-turn writes.

A snapshot records its session and its first and last seq; one session's
snapshots are disjoint and contiguous (see :mod:`mongomem.stages.windowing`).
So the snapshot holding seq *n* of a session is that session's snapshot with
the smallest ``last_seq >= n``, if its ``first_seq <= n`` — one ``find_one``
served by the ``(project_id, user_id, session_id, last_seq)`` index
(:data:`SNAPSHOT_LINEAGE_INDEX`, created by :func:`ensure_lineage_index`;
windowing creates it at start). The turns themselves are never updated: a
turn is written once, by ``record_turn``.
"""

from __future__ import annotations

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import SNAPSHOTS, Document
from mongomem.errors import StorageError
from mongomem.models import SessionKey

__all__ = ["SNAPSHOT_LINEAGE_INDEX", "ensure_lineage_index", "snapshot_holding"]

#: The index on ``snapshots`` that answers lineage (and where a session resumes).
SNAPSHOT_LINEAGE_INDEX = "session_last_seq"


async def ensure_lineage_index(db: AsyncDatabase[Document]) -> None:
    """Create the ``(project_id, user_id, session_id, last_seq)`` index of ``snapshots``."""
    try:
        await db[SNAPSHOTS].create_index(
            [("project_id", 1), ("user_id", 1), ("session_id", 1), ("last_seq", -1)],
            name=SNAPSHOT_LINEAGE_INDEX,
        )
    except PyMongoError as exc:
        raise StorageError(f"could not create the snapshots index: {exc}") from exc


async def snapshot_holding(
    db: AsyncDatabase[Document], session: SessionKey, seq: int
) -> str | None:
    """The id of the snapshot that holds the session's turn ``seq`` (``None``: none yet)."""
    try:
        doc = await db[SNAPSHOTS].find_one(
            {
                "project_id": session.project_id,
                "user_id": session.user_id,
                "session_id": session.session_id,
                "last_seq": {"$gte": seq},
            },
            projection={"first_seq": 1},
            sort=[("last_seq", 1)],
        )
    except PyMongoError as exc:
        raise StorageError(f"could not look up the snapshot of a turn: {exc}") from exc
    if doc is None or int(doc["first_seq"]) > seq:
        return None
    return str(doc["_id"])
