"""The watcher's :class:`~mongomem.stages.runtime.ports.CheckpointStore`: resume token and marks.

Each watcher share (``share`` of ``shares``) has its own resume token; the
session marks are per session, whichever share wrote them, so a share that
has no token of its own (the set of watchers changed) back-fills only what is
above the marks of the watchers before it.

The change stream is the watcher's record source; its position is not a
consumer group's offset but a resume token plus one high-water mark (highest
acknowledged seq) per session, kept in MongoDB ``checkpoints``. The watcher
saves a checkpoint only after Kafka acknowledged everything before it (see
:mod:`mongomem.stages.watcher` and the runtime's delivery contract).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import CHECKPOINTS, Document
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import StorageError
from mongomem.models import SessionKey, utcnow
from mongomem.stages.watcher_logic import Slot, checkpoint_updates, token_id, usable_token

__all__ = ["WatcherCheckpoint", "WatcherCheckpoints"]

log = logging.getLogger("mongomem.watcher")


@dataclass(frozen=True)
class WatcherCheckpoint:
    """Marks to raise (``$max``: never moved back) and, if any, the token to store."""

    marks: Mapping[Slot, int] = field(default_factory=dict)
    token: Mapping[str, Any] | None = None


class WatcherCheckpoints:
    """Resume token and session marks of one topic's watcher, in MongoDB ``checkpoints``."""

    def __init__(
        self, db: AsyncDatabase[Document], topic: str, share: int = 0, shares: int = 1
    ) -> None:
        self._checkpoints = db[CHECKPOINTS]
        self._erasures = ErasureRegister(db)
        self._topic = topic
        self._share = share
        self._shares = shares

    async def load(self) -> WatcherCheckpoint | None:
        token = await self.load_token()
        marks = await self.load_marks()
        return WatcherCheckpoint(marks, token) if token is not None or marks else None

    async def load_token(self) -> dict[str, Any] | None:
        """The stored resume token (``None``: none, or not a usable one — logged)."""
        try:
            doc = await self._checkpoints.find_one(
                {"_id": token_id(self._topic, self._share, self._shares)}
            )
        except PyMongoError as exc:
            raise StorageError(f"could not read the watcher checkpoint: {exc}") from exc
        if doc is None:
            return None
        token = usable_token(doc.get("token"))
        if token is None:
            log.error("watcher: the stored resume token %r is not a resume token", doc.get("token"))
        return token

    async def load_marks(self) -> dict[Slot, int]:
        marks: dict[Slot, int] = {}
        try:
            cursor = self._checkpoints.find({"kind": "watcher-mark", "topic": self._topic})
            async for doc in cursor:
                marks[(doc["project_id"], doc["user_id"], doc["session_id"])] = int(doc["seq"])
        except PyMongoError as exc:
            raise StorageError(f"could not read the watcher's session marks: {exc}") from exc
        return marks

    async def save(self, checkpoint: WatcherCheckpoint) -> bool:
        """Write the marks and then the token (either may be empty) in one ordered bulk
        write; ``False`` when there was nothing to write.

        Marks of erased sessions are left out (SPEC J3): an erasure removes them, and a
        turn of such a session still in the change stream must not bring one back.
        """
        marks = checkpoint.marks
        if marks:
            keys = {s: SessionKey(project_id=s[0], user_id=s[1], session_id=s[2]) for s in marks}
            gone = await self._erasures.erased_among(keys.values())
            if gone:
                marks = {s: seq for s, seq in marks.items() if keys[s] not in gone}
        writes = [
            UpdateOne(filter_, update, upsert=True)
            for filter_, update in checkpoint_updates(
                self._topic,
                marks,
                checkpoint.token,
                utcnow(),
                share=self._share,
                shares=self._shares,
            )
        ]
        if not writes:
            return False
        try:
            await self._checkpoints.bulk_write(writes, ordered=True)
        except PyMongoError as exc:
            raise StorageError(f"could not store the watcher checkpoint: {exc}") from exc
        return True
