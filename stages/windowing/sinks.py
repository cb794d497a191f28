"""Where snapshots go: MongoDB (``snapshots``) and the snapshots topic.

:class:`SnapshotPublisher.deliver` is idempotent: the snapshot document is
upserted under its deterministic id and the snapshot is published (keyed by
session) and acknowledged by the broker before ``deliver`` returns. A
redelivery rewrites the same document and publishes the same message again —
consumers of the snapshots topic de-duplicate by ``snapshot_id``. The turns
are not written to: the snapshot's session and seq range are the lineage
(:mod:`mongomem.stm.lineage`). The bytes and the document are written by
:mod:`mongomem.stages.windowing.snapshot_encode` (exactly what
:func:`mongomem.codec.encode` and ``model_dump`` would give).
:meth:`SnapshotPublisher.deliver_many` does the same
for a batch of snapshots with unordered bulk writes of :data:`UPSERTS_PER_WRITE`
upserts side by side and the publishes pipelined (in
the given order, so one session's snapshots reach its partition in order); it
returns once all are stored and acknowledged, and if it raises, any of them
may or may not have been delivered. pymongo errors become
:class:`~mongomem.errors.StorageError`; the snapshots go out through the runtime's
:class:`~mongomem.stages.runtime.Publisher` (whose errors are
:class:`~mongomem.errors.BrokerError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from pymongo import ReplaceOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import SNAPSHOTS, TURNS, Document
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import StorageError
from mongomem.models import SessionKey, Snapshot, session_kafka_key
from mongomem.stages.runtime import Publisher
from mongomem.stages.windowing.snapshot_encode import (
    snapshot_document,
    snapshot_encoded,
    snapshot_value,
)
from mongomem.stm.lineage import ensure_lineage_index
from mongomem.stm.turns import END_EVENT

__all__ = [
    "UPSERTS_PER_WRITE",
    "SnapshotPublisher",
    "SnapshotResumePoints",
    "snapshot_document",
    "snapshot_key",
]

#: Snapshot upserts per bulk write; a delivery's writes go side by side. A snapshot document
#: is kilobytes: one write of hundreds of them is applied by one server thread, in series
#: (mongo-java-server took longer for one write of 1,000 than for 30 writes of 33, three at
#: a time: ``bench/results/windowing.md``).
UPSERTS_PER_WRITE = 32


class SnapshotPublisher:
    """The real :class:`~mongomem.stages.windowing.windower.SnapshotSink`."""

    def __init__(
        self,
        db: AsyncDatabase[Document],
        publisher: Publisher,
        topic: str,
        erasures: ErasureRegister | None = None,
    ) -> None:
        """``erasures``: the register asked before every delivery (default: one that
        reads at every delivery)."""
        self._snapshots = db[SNAPSHOTS]
        self._publisher = publisher
        self._topic = topic
        self._erasures = erasures if erasures is not None else ErasureRegister(db)

    async def _not_erased(self, snapshots: Sequence[Snapshot]) -> list[Snapshot]:
        """SPEC J3: a snapshot of an erased session is neither stored nor published."""
        sessions = [_session(s) for s in snapshots]
        gone = await self._erasures.erased_among(sessions)
        if not gone:
            return list(snapshots)
        return [s for s, session in zip(snapshots, sessions, strict=True) if session not in gone]

    async def deliver(self, snapshot: Snapshot) -> None:
        if not await self._not_erased([snapshot]):
            return
        # The two writes are independent and idempotent: run them concurrently.
        await asyncio.gather(self._store(snapshot), self._publish(snapshot))

    async def deliver_many(self, snapshots: Sequence[Snapshot]) -> None:
        """Store and publish all of ``snapshots`` (idempotent), with few round trips."""
        if snapshots:
            snapshots = await self._not_erased(snapshots)
        if snapshots:
            encoded = [snapshot_encoded(s) for s in snapshots]
            await asyncio.gather(
                self._store_many([document for _, document in encoded]),
                self._publish_many(snapshots, [value for value, _ in encoded]),
            )

    async def _store_many(self, documents: Sequence[Document]) -> None:
        """The upserts in unordered bulk writes of :data:`UPSERTS_PER_WRITE`, side by side."""
        upserts = [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in documents]
        writes = [
            self._snapshots.bulk_write(upserts[i : i + UPSERTS_PER_WRITE], ordered=False)
            for i in range(0, len(upserts), UPSERTS_PER_WRITE)
        ]
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, PyMongoError):
                error = f"could not store {len(documents)} snapshot(s): {outcome}"
                raise StorageError(error) from outcome
            if isinstance(outcome, BaseException):
                raise outcome

    async def _publish_many(self, snapshots: Sequence[Snapshot], values: Sequence[bytes]) -> None:
        sent = [
            await self._publisher.send(self._topic, value, key=snapshot_key(s))
            for s, value in zip(snapshots, values, strict=True)
        ]
        await asyncio.gather(*sent)

    async def _store(self, snapshot: Snapshot) -> None:
        try:
            await self._snapshots.replace_one(
                {"_id": snapshot.snapshot_id}, snapshot_document(snapshot), upsert=True
            )
        except PyMongoError as exc:
            raise StorageError(f"could not store snapshot {snapshot.snapshot_id}: {exc}") from exc

    async def _publish(self, snapshot: Snapshot) -> None:
        await (
            await self._publisher.send(
                self._topic, snapshot_value(snapshot), key=snapshot_key(snapshot)
            )
        )


def _session(snapshot: Snapshot) -> SessionKey:
    """``snapshot.session`` without validating its ids again (the snapshot's are valid)."""
    return SessionKey.model_construct(
        project_id=snapshot.project_id, user_id=snapshot.user_id, session_id=snapshot.session_id
    )


def snapshot_key(snapshot: Snapshot) -> bytes:
    """``snapshot.session.kafka_key()`` without building the session (its ids are valid)."""
    return session_kafka_key(snapshot.project_id, snapshot.user_id, snapshot.session_id)


class SnapshotResumePoints:
    """The real :class:`~mongomem.stages.windowing.ports.ResumePoints`: snapshots, then ends.

    Per session, a few at a time: the last snapshot's ``last_seq`` (one
    ``find_one`` served by the index that :meth:`ensure_index` creates), then
    the latest session end above it (``end_session`` passes its seq over;
    one ``find_one`` over the session's seqs above that snapshot, served by
    the turns' unique (session, seq) index).
    """

    def __init__(self, db: AsyncDatabase[Document], concurrency: int = 16) -> None:
        self._db = db
        self._snapshots = db[SNAPSHOTS]
        self._turns = db[TURNS]
        self._slots = asyncio.Semaphore(concurrency)

    async def ensure_index(self) -> None:
        """The lineage index of ``snapshots`` (``stm.lineage.ensure_lineage_index``)."""
        await ensure_lineage_index(self._db)

    async def last_promoted(self, sessions: Mapping[SessionKey, int]) -> dict[SessionKey, int]:
        async def one(session: SessionKey, below: int) -> tuple[SessionKey, int]:
            whose = {
                "project_id": session.project_id,
                "user_id": session.user_id,
                "session_id": session.session_id,
            }
            async with self._slots:
                doc = await self._snapshots.find_one(
                    whose, projection={"last_seq": 1}, sort=[("last_seq", -1)]
                )
                last = int(doc["last_seq"]) if doc is not None else 0
                end = await self._turns.find_one(
                    {**whose, "seq": {"$gt": last, "$lt": below}, "event": END_EVENT},
                    projection={"seq": 1},
                    sort=[("seq", -1)],
                )
            return session, int(end["seq"]) if end is not None else last

        try:
            found = await asyncio.gather(*(one(s, below) for s, below in sessions.items()))
        except PyMongoError as exc:
            raise StorageError(f"could not read where sessions resume: {exc}") from exc
        return dict(found)
