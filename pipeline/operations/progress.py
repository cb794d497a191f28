"""Processing status (SPEC J6): how far extraction got with each snapshot, per type.

The ``processing_status`` collection holds one document per (snapshot, memory
type), ``_id`` = :func:`progress_id`:

* the **extractor** of the type writes it once it has handled the snapshot:
  the session's ids, the snapshot's seq range and the ids of the candidates it
  published — an empty list when the LLM found nothing of its type, so such a
  snapshot is done at once — or, when the snapshot went to the dead-letter
  topic, the error;
* the **reconciler** adds every candidate id it has applied (``$addToSet``;
  a replay adds nothing new) and the error of a candidate it dead-lettered.

Both writes are single-document upserts on ``_id``, idempotent and
commutative, so the order in which the two stages get there does not matter.
Each stage writes before it commits its Kafka offsets (MongoDB away is retried
for as long as it takes), so a handled record is always recorded.

A (snapshot, type) is **done** when its extractor's entry lists candidates all
of which are reconciled, **dead-lettered** when either stage dead-lettered it
(with the error; a candidate dead-lettered and applied since does not count),
**pending** otherwise. :func:`session_status` is two reads: the session's last
turn by ``_id`` probes (:func:`~mongomem.stm.turns.last_turn_seq`: seqs are
gap-free, so one round trip under 64 turns, on every server), then one
``aggregate`` on ``snapshots`` — the session's snapshots, with its processing
entries joined in by an uncorrelated ``$lookup``, each served by that
collection's session index on MongoDB — and no Kafka call. (One aggregate
anchored on the last turn did both, but the sort by seq it needs is a scan of
every turn on mongo-java-server: issue 28. A single-collection read would need
the windower and every ``record_turn`` to copy what they write into
``processing_status``: a write on the hot path of every turn.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime
from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import DECISIONS, SNAPSHOTS, TURNS, Document
from mongomem.errors import NotFound, StorageError
from mongomem.models import Frozen, MemoryCandidate, SessionKey, Snapshot, stable_id
from mongomem.stm.turns import last_turn_seq

__all__ = [
    "PROGRESS",
    "ProcessingState",
    "ProcessingStatus",
    "Progress",
    "SnapshotProgress",
    "TypeProgress",
    "progress_id",
    "session_status",
    "type_progress",
    "until_stored",
]

PROGRESS = "processing_status"
log = logging.getLogger(__name__)

ProcessingState = Literal["pending", "done", "dead_lettered"]


def progress_id(snapshot_id: str, memory_type: str) -> str:
    return stable_id("prog", snapshot_id, memory_type)


class TypeProgress(Frozen):
    """One memory type's progress with one snapshot."""

    memory_type: str
    state: ProcessingState
    #: Candidates the extractor published (``None``: not extracted yet).
    candidates: int | None = None
    reconciled: int = 0
    error: str | None = None


class SnapshotProgress(Frozen):
    snapshot_id: str
    first_seq: int
    last_seq: int
    closed_at: AwareDatetime | None = None
    state: ProcessingState
    types: tuple[TypeProgress, ...]


class ProcessingStatus(Frozen):
    """Every snapshot of one session so far, with each enabled type's progress.

    ``state`` is ``done`` when every (snapshot, type) is done (also when there
    is no snapshot yet), ``dead_lettered`` when none is pending and some are
    dead-lettered, else ``pending``. Turns not yet promoted to a snapshot are
    not counted: they wait for their window (message count, idle timeout);
    ``last_turn_seq`` beyond ``last_snapshot_seq`` says how many there are.
    """

    project_id: str
    user_id: str
    session_id: str
    memory_types: tuple[str, ...]
    state: ProcessingState
    snapshots: tuple[SnapshotProgress, ...]
    #: The seq of the session's last recorded turn (0: none); session ends are not turns.
    last_turn_seq: int = 0
    #: The last seq covered by a snapshot (0: none yet).
    last_snapshot_seq: int = 0

    def where(self, state: ProcessingState) -> list[tuple[str, str, str | None]]:
        """``(snapshot_id, memory_type, error)`` of every pair in ``state``."""
        return [
            (s.snapshot_id, t.memory_type, t.error)
            for s in self.snapshots
            for t in s.types
            if t.state == state
        ]


def _overall(states: Sequence[ProcessingState]) -> ProcessingState:
    if "pending" in states:
        return "pending"
    return "dead_lettered" if "dead_lettered" in states else "done"


