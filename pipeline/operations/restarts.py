"""Restart counts of the stages (SPEC G6): kept in MongoDB, so the inspector can show them.

A stage run by ``mongomem run`` restarts inside its process after a retriable
failure (:func:`mongomem.stages.runtime.supervise`). Each restart is counted in the
``stage_restarts`` collection, one document per stage (``_id`` the stage's
name): ``restarts`` (incremented), ``last_error`` and ``last_at``. Recording is
best effort: a stage often restarts *because* MongoDB is unreachable, so a
write that fails or takes longer than :data:`RECORD_WAIT_S` is given up with a
warning and never stops the restart; counts are then lower than the truth.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import AwareDatetime, BaseModel, ConfigDict
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import Document, connect, database
from mongomem.errors import StorageError
from mongomem.models import utcnow
from mongomem.settings import Settings

__all__ = ["STAGE_RESTARTS", "StageRestarts", "read_restarts", "record_restart"]

log = logging.getLogger(__name__)

STAGE_RESTARTS = "stage_restarts"
#: The longest a restart waits to be recorded.
RECORD_WAIT_S = 5.0


class StageRestarts(BaseModel):
    """How often a stage restarted, and the last error that made it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    restarts: int
    last_error: str
    last_at: AwareDatetime


async def _record(settings: Settings, stage: str, error: str) -> None:
    client = connect(settings.mongodb)
    try:
        await database(client, settings.mongodb)[STAGE_RESTARTS].update_one(
            {"_id": stage},
            {"$inc": {"restarts": 1}, "$set": {"last_error": error[:2000], "last_at": utcnow()}},
            upsert=True,
        )
    finally:
        await client.close()


async def record_restart(settings: Settings, stage: str, error: BaseException) -> None:
    """Count one restart of ``stage`` (best effort, see the module doc)."""
    try:
        await asyncio.wait_for(
            _record(settings, stage, f"{type(error).__name__}: {error}"), RECORD_WAIT_S
        )
    except (PyMongoError, StorageError, TimeoutError) as exc:
        log.warning("could not record the restart of %s: %s", stage, exc)


async def read_restarts(db: AsyncDatabase[Document]) -> list[StageRestarts]:
    """Every stage's restart count, by stage name."""
    try:
        docs: list[Document] = await db[STAGE_RESTARTS].find().sort("_id", 1).to_list(1000)
    except PyMongoError as exc:
        raise StorageError(f"could not read the stage restarts: {exc}") from exc
    return [
        StageRestarts(
            stage=str(d["_id"]),
            restarts=int(d.get("restarts", 0)),
            last_error=str(d.get("last_error", "")),
            last_at=d["last_at"],
        )
        for d in docs
    ]