def type_progress(memory_type: str, row: Document | None) -> TypeProgress:
    """The state of one (snapshot, type) from its entry (``None``: none yet)."""
    if row is None:
        return TypeProgress(memory_type=memory_type, state="pending")
    expected = row.get("candidates")
    reconciled = set(row.get("reconciled", ()))
    count = None if expected is None else len(expected)
    done = 0 if expected is None else len(reconciled & set(expected))
    # a candidate dead-lettered once and applied since (a replay of the letter) is fine
    failures = [f for f in row.get("failed", ()) if f.get("candidate_id") not in reconciled]
    dead = row.get("dead_letter")
    error = dead.get("error") if isinstance(dead, dict) else None
    if error is None and failures:
        error = str(failures[0].get("error"))
    if error is not None:
        return TypeProgress(
            memory_type=memory_type,
            state="dead_lettered",
            candidates=count,
            reconciled=done,
            error=error,
        )
    state: ProcessingState = "done" if count is not None and done == count else "pending"
    return TypeProgress(memory_type=memory_type, state=state, candidates=count, reconciled=done)


async def _run(op: Awaitable[Any]) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB failed (processing status): {exc}") from exc


async def until_stored(
    write: Callable[[], Awaitable[None]],
    *,
    what: str,
    backoff_s: float = 0.2,
    backoff_max_s: float = 10.0,
) -> None:
    """Run ``write`` until MongoDB takes it (a retriable :class:`StorageError` is retried with
    back-off; a permanent one is raised)."""
    delay = backoff_s
    while True:
        try:
            await write()
            return
        except StorageError as exc:
            if not exc.retriable:
                raise
            log.warning("%s not stored (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff_max_s)


def _session(session: SessionKey) -> Document:
    return {
        "project_id": session.project_id,
        "user_id": session.user_id,
        "session_id": session.session_id,
    }


class Progress:
    """The ``processing_status`` collection: written by the stages, read by the SDK."""

    def __init__(self, db: AsyncDatabase[Document]) -> None:
        self._db = db
        self.entries = db[PROGRESS]

    async def ensure_index(self) -> None:
        await _run(
            self.entries.create_index(
                [("project_id", ASCENDING), ("user_id", ASCENDING), ("session_id", ASCENDING)],
                name="session",
            )
        )

    def _snapshot_fields(self, snapshot: Snapshot, memory_type: str, now: datetime) -> Document:
        return {
            **_session(snapshot.session),
            "snapshot_id": snapshot.snapshot_id,
            "memory_type": memory_type,
            "first_seq": snapshot.first_seq,
            "last_seq": snapshot.last_seq,
            "at": now,
        }

    async def extracted(
        self,
        snapshot: Snapshot,
        memory_type: str,
        candidate_ids: Sequence[str],
        now: datetime,
        dropped: Mapping[str, int] | None = None,
    ) -> None:
        """The extractor of ``memory_type`` published ``candidate_ids`` (maybe none).

        ``dropped`` counts the answer's items that code dropped, by reason (SPEC L4:
        ungrounded, merged): kept on the entry, and — when there are any — in the
        decision log too, as one ``extraction-drops`` entry per snapshot and type
        (found and erased with the user's other decisions through its evidence)."""
        drops = {k: int(v) for k, v in (dropped or {}).items() if v}
        fields = {
            **self._snapshot_fields(snapshot, memory_type, now),
            "candidates": list(candidate_ids),
            "dropped": drops,
            "dead_letter": None,
        }
        await _run(
            self.entries.update_one(
                {"_id": progress_id(snapshot.snapshot_id, memory_type)},
                {"$set": fields},
                upsert=True,
            )
        )
        if drops:
            entry = {
                "kind": "extraction-drops",
                "snapshot_id": snapshot.snapshot_id,
                "memory_type": memory_type,
                "scope": {"project_id": snapshot.project_id, "user_id": snapshot.user_id},
                "evidence": {
                    "source": "snapshot",
                    "ref": snapshot.snapshot_id,
                    "session_id": snapshot.session_id,
                    "user_id": snapshot.user_id,
                },
                "dropped": drops,
                "at": now,
            }
            drop_id = stable_id("drops", snapshot.snapshot_id, memory_type)
            await _run(self._db[DECISIONS].replace_one({"_id": drop_id}, entry, upsert=True))

    async def extraction_failed(
        self, snapshot: Snapshot, memory_type: str, error: str, now: datetime
    ) -> None:
        """The extractor of ``memory_type`` dead-lettered ``snapshot``."""
        fields = {
            **self._snapshot_fields(snapshot, memory_type, now),
            "dead_letter": {"stage": f"extractor.{memory_type}", "error": error},
        }
        await _run(
            self.entries.update_one(
                {"_id": progress_id(snapshot.snapshot_id, memory_type)},
                {"$set": fields},
                upsert=True,
            )
        )

    async def reconciled(self, candidates: Sequence[MemoryCandidate]) -> None:
        """The reconciler applied ``candidates`` (those extracted from snapshots count)."""
        by_entry: dict[str, list[str]] = {}
        for c in candidates:
            if c.evidence.source == "snapshot":
                key = progress_id(c.evidence.ref, c.memory_type)
                by_entry.setdefault(key, []).append(c.candidate_id)
        if by_entry:
            await _run(
                self.entries.bulk_write(
                    [
                        UpdateOne(
                            {"_id": key}, {"$addToSet": {"reconciled": {"$each": ids}}}, upsert=True
                        )
                        for key, ids in by_entry.items()
                    ],
                    ordered=False,
                )
            )

    async def reconcile_failed(self, candidate: MemoryCandidate, error: str) -> None:
        """The reconciler dead-lettered ``candidate``."""
        if candidate.evidence.source != "snapshot":
            return
        failure = {"candidate_id": candidate.candidate_id, "error": error}
        await _run(
            self.entries.update_one(
                {"_id": progress_id(candidate.evidence.ref, candidate.memory_type)},
                {"$addToSet": {"failed": failure}},
                upsert=True,
            )
        )

    async def _aggregate(self, collection: str, pipeline: list[Document]) -> list[Document]:
        cursor = await _run(self._db[collection].aggregate(pipeline))
        found: list[Document] = await _run(cursor.to_list())
        return found

    async def session_status(
        self, session: SessionKey, memory_types: Sequence[str]
    ) -> ProcessingStatus:
        """Every snapshot of ``session`` with the progress of each of ``memory_types``.

        Raises :class:`~mongomem.errors.NotFound` for a session with no turn and
        no snapshot: an unknown (say, mistyped) session is not "done".
        """
        query = _session(session)
        entries = {
            "$lookup": {
                "from": PROGRESS,
                "as": "entries",
                "pipeline": [
                    {"$match": query},
                    {
                        "$project": {
                            "memory_type": 1,
                            "snapshot_id": 1,
                            "candidates": 1,
                            "reconciled": 1,
                            "failed": 1,
                            "dead_letter": 1,
                        }
                    },
                ],
            }
        }
        snapshot_fields = {"first_seq": 1, "last_seq": 1, "closed_at": 1}
        # The last turn by _id probes (one round trip under 64 turns): a filter on the
        # session sorted by seq is served by the unique index on MongoDB but is a scan
        # of every turn on mongo-java-server (issue 28).
        last_seq = await last_turn_seq(self._db[TURNS], session)
        grouped = await self._aggregate(
            SNAPSHOTS,
            [
                {"$match": query},
                {"$project": snapshot_fields},
                {"$group": {"_id": None, "snapshots": {"$push": "$$ROOT"}}},
                entries,
            ],
        )
        snaps = grouped[0]["snapshots"] if grouped else []
        rows = grouped[0]["entries"] if grouped else []
        if not snaps and not last_seq:
            raise NotFound(
                f"no session {session.session_id!r} of user {session.user_id!r} in project "
                f"{session.project_id!r}: no turn was recorded in it"
            )
        found = {(r["snapshot_id"], r["memory_type"]): r for r in rows}
        types = tuple(dict.fromkeys(memory_types))
        out = []
        for snap in sorted(snaps, key=lambda d: int(d["first_seq"])):
            progress = tuple(type_progress(t, found.get((snap["_id"], t))) for t in types)
            out.append(
                SnapshotProgress(
                    snapshot_id=snap["_id"],
                    first_seq=int(snap["first_seq"]),
                    last_seq=int(snap["last_seq"]),
                    closed_at=snap.get("closed_at"),
                    state=_overall([p.state for p in progress]),
                    types=progress,
                )
            )
        return ProcessingStatus(
            **query,
            memory_types=types,
            snapshots=tuple(out),
            state=_overall([s.state for s in out]),
            last_turn_seq=last_seq,
            last_snapshot_seq=max((s.last_seq for s in out), default=0),
        )


async def session_status(
    db: AsyncDatabase[Document], session: SessionKey, memory_types: Sequence[str]
) -> ProcessingStatus:
    """:meth:`Progress.session_status` on ``db``."""
    return await Progress(db).session_status(session, memory_types)
